"""`sparkbuild wheel`: prepare, vendor, check the cache, doctor, build, write a wheelhouse.

Online, the vendor step fills the cache first; offline it only plans.  Either way the
build itself runs the same way, from the cache alone, and before anything compiles the
cache must hold every planned source, the build-requirement wheels and the crates: each
missing entry is named in one :class:`CacheMissError`.

The work directory is ``CACHE/work/<recipe name>`` and stays at the same path from run
to run, so ccache recognises unchanged translation units of a re-prepared tree; a file
lock keeps two runs of one recipe out of each other's way.  With a shared compile cache
(``--compile-cache``) the work directory and the build environment move to the stable
build root (:mod:`sparkbuild.team.compile_cache`), the same path on every machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sparkbuild.compile.build_record import BuildTorch, FinishedBuild, build_torch
from sparkbuild.compile.doctor import doctor_plan, ready_for_build
from sparkbuild.compile.tree_build import BuildOutcome, BuildRequest, build_tree, ensure_build_env
from sparkbuild.console import info, shown, step
from sparkbuild.errors import SparkbuildError
from sparkbuild.flashinfer.alongside import aot_alongside, builder_for
from sparkbuild.jobplan.machine import BuildPlan, MachineFacts
from sparkbuild.jobplan.pools import write_plan_file
from sparkbuild.jobplan.timeline import BuildTimeline, run_timeline, timeline_lines
from sparkbuild.jobplan.unit_memory import remember_build
from sparkbuild.recipe import check_jobs, check_source_date_epoch, require_spark_target
from sparkbuild.records import Record, as_json
from sparkbuild.store.context import RunContext
from sparkbuild.store.lock import recipe_work_lock
from sparkbuild.store.phases import phase, recording
from sparkbuild.team.compile_cache import (
    CompileCacheResult,
    build_root,
    units_by_language,
)
from sparkbuild.team.dist_client import connect_for, team_plan
from sparkbuild.team.dist_record import DistResult, write_build_trace
from sparkbuild.team.gate_server import gate_slots
from sparkbuild.team.sccache_server import dist_outcome, open_shared_cache
from sparkbuild.team.team_options import resolve_team
from sparkbuild.vendoring.fetch import vendor_for_recipe
from sparkbuild.vendoring.fetch_log import vendor_unplanned
from sparkbuild.vendoring.materialize import materialize, require_complete
from sparkbuild.vendoring.plan import VendorResult
from sparkbuild.wheelhouse.manifest import stand_in_line

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from sparkbuild.bundle.read import UnpackedBundle
    from sparkbuild.checks.code_forecast import CodeForecast
    from sparkbuild.compile.extension_set import ExtensionSet
    from sparkbuild.errors import SparkbuildError
    from sparkbuild.patches.prepare import PrepareResult
    from sparkbuild.recipe import Recipe
    from sparkbuild.store.cache import Cache
    from sparkbuild.vendoring.materialize import Materialized
    from sparkbuild.wheelhouse.parts import PartResult
    from sparkbuild.wheelhouse.write import WheelhouseResult


@dataclass(frozen=True, kw_only=True)
class WheelOptions:
    """What one ``wheel`` is asked, passed whole to its stages: the recipe and the flags
    (a flag outranks the recipe's value; the job plan's ``--jobs``, ``$MAX_JOBS`` and the
    recipe's ``jobs`` are weighed once, by :mod:`sparkbuild.jobplan.job_plan`)."""

    recipe: Recipe
    source: str | None = None
    """A source spec overriding the recipe's."""
    cache: Path | None = None
    out: Path = Path("wheelhouse")
    offline: bool = False
    jobs: int | None = None
    platform: str | None = None
    update_lock: bool = False
    compile_cache: str | None = None
    """A shared compile cache URL overriding the recipe's ``[build] compile_cache``."""
    bundle: Path | None = None
    """Build from a bundle (``sparkbuild bundle``): verified, unpacked, offline."""
    opened: UnpackedBundle | None = None
    """``bundle`` as already verified and unpacked (:func:`sparkbuild.bundle.read.open_bundle`,
    as ``wheel --bundle`` reads its recipe); None: :func:`build_wheel` opens it, once."""
    use_existing_torch: bool = False
    """Build against the torch of the running environment (vLLM's use_existing_torch)."""
    mirrors: tuple[str, ...] = ()
    """``BASE=REPLACEMENT`` URL rewrites for vendoring, before the recipe's."""
    closure: bool = True
    """False: the wheelhouse holds the built wheels and pins, not the runtime closure."""
    targets: tuple[str, ...] = ()
    """Only these extensions of the tree (sparkbuild.checks.ext_targets); () = all."""
    allow_unstartable: bool = False
    """``targets`` may leave out an extension the package imports at module level (a part
    of a build, measured, never installed on a node): warned, not refused."""
    dist: str | None = None
    """A sccache-dist scheduler URL overriding the recipe's ``[build] dist``."""
    dist_token_file: Path | None = None
    """The scheduler's client token (else ``$SPARKBUILD_DIST_TOKEN``)."""
    dist_server_memory_gib: float | None = None
    """Each build server's memory (``--dist-server-memory``), over the recipe's."""
    part: str | None = None
    """``--part vllm``: vLLM's wheels alone (no flashinfer builder beside the compile) into
    the part directory ``out``, for ``join`` (sparkbuild.wheelhouse.parts); ``--part
    flashinfer`` is :func:`build_flashinfer_part`'s."""



def _rounded(seconds: dict[str, float]) -> dict[str, float]:
    return {stage: round(value, 1) for stage, value in seconds.items()}


@dataclass
class WheelResult(Record):
    json_order: ClassVar[tuple[str, ...]] = (
        "recipe", "offline", "tree", "source", "patches", "vendor", "missed_by_reader",
        "build_plan", "build", "compile_cache", "wheelhouse", "seconds", "timeline",
        "code_forecast", "units",
    )

    recipe: Recipe = field(metadata=as_json(dump=lambda recipe: recipe.name))
    offline: bool
    prepared: PrepareResult = field(metadata=as_json(skip=True))
    vendor: VendorResult
    plan: BuildPlan = field(metadata=as_json("build_plan"))
    build: BuildOutcome
    wheelhouse: WheelhouseResult | PartResult
    """The wheelhouse (with ``--part vllm``: the part directory)."""
    missed_by_reader: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict, metadata=as_json(dump=_rounded))
    compile_cache: CompileCacheResult | None = None
    timeline: dict[str, Any] = field(default_factory=dict)
    """Every phase's seconds and the build's account (sparkbuild.jobplan.timeline)."""
    code_forecast: CodeForecast | None = None
    """What the arch lists give each unit, read before the first compile."""
    dist: DistResult | None = None
    build_trace: Path | None = None
    """The build's units as Chrome trace-event JSON (sparkbuild.jobplan.build_trace)."""
    extensions: ExtensionSet | None = field(default=None, metadata=as_json("extension_set"))
    """The extensions chosen for the recipe's ``[model]`` (None: all, or ``--targets``)."""

    @property
    def error(self) -> SparkbuildError | None:
        return self.wheelhouse.error

    def json_extra(self) -> dict[str, Any]:
        prepared = self.prepared.to_dict()
        return {"tree": prepared["tree"], "source": prepared["source"],
                "patches": prepared["patches"],
                "units": self.build.timeline.units_table() if self.build.timeline else []}

    def summary(self) -> list[str]:
        mode = "offline" if self.offline else "online"
        lines = [f"built {self.recipe.name} ({mode}) for {self.recipe.target.torch_cuda_arch_list}"]
        lines += [f"  patch {p.name}: {p.label}" for p in self.prepared.series.patches]
        sources = ", ".join(s.name for s in self.vendor.plan.sources) or "none"
        lines.append(f"  sources from the cache: {sources}")
        if self.extensions is not None:
            lines.append(f"  extensions for the model: {', '.join(self.extensions.targets)}")
        lines += [f"  {shown(stand_in_line({'name': s.name, **s.stand_in.to_dict()}))}"
                  for s in self.vendor.plan.sources if s.stand_in is not None]
        lines += [f"  not fetched: {s.name} ({s.placeholder.reason}); a placeholder"
                  for s in self.vendor.plan.excluded if s.placeholder is not None]
        if self.missed_by_reader:
            lines.append(f"  found by CMake, vendored after the build: {self.missed_by_reader}")
        lines.append(f"  MAX_JOBS={self.plan.max_jobs} NVCC_THREADS={self.plan.nvcc_threads}"
                     f" launcher={self.plan.launcher or 'none'}")
        lines.append(f"  {len(self.build.compiled_units)} units compiled; log: {self.build.log}")
        lines += self.compile_cache.summary() if self.compile_cache else []
        lines += self.dist.summary() if self.dist else []
        lines += [f"  build trace: {self.build_trace}"] if self.build_trace else []
        timing = ", ".join(f"{k} {v:.0f} s" for k, v in self.seconds.items())
        lines.append(f"  time: {timing}")
        lines += timeline_lines(self.timeline, self.build.timeline)
        return lines + self.wheelhouse.summary()


# -- helpers -------------------------------------------------------------------------------


@contextmanager
def _timed(seconds: dict[str, float], stage: str) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        seconds[stage] = time.monotonic() - started


def _build_plan(options: WheelOptions, tree: Path, cache: Cache) -> BuildPlan:
    """doctor (a hard failure raised), then the job plan over the cache's unit table, with
    memory kept for flashinfer's builder when it runs alongside."""
    recipe = options.recipe
    report = ready_for_build(tree, job_memory_gib=recipe.build.job_memory_gib,
                             existing_torch=options.use_existing_torch)
    plan = wheel_job_plan(recipe, MachineFacts.read(), jobs_flag=options.jobs,
                          launcher=report.launcher, cache_root=cache.root,
                          builder=options.part is None)
    for line in plan.pool_lines():
        info(f"doctor: {line}")
    return plan


def wheel_job_plan(recipe: Recipe, machine: MachineFacts, *, jobs_flag: int | None,
                   launcher: str | None, cache_root: Path,
                   environ: Mapping[str, str] | None = None, builder: bool = True) -> BuildPlan:
    """The plan ``wheel`` builds ``recipe`` with: ``doctor --recipe``'s for the same machine
    and cache (:func:`sparkbuild.compile.doctor.doctor_plan`), ``--jobs`` first; ``builder``
    False: no flashinfer builder runs beside the compile (``--part vllm``), so no memory is
    kept for one."""
    if not builder:
        from sparkbuild.jobplan.job_plan import recipe_job_plan

        return recipe_job_plan(recipe, machine, units_from=cache_root, jobs_flag=jobs_flag,
                               job_memory_gib=None, launcher=launcher, environ=environ)
    return doctor_plan(recipe, machine, job_memory_gib=None, launcher=launcher,
                       cache_root=cache_root, jobs_flag=jobs_flag, environ=environ)


def _code_forecast(options: WheelOptions, tree: Path, work: Path, python: Path,
                   torch: BuildTorch, deps: Materialized, cache: Cache) -> CodeForecast:
    """Before the first compile: the units the arch lists give no native code, refused as
    verify would refuse them (sparkbuild.checks.code_forecast; kept while its inputs stand:
    sparkbuild.checks.kept_forecast)."""
    from sparkbuild.checks.code_forecast import ForecastInputs, judge_forecast
    from sparkbuild.checks.ext_targets import required_targets
    from sparkbuild.checks.kept_forecast import reusing_forecast

    forecast = reusing_forecast(cache, ForecastInputs(
        tree=tree, work=work / "forecast", python=python, site=torch.site,
        cmake_defines=deps.cmake_defines, env=deps.env,
        targets=required_targets(tree, options.targets), sources=deps.sources), options.recipe)
    judge_forecast(forecast, options.recipe)
    return forecast


def _open_bundle(options: WheelOptions, cache: Cache) -> UnpackedBundle | None:
    """The run's bundle, opened (read and hashed) once: the one ``wheel --bundle`` opened
    for its recipe, else now; None without ``--bundle``."""
    if options.bundle is None or options.opened is not None:
        return options.opened
    from sparkbuild.bundle.read import open_bundle

    return open_bundle(options.bundle, cache.root)


def _prepare(options: WheelOptions, work: Path, context: RunContext,
             unpacked: UnpackedBundle | None) -> PrepareResult:
    from sparkbuild.patches.prepare import prepare_tree

    recipe = options.recipe
    if unpacked is not None:
        from sparkbuild.bundle.read import check_recipe, import_bundle, prepared_from_bundle

        cache = context.cache()
        check_recipe(unpacked, recipe)
        with phase("bundle import"):
            imported = import_bundle(unpacked, cache)
        if imported:
            step(f"imported from the bundle into the cache: {', '.join(imported)}")
        with phase("tree copy"):
            return prepared_from_bundle(unpacked, recipe, work / "tree")
    from sparkbuild.bundle.read import forget_bundle_tree
    from sparkbuild.store.tree_sync import sync_tree

    tree, fresh = work / "tree", work / "tree.prepared"
    shutil.rmtree(fresh, ignore_errors=True)
    # The spec as written: fetch_source takes the recipe's own relative path from the
    # recipe's directory and applies its sha256 pin and lock; --source is the cwd's.
    prepared = prepare_tree(options.source or recipe.source.spec, fresh, recipe,
                            update_lock=options.update_lock, context=context)
    if prepared.error is not None:
        shutil.rmtree(fresh, ignore_errors=True)
        raise prepared.error
    # brought into the work tree file by file: a warm rebuild keeps its build directory
    # and ninja sees only the files the change touched (sparkbuild.store.tree_sync)
    forget_bundle_tree(tree)
    with phase("tree copy"):
        synced = sync_tree(fresh, tree, work / "tree.files.json")
    shutil.rmtree(fresh, ignore_errors=True)
    info(f"the prepared tree: {synced.describe()}")
    return prepared.placed_at(tree)


def _vendor(options: WheelOptions, cache: Cache, tree: Path,
            extensions: ExtensionSet | None) -> VendorResult:
    return vendor_for_recipe(tree, cache, options.recipe, mirrors=options.mirrors,
                             offline=options.offline, wheels=not options.use_existing_torch,
                             reuse=True, placeholders=tuple(
                                 extensions.left_out_sources if extensions else ()))


def _extension_set(options: WheelOptions, tree: Path, work: Path) -> ExtensionSet | None:
    """With ``[model]`` and no ``--targets``: the extensions the model needs, each with its
    reason (sparkbuild.compile.extension_set); None otherwise (every extension, or those
    ``--targets`` names)."""
    recipe = options.recipe
    if options.targets or recipe.model is None:
        return None
    from sparkbuild.compile.extension_set import extension_set_for
    from sparkbuild.node.profile import declared_env

    with phase("extension set"):
        extensions = extension_set_for(tree, recipe, work / "extensions",
                                       profile=declared_env(recipe))
    for line in extensions.summary():
        info(line)
    return extensions


def _bundle_runtime(unpacked: UnpackedBundle | None) -> dict[str, Any] | None:
    """The pins and closure the bundle carries (None without a bundle, or an old one)."""
    if unpacked is None:
        return None
    from sparkbuild.bundle.read import bundled_runtime

    return bundled_runtime(unpacked)


def _with_bundle_runtime(options: WheelOptions, runtime: dict[str, Any] | None
                         ) -> WheelOptions:
    """A bundle written with ``--no-closure`` leaves the closure to the node; the closure it
    carries is for its platform and Python, which the wheelhouse takes unless --platform."""
    if runtime is None:
        return options
    if options.closure and runtime.get("closure") != "included":
        step("the bundle was written with --no-closure: the wheelhouse leaves the runtime "
             "closure to the node")
        options = dataclasses.replace(options, closure=False)
    if options.platform is None and options.closure and runtime.get("platform"):
        options = dataclasses.replace(options, platform=str(runtime["platform"]))
    return options


def _refuse_runtime_gaps(options: WheelOptions, runtime: dict[str, Any] | None,
                         cache: Cache, tree: Path) -> None:
    """Offline, every pin (and a bundle's closure for the tree's requirements) must be
    there before anything compiles; each one missing is named.  With ``[flashinfer] aot``
    the wheels its builder needs are part of it (online, they are downloaded now)."""
    from sparkbuild.flashinfer.builder_wheels import ready_builder

    aot = ready_builder(options.recipe, cache.root, offline=options.offline)
    if options.offline:
        from sparkbuild.wheelhouse.closure import refuse_runtime_gaps

        refuse_runtime_gaps(options.recipe, cache, runtime, tree, closure=options.closure,
                            bundle=options.bundle, also=aot)


def _node_profile(recipe: Recipe) -> list[dict[str, str]]:
    """The declared node profile, recorded in the manifest (its fingerprint covers it)."""
    from sparkbuild.node.profile import declared_profile

    return [e.to_dict() for e in declared_profile(recipe.target.cuda_archs, recipe.node.env,
                                                  recipe.node.drop, str(recipe.path))]


def _wheelhouse(options: WheelOptions, prepared: PrepareResult, build: FinishedBuild,
                runtime: dict[str, Any] | None) -> WheelhouseResult | PartResult:
    from sparkbuild.compile.build_record import build_settings
    from sparkbuild.toolchain.kept_sass import CodeCache
    from sparkbuild.toolchain.tools import describe_toolchain
    from sparkbuild.vendoring.patched import built_in_sources
    from sparkbuild.wheelhouse.write import WheelhouseInputs, write_wheelhouse

    recipe, cache, aot = build.recipe, build.cache, build.aot
    settings = build_settings(build, node_profile=_node_profile(recipe))
    inputs = WheelhouseInputs(
        recipe=recipe, source=prepared.source.to_dict(),
        patches=[outcome_.to_dict() for outcome_ in prepared.series.patches],
        built_wheels=[*build.outcome.wheels, *([aot.wheel] if aot else [])],
        build_settings=settings, cache_root=cache.root,
        offline=options.offline, platform=options.platform,
        toolchain={**describe_toolchain(), **build.torch.toolchain()},
        closure=options.closure,
        vendored=list(built_in_sources(build.vendored, cache)) if build.vendored else (),
        bundled_closure=runtime.get("files") if runtime is not None else None,
        kept_code=CodeCache(cache),  # wheel alone: verify reads the machine code afresh
    )
    if options.part == "vllm":
        from sparkbuild.wheelhouse.parts import vllm_part

        return vllm_part(options.out, inputs, options.bundle)
    return write_wheelhouse(options.out, inputs)


def _label(recipe: Recipe, prepared: PrepareResult) -> str:
    """The built wheel's local label (archs and series hash): part of the cache's keys."""
    from sparkbuild.wheelhouse.wheel_rewrite import local_label

    return local_label(recipe.target.cuda_archs, [p.to_dict() for p in prepared.series.patches])


def _source_directory(options: WheelOptions) -> Path | None:
    """The local directory the build copies its tree from, if the source is one."""
    from sparkbuild.sources.fetch import parse_source_spec

    if options.bundle is not None:
        return None
    recipe = options.recipe
    spec = options.source or recipe.source.spec
    base = recipe.path.parent if options.source is None else None
    with contextlib.suppress(SparkbuildError):  # a bad spec is prepare's to report
        parsed = parse_source_spec(spec, base=base)
        return parsed.path if parsed.kind == "directory" else None
    return None


def build_wheel(options: WheelOptions) -> WheelResult:
    """The whole ``wheel`` command; see the module docstring.  A run that fails keeps its
    timeline (and the build's units, once built) on the error: an hour's measurements are
    not lost to a refusal at the end."""
    built: list[BuildTimeline] = []
    with recording() as clock:
        try:
            result = _build_wheel(options, built)
        except SparkbuildError as error:
            timeline = run_timeline(clock.seconds, clock.wall(), built[0] if built else None)
            error.progress.update(timeline=timeline,
                                  units=built[0].units_table() if built else [])
            raise
    result.timeline = run_timeline(clock.seconds, clock.wall(), result.build.timeline)
    return result


def _build_wheel(options: WheelOptions, built: list[BuildTimeline]) -> WheelResult:
    from sparkbuild.checks.start_imports import refuse_left_out_at_start
    from sparkbuild.toolchain.kept_sass import CodeCache
    from sparkbuild.wheelhouse.destination import check_destination, refuse_inside_source
    from sparkbuild.wheelhouse.lock import refuse_contradicted_pins

    if options.part is None:
        check_destination(options.out, before_build=True)  # refused now, not after hours
    else:
        from sparkbuild.wheelhouse.parts import check_part_destination, check_part_name

        check_part_destination(options.out)
        check_part_name(options.part, options.recipe)
    check_jobs(options.jobs, where="wheel --jobs")
    check_source_date_epoch(os.environ.get("SOURCE_DATE_EPOCH"))  # the backend reads it too
    refuse_inside_source(options.out, _source_directory(options))
    recipe = options.recipe
    require_spark_target(recipe)  # before any work: plain sm_121 traps in every FP4 GEMM
    context = RunContext.create(options.cache, offline=options.offline, recipe=recipe)
    cache = context.cache()
    team = resolve_team(options)  # a bad size of the servers' memory refused before the probe
    spec, link = team.cache, connect_for(team)
    root = build_root() if team.shared else cache.root
    work = root / "work" / recipe.name
    seconds: dict[str, float] = {}
    with recipe_work_lock(root, recipe.name).held():
        with _timed(seconds, "prepare"), phase("prepare"):
            opened = _open_bundle(options, cache)
            prepared = _prepare(options, work, context, opened)
        tree = prepared.tree
        extensions = _extension_set(options, tree, work)
        if extensions is not None:
            options = dataclasses.replace(options, targets=extensions.targets)
        refuse_left_out_at_start(tree, options.targets,  # the first start, named now
                                 allow=options.allow_unstartable)
        runtime = _bundle_runtime(opened)
        options = _with_bundle_runtime(options, runtime)
        with phase("pins"):
            refuse_contradicted_pins(recipe, tree, options.platform)
            _refuse_runtime_gaps(options, runtime, cache, tree)
        with _timed(seconds, "vendor"), phase("vendor"):
            vendored = _vendor(options, cache, tree, extensions)
            step("checking that the cache holds everything the build needs")
            require_complete(vendored.plan, cache)
        with phase("doctor"):
            plan = _build_plan(options, tree, cache)
            plan = team_plan(plan, link, plan.requested_jobs, team.server_memory)
        with _timed(seconds, "build"), phase("build environment"):
            deps = materialize(vendored.plan, cache, work)
            if options.use_existing_torch:
                from sparkbuild.compile.existing_torch import use_existing_torch

                python = use_existing_torch(tree, work / "logs")
            else:
                python = ensure_build_env(cache, deps, vendored.plan.wheelset_key,
                                          root=root if team.shared else None)
            torch = build_torch(python, options.use_existing_torch)
            with phase("code forecast"):
                forecast = _code_forecast(options, tree, work, python, torch, deps, cache)
            with open_shared_cache(
                    spec, label=_label(recipe, prepared), torch=torch.version, work=work,
                    cache_root=cache.root, dist=link, gate=gate_slots(plan.pool),
                    server_memory=team.server_memory) as shared, aot_alongside(builder_for(
                        recipe, python=python, torch=torch.version, cache=cache, work=work,
                        offline=options.offline, compile_jobs=plan.max_jobs,
                        shared=shared) if options.part is None else None) as aot_run:
                if shared is not None and shared.launcher:
                    plan = plan.with_launcher(shared.launcher, f"sccache, {shared.role}")
                pool_file = write_plan_file(plan.pool, work / "logs" / "pool-plan.json",
                                            tree) if plan.pool else None
                request = BuildRequest(
                    tree=tree, work=work, archs=recipe.target.torch_cuda_arch_list,
                    jobs=plan.max_jobs, nvcc_threads=plan.nvcc_threads,
                    offline=options.offline, deps=deps,
                    recipe_env={**recipe.build.env, **(shared.build_env if shared else {})},
                    launcher=plan.launcher, targets=options.targets,
                    pool_plan=pool_file, pool_depth=plan.pool.depth if plan.pool else None,
                    code_targets=recipe.target.cuda_archs, allow_jit=recipe.target.allow_jit,
                    kept_code=CodeCache(cache),  # the wheelhouse's read finds what it kept
                )
                outcome = build_tree(request, python)
                if outcome.timeline is not None:
                    built.append(outcome.timeline)
                # what the wheel waits for it after the compile (the build's sccache, which
                # flashinfer's compiles go through, stops after this block)
                with phase("flashinfer aot"):
                    aot = aot_run.result()
        if outcome.timeline is not None:
            remember_build(cache.root, recipe.target.torch_cuda_arch_list, outcome.timeline)
        compile_cache = shared.compile_cache if shared else None
        dist = dist_outcome(link, shared)
        trace = (write_build_trace(work / "logs" / "build-trace.json", outcome.timeline, dist)
                 if outcome.timeline is not None else None)
        if compile_cache is not None:
            compile_cache.units = units_by_language(outcome.compiled_units)
        missed = [] if options.offline else vendor_unplanned(
            cache, recipe.name, vendored.plan, outcome.fetch_log, work / "scratch")
        with _timed(seconds, "wheelhouse"), phase("wheelhouse"):
            finished = FinishedBuild(
                recipe=recipe, plan=plan, outcome=outcome, torch=torch, cache=cache,
                offline=options.offline, use_existing_torch=options.use_existing_torch,
                targets=options.targets, bundle=options.bundle, compile_cache=compile_cache,
                vendored=vendored.plan, aot=aot, dist=dist, extensions=extensions)
            wheelhouse = _wheelhouse(options, prepared, finished, runtime)
    return WheelResult(recipe, options.offline, prepared, vendored, plan, outcome, wheelhouse,
                       [s.name for s in missed], seconds, compile_cache,
                       code_forecast=forecast, dist=dist, build_trace=trace,
                       extensions=extensions)


def build_flashinfer_part(options: WheelOptions) -> PartResult:
    """``wheel --part flashinfer``: flashinfer's model set alone, into the part directory
    ``out`` (sparkbuild.wheelhouse.parts).  The tree is prepared and vendored as ``wheel``
    does, for the build environment whose torch flashinfer's builder runs with; then the
    builder runs with every core and the machine's memory (a kept build reused); nothing
    of vLLM compiles."""
    from sparkbuild.flashinfer.alongside import builder_alone
    from sparkbuild.toolchain.tools import describe_toolchain
    from sparkbuild.wheelhouse.parts import (
        check_part_destination,
        check_part_name,
        new_part,
        write_part,
    )

    recipe = options.recipe
    check_part_name("flashinfer", recipe)
    check_part_destination(options.out)  # refused now, not after the build
    check_jobs(options.jobs, where="wheel --jobs")
    require_spark_target(recipe)
    context = RunContext.create(options.cache, offline=options.offline, recipe=recipe)
    cache = context.cache()
    team = resolve_team(options)
    root = build_root() if team.shared else cache.root
    work = root / "work" / recipe.name
    with recording(), recipe_work_lock(root, recipe.name).held():
        with phase("prepare"):
            opened = _open_bundle(options, cache)
            prepared = _prepare(options, work, context, opened)
        tree = prepared.tree
        extensions = _extension_set(options, tree, work)
        runtime = _bundle_runtime(opened)
        options = _with_bundle_runtime(options, runtime)
        with phase("pins"):
            _refuse_runtime_gaps(options, runtime, cache, tree)
        with phase("vendor"):
            vendored = _vendor(options, cache, tree, extensions)
            require_complete(vendored.plan, cache)
        with phase("build environment"):
            if options.use_existing_torch:  # the torch vLLM's part builds against
                from sparkbuild.compile.existing_torch import use_existing_torch

                python = use_existing_torch(tree, work / "logs")
            else:
                deps = materialize(vendored.plan, cache, work)
                python = ensure_build_env(cache, deps, vendored.plan.wheelset_key,
                                          root=root if team.shared else None)
            torch = build_torch(python, options.use_existing_torch)
        with open_shared_cache(team.cache, label=_label(recipe, prepared),
                               torch=torch.version, work=work, cache_root=cache.root,
                               dist=None) as shared, phase("flashinfer aot"):
            build = builder_alone(recipe, python=python, torch=torch.version, cache=cache,
                                  work=work, offline=options.offline, jobs=options.jobs,
                                  shared=shared)
            assert build is not None  # check_part_name: the recipe builds flashinfer
            aot = build()
    toolchain = {**describe_toolchain(), **torch.toolchain()}
    part = new_part("flashinfer", recipe, options.bundle, toolchain,
                    {"flashinfer_aot": aot.to_dict()})
    result = write_part(options.out, part, [aot.wheel])
    result.built, result.lines = aot.to_dict(), aot.summary()
    return result
