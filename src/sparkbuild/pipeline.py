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
import functools
import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.compile.doctor import run_doctor
from sparkbuild.compile.tree_build import (
    BuildOutcome,
    BuildRequest,
    build_tree,
    ensure_build_env,
    read_fetch_log,
)
from sparkbuild.console import info, step, warn
from sparkbuild.errors import SparkbuildError
from sparkbuild.flashinfer.alongside import alongside_jobs, aot_alongside, reserved_bytes
from sparkbuild.jobplan.machine import GIB, BuildPlan, plan_build, read_memory, with_pools
from sparkbuild.jobplan.pools import write_plan_file
from sparkbuild.jobplan.timeline import BuildTimeline, run_timeline, timeline_lines
from sparkbuild.jobplan.unit_memory import known_units, measured_for, remember
from sparkbuild.recipe import check_jobs, check_source_date_epoch, require_spark_target
from sparkbuild.store.context import RunContext
from sparkbuild.store.lock import recipe_work_lock
from sparkbuild.store.phases import phase, recording
from sparkbuild.team.compile_cache import (
    CompileCacheResult,
    build_root,
    cache_spec,
    units_by_language,
)
from sparkbuild.team.dist_client import connect_for, team_plan
from sparkbuild.team.dist_record import DistResult, write_build_trace
from sparkbuild.team.sccache_server import dist_outcome, open_shared_cache
from sparkbuild.toolchain import tools
from sparkbuild.vendoring.fetch import fetch_source, vendor_for_recipe
from sparkbuild.vendoring.index import remember_missed
from sparkbuild.vendoring.materialize import materialize, require_complete
from sparkbuild.vendoring.plan import SourcePlan, VendorPlan, VendorResult

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from sparkbuild.checks.code_forecast import CodeForecast
    from sparkbuild.errors import SparkbuildError
    from sparkbuild.flashinfer.builder import AotResult
    from sparkbuild.patches.prepare import PrepareResult
    from sparkbuild.recipe import Recipe
    from sparkbuild.store.cache import Cache
    from sparkbuild.toolchain.sass_library import KeptCubins
    from sparkbuild.vendoring.materialize import Materialized
    from sparkbuild.wheelhouse.write import WheelhouseResult


@dataclass(frozen=True)
class WheelOptions:
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


@dataclass
class WheelResult:
    recipe: Recipe
    offline: bool
    prepared: PrepareResult
    vendor: VendorResult
    plan: BuildPlan
    build: BuildOutcome
    wheelhouse: WheelhouseResult
    missed_by_reader: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    compile_cache: CompileCacheResult | None = None
    timeline: dict[str, Any] = field(default_factory=dict)
    """Every phase's seconds and the build's account (sparkbuild.jobplan.timeline)."""
    code_forecast: CodeForecast | None = None
    """What the arch lists give each unit, read before the first compile."""
    dist: DistResult | None = None
    build_trace: Path | None = None
    """The build's units as Chrome trace-event JSON (sparkbuild.jobplan.build_trace)."""

    @property
    def error(self) -> SparkbuildError | None:
        return self.wheelhouse.error

    def to_dict(self) -> dict[str, Any]:
        prepared = self.prepared.to_dict()
        return {
            "recipe": self.recipe.name,
            "offline": self.offline,
            "tree": prepared["tree"],
            "source": prepared["source"],
            "patches": prepared["patches"],
            "vendor": self.vendor.to_dict(),
            "missed_by_reader": self.missed_by_reader,
            "build_plan": self.plan.to_dict(),
            "build": self.build.to_dict(),
            "compile_cache": self.compile_cache.to_dict() if self.compile_cache else None,
            "wheelhouse": self.wheelhouse.to_dict(),
            "seconds": {stage: round(value, 1) for stage, value in self.seconds.items()},
            "timeline": self.timeline,
            "code_forecast": self.code_forecast.to_dict() if self.code_forecast else None,
            "units": self.build.timeline.units_table() if self.build.timeline else [],
            "dist": self.dist.to_dict() if self.dist else None,
            "build_trace": str(self.build_trace) if self.build_trace else None,
        }

    def summary(self) -> list[str]:
        mode = "offline" if self.offline else "online"
        lines = [f"built {self.recipe.name} ({mode}) for {self.recipe.target.torch_cuda_arch_list}"]
        lines += [f"  patch {p.name}: {p.label}" for p in self.prepared.series.patches]
        sources = ", ".join(s.name for s in self.vendor.plan.sources) or "none"
        lines.append(f"  sources from the cache: {sources}")
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


def _missed_by_reader(outcome: BuildOutcome, plan: VendorPlan) -> list[SourcePlan]:
    """Dependencies the configure fetched (the provider's record) that the plan lacks."""
    planned = {source.name.lower() for source in plan.sources}
    missed = []
    for name, options in read_fetch_log(outcome.fetch_log).items():
        if name.lower() in planned:
            continue
        git, urls = options.get("GIT_REPOSITORY"), options.get("URL")
        if git:
            tag = options.get("GIT_TAG")
            missed.append(SourcePlan(name=name, kind="git", url=git[0],
                                     ref=tag[0] if tag else "HEAD", where="recorded by CMake"))
        elif urls:
            url_hash = options.get("URL_HASH")
            missed.append(SourcePlan(name=name, kind="url", url=urls[0], ref=None,
                                     url_hash=url_hash[0] if url_hash else None,
                                     mirrors=urls[1:], where="recorded by CMake"))
    return missed


def _vendor_missed(cache: Cache, recipe: Recipe, missed: list[SourcePlan], scratch: Path) -> None:
    if not missed:
        return
    with cache.locked():
        for source in missed:
            warn(f"CMake fetched {source.name} ({source.url}), which the CMake reader did not "
                 "find; vendoring it now so that offline builds have it")
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            fetch_source(cache, source, scratch)
        remember_missed(cache, recipe.name, missed)
    shutil.rmtree(scratch, ignore_errors=True)


def _build_plan(options: WheelOptions, tree: Path, cache: Cache | None = None) -> BuildPlan:
    recipe = options.recipe
    report = run_doctor(tree, job_memory_gib=recipe.build.job_memory_gib,
                        compile_cache=None, existing_torch=options.use_existing_torch)
    for check in report.warnings():
        warn(f"doctor: {check.name}: {check.value} -- {check.reason}")
    if report.error is not None:
        raise report.error
    total, available = read_memory()
    builder = reserved_bytes(os.cpu_count() or 1) if recipe.flashinfer.aot else 0.0
    available = max(0, int(available - builder))  # flashinfer's builder runs alongside
    launcher = report.tools.get("launcher")
    plan = plan_build(
        total_memory_bytes=total, available_memory_bytes=available,
        cores=os.cpu_count() or 1, job_memory_gib=recipe.build.job_memory_gib,
        nvcc_threads=recipe.build.nvcc_threads, arch_count=len(recipe.target.cuda_archs),
        launcher=str(launcher.path) if launcher else None,
        requested_jobs=options.jobs or recipe.build.jobs,
    )
    measured, killed = measured_for(cache.root, recipe.target.torch_cuda_arch_list) \
        if cache else ({}, ())
    plan = with_pools(plan, total_memory_bytes=total, available_memory_bytes=available,
                      cores=os.cpu_count() or 1, job_memory_gib=recipe.build.job_memory_gib,
                      measured=measured, killed=killed,
                      requested_jobs=options.jobs or recipe.build.jobs,
                      known=known_units(cache.root, recipe.target.torch_cuda_arch_list)
                      if cache else None)
    if builder:
        plan = dataclasses.replace(plan, reasons=(
            *plan.reasons, f"flashinfer's builder runs alongside the compile: "
            f"{builder / GIB:.1f} GiB of the available memory kept for it"))
    for line in plan.pool_lines():
        info(f"doctor: {line}")
    return plan


def _build_site(python: Path, existing_torch: bool) -> Path | None:
    """The build environment's site-packages, the one holding torch if any (None with
    ``existing_torch``: the running interpreter's)."""
    if existing_torch:
        return None
    sites = sorted(python.parent.parent.glob("lib*/python*/site-packages"))
    return next((site for site in sites if tools.torch_version(site) is not None),
                sites[0] if sites else None)


def _build_torch(python: Path, existing_torch: bool) -> str | None:
    """The torch installed in the build environment: the one the extension is compiled
    against (read from its dist-info, not from a requirement), for the manifest and the
    shared compile cache's namespace.  ``existing_torch``: the running interpreter's."""
    if existing_torch:
        from sparkbuild.compile.existing_torch import running_torch

        running = running_torch()
        return running.version if running else None
    site = _build_site(python, existing_torch)
    version = tools.torch_version(site) if site is not None else None
    return str(version) if version is not None else None


def _code_forecast(options: WheelOptions, tree: Path, work: Path, python: Path,
                   deps: Materialized, cache: Cache) -> CodeForecast:
    """Before the first compile: the units the arch lists give no native code, refused as
    verify would refuse them (sparkbuild.checks.code_forecast; kept while its inputs stand:
    sparkbuild.checks.kept_forecast)."""
    from sparkbuild.checks.code_forecast import ForecastInputs, judge_forecast
    from sparkbuild.checks.ext_targets import required_targets
    from sparkbuild.checks.kept_forecast import reusing_forecast

    forecast = reusing_forecast(cache, ForecastInputs(
        tree=tree, work=work / "forecast", python=python,
        site=_build_site(python, options.use_existing_torch),
        cmake_defines=deps.cmake_defines, env=deps.env,
        targets=required_targets(tree, options.targets)), options.recipe)
    judge_forecast(forecast, options.recipe)
    return forecast


def _refuse_contradicted_pins(options: WheelOptions, tree: Path) -> None:
    """A pin the tree's own requirements contradict (without ``override``) fails before
    the build, not hours later; the wheelhouse checks every shipped wheel again."""
    from sparkbuild.errors import RecipeError
    from sparkbuild.sources.declared import declared_requirements
    from sparkbuild.wheelhouse.lock import tree_demands
    from sparkbuild.wheelhouse.overrides import pin_conflicts, settle, target_environment

    recipe = options.recipe
    try:
        declared = declared_requirements(tree)
    except RecipeError:
        declared = []  # a tree without requirement files: the built wheel's metadata decides
    env = target_environment(options.platform,
                             recipe.target.python if options.platform else None)
    settle(recipe.pins, pin_conflicts(recipe.pins, tree_demands(recipe, declared, tree), env),
           where=str(recipe.path))


# -- the stage -----------------------------------------------------------------------------


def _prepare(options: WheelOptions, work: Path, context: RunContext) -> PrepareResult:
    from sparkbuild.patches.prepare import prepare_tree

    recipe = options.recipe
    if options.bundle is not None:
        from sparkbuild.bundle.read import (
            bundles_dir,
            check_recipe,
            import_bundle,
            prepared_from_bundle,
            unpack_bundle,
        )

        cache = context.cache()
        unpacked = unpack_bundle(options.bundle, bundles_dir(cache.root))
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


def _vendor(options: WheelOptions, cache: Cache, tree: Path) -> VendorResult:
    return vendor_for_recipe(tree, cache, options.recipe, mirrors=options.mirrors,
                             offline=options.offline, wheels=not options.use_existing_torch,
                             reuse=True)


def _bundle_runtime(options: WheelOptions, cache: Cache) -> dict[str, Any] | None:
    """The pins and closure the bundle carries (None without a bundle, or an old one)."""
    if options.bundle is None:
        return None
    from sparkbuild.bundle.read import bundled_runtime

    return bundled_runtime(options.bundle, cache.root)


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
    aot = _flashinfer_builder_gaps(options, cache)
    if not options.offline:
        return
    from packaging.utils import canonicalize_name

    from sparkbuild.errors import CacheMissError
    from sparkbuild.wheelhouse.closure import declared_texts, runtime_gaps

    recipe = options.recipe
    gaps = runtime_gaps(recipe.pins, cache, runtime, declared_texts(tree), closure=options.closure,
                        skip={canonicalize_name(recipe.package)}) + aot
    if gaps:
        where = f"the bundle {options.bundle}" if options.bundle else "the cache"
        raise CacheMissError(
            f"{where} lacks {len(gaps)} wheel(s) the wheelhouse needs:\n  " + "\n  ".join(gaps),
            where=str(options.bundle or cache.root),
            hint="write the bundle again with this sparkbuild (`sparkbuild bundle` carries the "
            "pins, the closure and flashinfer's builder wheels), or run `sparkbuild wheel` once "
            "online with this cache; nothing was built")


def _flashinfer_builder_gaps(options: WheelOptions, cache: Cache) -> list[str]:
    """``[flashinfer] aot`` runs alongside vLLM's compile (flashinfer/alongside.py): its pin
    and its builder's wheels are checked (offline) or downloaded (online) before anything
    compiles, so that they fail first."""
    from sparkbuild.flashinfer.builder import ready_builder

    return ready_builder(options.recipe, cache.root, offline=options.offline)


def bundle_runtime_for(recipe: Recipe, *, closure: bool, offline: bool
                       ) -> Callable[[Path, Cache, Path], dict[str, Any]]:
    """What ``bundle`` passes to :func:`sparkbuild.bundle.write.assemble`: the wheelhouse's
    pins and closure fetch (the bundle room ranks below the wheelhouse's)."""
    from sparkbuild.wheelhouse.closure import bundle_runtime

    def runtime(tree: Path, cache: Cache, dest: Path) -> dict[str, Any]:
        return bundle_runtime(recipe, tree, cache, dest, closure=closure, offline=offline)

    return runtime


def _node_profile(recipe: Recipe) -> list[dict[str, str]]:
    """The declared node profile, recorded in the manifest (its fingerprint covers it)."""
    from sparkbuild.node.profile import declared_profile

    return [e.to_dict() for e in declared_profile(recipe.target.cuda_archs, recipe.node.env,
                                                  recipe.node.drop, str(recipe.path))]


def _flashinfer_aot(options: WheelOptions, python: Path, torch: str | None, cache: Cache,
                    work: Path, jobs: int) -> AotResult | None:
    """flashinfer's modules built ahead (``[flashinfer] aot``): a built wheel beside vLLM's."""
    if not options.recipe.flashinfer.aot:
        return None
    from sparkbuild.flashinfer.builder import request_for_recipe
    from sparkbuild.flashinfer.kept_builds import reusing_jit_cache

    dist = work / "flashinfer-aot-dist"
    shutil.rmtree(dist, ignore_errors=True)
    request = request_for_recipe(options.recipe, out=dist, python=python,
                                 cache_root=cache.root, work=work / "flashinfer-aot",
                                 offline=options.offline, jobs=jobs)
    return reusing_jit_cache(cache, request, torch)


def _kept_cubins(cache: Cache) -> KeptCubins:
    """Where the compile's unit watch keeps each object's cubin facts, which the
    wheelhouse's read of the built libraries then finds (sparkbuild.toolchain.kept_sass)."""
    from sparkbuild.toolchain.kept_sass import CodeCache

    return CodeCache(cache)


def _wheelhouse(options: WheelOptions, prepared: PrepareResult, plan: BuildPlan,
                outcome: BuildOutcome, cache: Cache,
                compile_cache: CompileCacheResult | None = None,
                vendored: VendorResult | None = None,
                runtime: dict[str, Any] | None = None,
                aot: AotResult | None = None,
                dist: DistResult | None = None) -> WheelhouseResult:
    from sparkbuild.toolchain.kept_sass import CodeCache
    from sparkbuild.toolchain.tools import describe_toolchain
    from sparkbuild.vendoring.patched import dependency_records
    from sparkbuild.wheelhouse.write import write_wheelhouse

    recipe = options.recipe
    toolchain = describe_toolchain()
    toolchain["torch"] = _build_torch(outcome.python, options.use_existing_torch)
    if options.use_existing_torch:
        from sparkbuild.compile.existing_torch import running_torch

        torch = running_torch()
        toolchain["torch"] = torch.version if torch else None
        toolchain["torch_cuda"] = torch.cuda if torch else None
        toolchain["torch_from"] = f"existing: {torch.location}" if torch else None
    keep = ("TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "NVCC_THREADS", "CMAKE_ARGS", "CMAKE_GENERATOR")
    settings = {
        "archs": list(recipe.target.cuda_archs),
        "jobs": plan.max_jobs,
        "nvcc_threads": plan.nvcc_threads,
        "launcher": plan.launcher,
        "offline": options.offline,
        "use_existing_torch": options.use_existing_torch,
        "targets": list(options.targets) or "all",
        "bundle": str(options.bundle) if options.bundle else None,
        "environment": {key: outcome.env[key] for key in keep if key in outcome.env},
        "compile_cache": compile_cache.to_dict() if compile_cache else None,
        "dist": dist.to_dict() if dist else None,
        "pool": plan.pool.to_dict() if plan.pool else None,
        "units": outcome.timeline.units_table() if outcome.timeline else [],
        "dependencies": dependency_records(vendored.plan, cache) if vendored else [],
        "flashinfer_aot": aot.to_dict() if aot else None,
        "node_profile": _node_profile(recipe),
        "start_modules": list(recipe.node.start_modules),
    }
    return write_wheelhouse(
        options.out, recipe=recipe, source=prepared.source.to_dict(),
        patches=[outcome_.to_dict() for outcome_ in prepared.series.patches],
        built_wheels=[*outcome.wheels, *([aot.wheel] if aot else [])],
        build_settings=settings, cache_root=cache.root,
        offline=options.offline, platform=options.platform, toolchain=toolchain,
        closure=options.closure,
        vendored=_vendored_sources(vendored.plan, cache) if vendored else (),
        bundled_closure=runtime.get("files") if runtime is not None else None,
        code_cache=CodeCache(cache),  # wheel alone: verify reads the machine code afresh
    )


def _vendored_sources(plan: VendorPlan, cache: Cache) -> list[dict[str, Any]]:
    """The sources built into the wheel, for its SBOM: each with the commit its ref
    resolved to and whether the series' arch edit changed it (``patched``), both from the
    cache's record (:func:`sparkbuild.vendoring.patched.source_record`)."""
    from sparkbuild.vendoring.index import source_entry
    from sparkbuild.vendoring.patched import source_record

    found = []
    for source in plan.sources:
        entry = source_entry(cache, source)
        found.append({"name": source.name, "kind": source.kind, "url": source.url,
                      "ref": source.ref, "commit": (entry or {}).get("commit"),
                      "sha256": source.sha256,
                      "patched": source_record(source, entry)["status"] == "applied"})
    return found


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
    from sparkbuild.wheelhouse.destination import check_destination, refuse_inside_source

    check_destination(options.out, before_build=True)  # refused now, not after hours
    check_jobs(options.jobs, where="wheel --jobs")
    check_source_date_epoch(os.environ.get("SOURCE_DATE_EPOCH"))  # the backend reads it too
    refuse_inside_source(options.out, _source_directory(options))
    recipe = options.recipe
    require_spark_target(recipe)  # before any work: plain sm_121 traps in every FP4 GEMM
    context = RunContext.create(options.cache, offline=options.offline, recipe=recipe)
    cache = context.cache()
    spec = cache_spec(options.compile_cache, recipe)
    link = connect_for(options.dist, recipe.build.dist, options.dist_token_file)
    root = build_root() if spec or link else cache.root
    work = root / "work" / recipe.name
    seconds: dict[str, float] = {}
    with recipe_work_lock(root, recipe.name).held():
        with _timed(seconds, "prepare"), phase("prepare"):
            prepared = _prepare(options, work, context)
        tree = prepared.tree
        refuse_left_out_at_start(tree, options.targets,  # the first start, named now
                                 allow=options.allow_unstartable)
        runtime = _bundle_runtime(options, cache)
        options = _with_bundle_runtime(options, runtime)
        with phase("pins"):
            _refuse_contradicted_pins(options, tree)
            _refuse_runtime_gaps(options, runtime, cache, tree)
        with _timed(seconds, "vendor"), phase("vendor"):
            vendored = _vendor(options, cache, tree)
            step("checking that the cache holds everything the build needs")
            require_complete(vendored.plan, cache)
        with phase("doctor"):
            plan = team_plan(_build_plan(options, tree, cache), link,
                             options.jobs or recipe.build.jobs)
        with _timed(seconds, "build"), phase("build environment"):
            deps = materialize(vendored.plan, cache, work)
            if options.use_existing_torch:
                from sparkbuild.compile.existing_torch import use_existing_torch

                python = use_existing_torch(tree, work / "logs")
            else:
                python = ensure_build_env(cache, deps, vendored.plan.wheelset_key,
                                          root=root if spec or link else None)
            with phase("code forecast"):
                forecast = _code_forecast(options, tree, work, python, deps, cache)
            torch = _build_torch(python, options.use_existing_torch)
            builder = (functools.partial(_flashinfer_aot, options, python, torch, cache, work,
                                         alongside_jobs(plan.max_jobs))
                       if recipe.flashinfer.aot else None)
            with aot_alongside(builder) as aot_run, open_shared_cache(
                    spec, label=_label(recipe, prepared), torch=torch, work=work,
                    cache_root=cache.root, dist=link) as shared:
                if shared is not None and shared.launcher:
                    plan = dataclasses.replace(plan, launcher=shared.launcher, reasons=(
                        *plan.reasons, f"compiler launcher: sccache, {shared.role}"))
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
                    kept_code=_kept_cubins(cache),
                )
                outcome = build_tree(request, python)
                if outcome.timeline is not None:
                    built.append(outcome.timeline)
        if outcome.timeline is not None:
            remember(cache.root, recipe.target.torch_cuda_arch_list,
                     [unit.to_dict() | {"source": unit.source,
                                        "peak_rss_bytes": unit.peak_rss_bytes}
                      for unit in outcome.timeline.units], outcome.timeline.killed_sources)
        with phase("flashinfer aot"):  # what the wheel waits for it after the compile
            aot = aot_run.result()
        compile_cache = shared.compile_cache if shared else None
        dist = dist_outcome(link, shared)
        trace = (write_build_trace(work / "logs" / "build-trace.json", outcome.timeline, dist)
                 if outcome.timeline is not None else None)
        if compile_cache is not None:
            compile_cache.units = units_by_language(outcome.compiled_units)
        missed = [] if options.offline else _missed_by_reader(outcome, vendored.plan)
        _vendor_missed(cache, recipe, missed, work / "scratch")
        with _timed(seconds, "wheelhouse"), phase("wheelhouse"):
            wheelhouse = _wheelhouse(options, prepared, plan, outcome, cache, compile_cache,
                                     vendored, runtime, aot, dist)
    return WheelResult(recipe, options.offline, prepared, vendored, plan, outcome, wheelhouse,
                       [s.name for s in missed], seconds, compile_cache,
                       code_forecast=forecast, dist=dist, build_trace=trace)
