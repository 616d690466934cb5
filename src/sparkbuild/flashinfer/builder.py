"""flashinfer's kernels built ahead: a ``flashinfer-jit-cache`` wheel for the recipe's target.

flashinfer compiles each kernel module at first use (nvcc into
``~/.cache/flashinfer/<version>/<arch>/cached_ops``), unless the ``flashinfer_jit_cache``
package is installed: then ``flashinfer.jit.env.FLASHINFER_AOT_DIR`` is that package's
``get_jit_cache_dir()`` and a module ``NAME`` is loaded from ``DIR/NAME/NAME.so``
(``jit/core.py: JitSpec.aot_path``).  Its ``__version__`` must start with flashinfer's own
(``jit/env.py: _get_aot_dir``), so the wheel is versioned ``<flashinfer version>+cu<CUDA>``.

The build is flashinfer's own builder, from the pinned flashinfer-python wheel, run by the
build environment's interpreter (it has torch) with the wheel and the few packages its
builder imports installed beside it (``--target``, from cached wheels, no index), through
the driver :mod:`sparkbuild.flashinfer.driver`:

* the module set is the model's (:mod:`sparkbuild.flashinfer.module_set`: each of
  flashinfer's generators called with the model's arguments), or, with ``[flashinfer]
  aot_args``, flashinfer's own default set narrowed by its switches and ``--only GLOB``;
* the headers and the link without a driver come from :mod:`sparkbuild.flashinfer.build_env`
  (named before anything compiles);
* flashinfer's ninja is sparkbuild's (:mod:`sparkbuild.jobplan.ninja_shim`): the heavy
  units in a pool memory holds, longest first, a unit killed for memory retried in the pool;
  each unit's peak is sampled (:mod:`sparkbuild.jobplan.unit_memory`) and its seconds read
  from ninja's log, into the cache's unit table (arch key ``flashinfer:<archs>``), which
  plans the next build;
* ccache or the build's sccache compiles through ``FLASHINFER_NVCC_LAUNCHER`` and
  ``FLASHINFER_CXX_LAUNCHER``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sparkbuild.console import info, step
from sparkbuild.errors import (
    CacheMissError,
    CommandFailed,
    HashMismatchError,
    ToolchainError,
    UsageError,
)
from sparkbuild.flashinfer.build_env import (
    LinkEnvironment,
    environment_site,
    include_roots,
    link_environment,
    missing_headers_error,
)
from sparkbuild.flashinfer.builder_wheels import (
    IMPORT_REQUIREMENTS,
    aot_wheels,
    fetch_header_wheels,
    held_wheels,
    pinned_flashinfer,
    wanted_wheels,
)
from sparkbuild.flashinfer.driver import SPECS_FILE
from sparkbuild.flashinfer.jit_cache_wheel import (
    jit_cache_version,
    pack_jit_cache,
    wheel_version,
)
from sparkbuild.flashinfer.module_set import needed_headers, needed_libraries
from sparkbuild.jobplan.ninja_graph import read_ninja_file
from sparkbuild.jobplan.ninja_shim import (
    PLAN_VARIABLE,
    REAL_VARIABLE,
    RECORD_VARIABLE,
    write_wrapper,
)
from sparkbuild.jobplan.pools import PoolPlan, plan_pools, write_plan_file
from sparkbuild.jobplan.timeline import BuildMarks, build_timeline, read_runs
from sparkbuild.jobplan.unit_memory import (
    MemorySampler,
    known_units,
    launcher_servers,
    measured_for,
    remember_build,
)
from sparkbuild.proc import run
from sparkbuild.records import Record, as_json, rounded
from sparkbuild.store.files import write_text_atomic
from sparkbuild.store.hashing import sha256_file
from sparkbuild.toolchain.archs import flashinfer_arch_list

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sparkbuild.flashinfer.module_set import ModuleSpec
    from sparkbuild.jobplan.team_pool import TeamFacts
    from sparkbuild.recipe import Recipe



_OWN_OPTIONS = ("--out-dir", "--build-dir")
UNIT_TABLE_PREFIX = "flashinfer:"
"""The unit table's arch key for flashinfer's units (``flashinfer:12.1a``): the same table
as vLLM's (``CACHE/units/memory.json``), apart from vLLM's plan."""


@dataclass(frozen=True)
class AotRequest:
    flashinfer_wheel: Path
    """The pinned flashinfer-python wheel: its sources and its builder."""
    wheel_dir: Path
    """Cached wheels of :data:`IMPORT_REQUIREMENTS` (pip's --find-links, no index)."""
    python: Path
    """The build environment's interpreter (it has torch)."""
    archs: tuple[str, ...]
    out: Path
    """The directory the jit-cache wheel is written into."""
    work: Path
    cuda_home: Path
    cuda_version: str
    """``13.0``: the wheel's local label is ``cu130``."""
    args: tuple[str, ...] = ()
    jobs: int | None = None
    sha256: str | None = None
    """The pin's hash of the flashinfer-python wheel, checked before use."""
    modules: tuple[ModuleSpec, ...] = ()
    """The model's set; empty: flashinfer's default set (``args``)."""
    launcher_env: tuple[tuple[str, str], ...] = ()
    """The build's sccache (``FLASHINFER_NVCC_LAUNCHER`` and its server's variables); empty:
    the builder's own (:mod:`sparkbuild.flashinfer.compile_launcher`)."""
    cache_root: Path | None = None
    """Where the unit table is read from and written to; None: neither."""
    usable_bytes: float | None = None
    """The memory the build may use (None: this machine's available memory less the
    system's share); the heavy pool's depth is what it holds."""
    job_memory_gib: float = 8.7
    offline: bool = True
    """Whether a missing header wheel may be downloaded (never offline)."""
    team: TeamFacts | None = None
    """A dist build's team (the build's scheduler): the heavy pool takes the depth the
    servers' memory holds, as the compile's does (sparkbuild.jobplan.team_pool)."""

    @property
    def headers(self) -> tuple[str, ...]:
        """What the set's sources include; flashinfer's default set needs both."""
        return needed_headers(self.modules)

    @property
    def libraries(self) -> tuple[str, ...]:
        """What the set's links name beyond libcuda: the MoE module ``-lnvrtc``, the GEMM
        ``-lcublas -lcublasLt`` (flashinfer's default set: all of them)."""
        return needed_libraries(self.modules)

    @property
    def unit_arch(self) -> str:
        return UNIT_TABLE_PREFIX + flashinfer_arch_list(self.archs)


@dataclass
class AotResult(Record):
    json_order: ClassVar[tuple[str, ...]] = (
        "wheel", "version", "flashinfer_version", "archs", "flashinfer_cuda_arch_list",
        "aot_args", "modules", "sources", "seconds", "size", "log", "reused_since", "prebuilt",
        "environment",
    )

    wheel: Path
    version: str
    flashinfer_version: str
    archs: tuple[str, ...]
    args: tuple[str, ...] = field(metadata=as_json("aot_args"))
    modules: list[str] = field(default_factory=list)
    seconds: float = field(default=0.0, metadata=as_json(dump=rounded(1)))
    size: int = 0
    log: Path | None = None
    reused: str | None = field(default=None, metadata=as_json("reused_since"))
    """When the kept build this wheel was copied from was made (flashinfer/kept_builds.py)."""
    sources: int = 0
    units: list[dict[str, Any]] = field(default_factory=list)
    """Every compile unit: module, source, seconds, start, peak, pool (the unit table)."""
    environment: list[str] = field(default_factory=list)
    """Where the headers and libcuda came from, the launcher and the pool plan."""
    prebuilt: str | None = None
    """Taken prebuilt instead of built: from where (flashinfer/jit_cache.py)."""

    def json_extra(self) -> dict[str, Any]:
        return {"flashinfer_cuda_arch_list": flashinfer_arch_list(self.archs)}

    def summary(self) -> list[str]:
        how = (f"reused from the cache (built {self.reused} in {self.seconds:.0f} s)"
               if self.reused else f"in {self.seconds:.0f} s")
        if self.prebuilt:
            how = f"taken {self.prebuilt}"
        cpu = sum(float(u.get("cpu_seconds", u.get("seconds", 0))) for u in self.units)
        peak = max((float(u.get("peak_rss_gib") or 0) for u in self.units), default=0.0)
        lines = [f"flashinfer {self.flashinfer_version}: {len(self.modules)} modules "
                 f"{'' if self.prebuilt else 'built ahead '}for "
                 f"{flashinfer_arch_list(self.archs)} {how}",
                 f"  {self.wheel} ({self.size / 2**20:.1f} MiB)"]
        if self.units:
            lines.append(f"  {len(self.units)} units, {cpu:.0f} CPU-s, highest peak "
                         f"{peak:.1f} GiB")
        lines += [f"  {line}" for line in self.environment]
        return lines + [f"  {name}" for name in self.modules]

    @property
    def error(self) -> None:
        return None


def _check_request(request: AotRequest) -> None:
    for option in _OWN_OPTIONS:
        if any(a == option or a.startswith(option + "=") for a in request.args):
            raise UsageError(f"aot_args may not set {option}: sparkbuild chooses it",
                             hint="drop it from [flashinfer] aot_args")
    if not request.flashinfer_wheel.is_file():
        raise CacheMissError("the flashinfer-python wheel is not in the cache",
                             where=str(request.flashinfer_wheel),
                             hint="run the build online once, or import a bundle")
    if request.sha256 and sha256_file(request.flashinfer_wheel) != request.sha256:
        raise HashMismatchError("the flashinfer-python wheel differs from its pin",
                                where=str(request.flashinfer_wheel))


_PIP_ENV = {"PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INDEX": "1"}


def _install(request: AotRequest, site: Path, version: str) -> None:
    step(f"installing flashinfer-python {version} and what its builder imports beside the "
         "build environment")
    run([request.python, "-m", "pip", "install", "--no-index", "--no-deps", "--target", site,
         "--find-links", request.wheel_dir, request.flashinfer_wheel, *IMPORT_REQUIREMENTS],
        env=_PIP_ENV, timeout=1800, log=request.work / "install.log")


def _link_environment(request: AotRequest, site: Path) -> LinkEnvironment:
    """The headers and the link (build_env), the builder's pinned NVIDIA wheels installed
    first when the toolkit and the build environment lack what the set needs."""
    missing, wanted = wanted_wheels(request.headers, request.libraries, request.cuda_home,
                                    environment_site(request.python), site)
    if wanted:
        absent = held_wheels(request.wheel_dir, wanted)
        if absent and request.offline:
            raise missing_headers_error(missing, include_roots(
                request.cuda_home, environment_site(request.python), site))
        if absent:
            fetch_header_wheels(absent, request.python, request.wheel_dir,
                                request.work / "headers-download.log")
        run([request.python, "-m", "pip", "install", "--no-index", "--no-deps", "--target",
             site, "--find-links", request.wheel_dir, *wanted], env=_PIP_ENV, timeout=1800,
            log=request.work / "headers-install.log")
    return link_environment(cuda_home=request.cuda_home, python=request.python,
                            builder_site=site, work=request.work,
                            needed_headers=request.headers, needed_libraries=request.libraries)


def _pool_plan(request: AotRequest, jobs: int) -> PoolPlan:
    """The heavy units' pool over the unit table's flashinfer units (the rule before any
    was measured: CUTLASS/GEMM/FP4 paths at ``job_memory_gib`` each)."""
    from sparkbuild.jobplan.machine import read_memory, usable_memory

    usable = request.usable_bytes
    if usable is None:
        usable = usable_memory(*read_memory())
    measured: dict[str, int] = {}
    killed: tuple[str, ...] = ()
    known = []
    if request.cache_root is not None:
        measured, killed = measured_for(request.cache_root, request.unit_arch)
        known = known_units(request.cache_root, request.unit_arch)
    plan = plan_pools(cores=jobs, usable_bytes=usable, job_memory_gib=request.job_memory_gib,
                      measured=measured, killed=killed, known=known)
    team = request.team
    if team is None:
        return plan
    from sparkbuild.jobplan.machine import BuildPlan, with_team_cores

    teamed = with_team_cores(BuildPlan(plan.jobs, 1, None, (), plan), team_cpus=team.cpus,
                             servers=team.servers, scheduler="the build's scheduler",
                             usable_bytes=usable, server_memory=team.memory).pool
    if teamed is None:
        return plan
    # the builder's ninja keeps its own jobs: the pool no deeper than they are
    return dataclasses.replace(teamed, jobs=jobs, depth=min(teamed.depth, jobs))


def _ninja_environment(request: AotRequest, site: Path, plan: PoolPlan) -> dict[str, str]:
    """sparkbuild's ninja first on PATH (flashinfer runs ``ninja`` by name), the plan
    file it applies, and the record of its runs."""
    real = site / "bin" / "ninja"
    if not real.is_file():
        found = shutil.which("ninja")
        if found is None:
            raise ToolchainError("no ninja for flashinfer's builder", where=str(site),
                                 hint="the ninja wheel is one of the builder's imports")
        real = Path(found)
    logs = request.work / "logs"
    write_wrapper(request.work / "bin" / "ninja", sys.executable,
                  Path(__file__).resolve().parents[2])
    plan_file = write_plan_file(plan, logs / "pool-plan.json", request.work)
    record = logs / "ninja-runs.jsonl"
    record.unlink(missing_ok=True)
    return {REAL_VARIABLE: str(real), PLAN_VARIABLE: str(plan_file),
            RECORD_VARIABLE: str(record)}


def build_jit_cache(request: AotRequest) -> AotResult:
    """Build flashinfer's modules for ``request.archs`` and pack them as a wheel."""
    _check_request(request)
    version = wheel_version(request.flashinfer_wheel)
    work = request.work
    shutil.rmtree(work, ignore_errors=True)
    site = work / "site"
    work.mkdir(parents=True)
    _install(request, site, version)
    link = _link_environment(request, site)  # a missing header is named here
    with _launcher(request) as (launcher_env, launcher):
        return _build(request, version, site, link, launcher_env, launcher)


@contextlib.contextmanager
def _launcher(request: AotRequest) -> Iterator[tuple[dict[str, str], str]]:
    if request.launcher_env:
        yield dict(request.launcher_env), "the build's sccache"
        return
    from sparkbuild.flashinfer.compile_launcher import builder_launcher

    with builder_launcher(request.cache_root or request.work / "cache", request.work) as got:
        yield got


def _build(request: AotRequest, version: str, site: Path, link: LinkEnvironment,
           launcher_env: dict[str, str], launcher: str) -> AotResult:
    work = request.work
    modules, build = work / "modules", work / "build"
    jobs = request.jobs or os.cpu_count() or 1
    plan = _pool_plan(request, jobs)
    env = {**aot_environment(request, site), **link.env(), **launcher_env,
           **_ninja_environment(request, site, plan), "MAX_JOBS": str(plan.jobs)}
    env["PATH"] = os.pathsep.join([str(work / "bin"), env["PATH"]])
    driver = work / "driver.py"
    shutil.copyfile(Path(__file__).with_name("driver.py"), driver)
    plan_file = work / "plan.json"
    driver_plan: dict[str, Any] = {"out": str(modules), "build": str(build)}
    if request.modules:
        driver_plan["specs"] = [m.plan_item() for m in request.modules]
    else:
        driver_plan["aot_args"] = list(request.args)
    write_text_atomic(plan_file, json.dumps(driver_plan, indent=1) + "\n")
    log = work / "aot.log"
    environment = [*link.lines(), f"compiler launcher: {launcher}",
                   f"job plan: MAX_JOBS={plan.jobs}, heavy units in pool {plan.to_dict()['pool']}"
                   f" of depth {plan.depth} ({plan.basis})"]
    for line in environment:
        info(f"flashinfer-aot: {line}")
    what = (f"{len(request.modules)} modules of the model's set" if request.modules
            else "flashinfer's default set" + (f" ({' '.join(request.args)})"
                                                if request.args else ""))
    step(f"building {what} for FLASHINFER_CUDA_ARCH_LIST="
         f"{env['FLASHINFER_CUDA_ARCH_LIST']} (log: {log})")
    started = time.monotonic()
    marks = BuildMarks()
    try:
        with MemorySampler(extra_roots=functools.partial(
                launcher_servers, launcher_env.get("SCCACHE_SERVER_PORT")),
                sources=_SourceMap(build / "cached_ops")) as sampler:
            run([request.python, driver, plan_file], env=env, cwd=work,
                timeout=24 * 3600.0, log=log)
    except CommandFailed as exc:
        only = any(a == "--only" or a.startswith("--only=") for a in request.args)
        exc.hint = (  # proc.run's own hint is generic: this one says what to change
            "flashinfer generates every switched-on group's modules before --only picks: "
            "switch the others off too (--add-moe false, --add-misc false, --add-xqa false, "
            "...)" if only else "read the log; a unit killed for memory is retried in the "
            "heavy pool (logs/ninja-runs.jsonl)")
        raise
    seconds = time.monotonic() - started
    marks.ended = time.time()
    units = _units(request, marks, sampler)
    built = sorted(p.parent.name for p in modules.glob("*/*.so"))
    if not built:
        raise CommandFailed("flashinfer's builder wrote no module", where=str(log))
    wheel = pack_jit_cache(modules, request.out,
                           jit_cache_version(version, request.cuda_version), version)
    return AotResult(wheel, jit_cache_version(version, request.cuda_version), version,
                     request.archs, request.args, built, seconds, wheel.stat().st_size, log,
                     sources=_source_count(build), units=units, environment=environment)


class _SourceMap:
    """Each compile unit's source -> its object file, read from the modules' ninja files
    once flashinfer has written them (for the compiles a launcher's server runs)."""

    def __init__(self, jit_dir: Path) -> None:
        self.jit_dir = jit_dir
        self.found: dict[str, str] = {}

    def __call__(self) -> dict[str, str]:
        if not self.found:
            for manifest in sorted(self.jit_dir.glob("*/build.ninja")):
                for edge in read_ninja_file(manifest).edges:
                    if edge.is_compile and edge.outputs:
                        self.found[edge.source] = edge.outputs[0]
        return self.found


def _source_count(build: Path) -> int:
    try:
        specs = json.loads((build / SPECS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    return sum(len(s.get("sources", [])) for s in specs if isinstance(s, dict))


def _units(request: AotRequest, marks: BuildMarks, sampler: MemorySampler
           ) -> list[dict[str, Any]]:
    """The build's units from ninja's log and the sampler (its timeline, each unit's peak
    and CPU-seconds), stored in the cache's unit table when there is one."""
    peaks, cpu = sampler.peaks, sampler.cpu_seconds
    runs = read_runs(request.work / "logs" / "ninja-runs.jsonl")
    if not runs:
        return []
    timeline = build_timeline(runs, marks, request.work, peaks,
                              cores=request.jobs or os.cpu_count() or 1)
    if request.cache_root is not None:
        remember_build(request.cache_root, request.unit_arch, timeline)
    table = []
    for unit in timeline.units:
        entry = unit.to_dict()
        entry["module"] = Path(unit.output).parent.name
        if unit.output in cpu:
            entry["cpu_seconds"] = round(cpu[unit.output], 2)
        table.append(entry)
    write_text_atomic(request.work / "units.json", json.dumps(table, indent=1) + "\n")
    return table


def aot_environment(request: AotRequest, site: Path) -> dict[str, str]:
    """The builder's environment: its packages first on the path, nvcc and ninja on PATH,
    a workspace inside ``work``, and no download (an artifact it needs fails the build)."""
    path = [str(site / "bin"), str(request.python.parent), str(request.cuda_home / "bin")]
    env = {
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(
            os.pathsep),
        "PATH": os.pathsep.join([*path, os.environ.get("PATH", "")]),
        "CUDA_HOME": str(request.cuda_home),
        "FLASHINFER_CUDA_ARCH_LIST": flashinfer_arch_list(request.archs),
        "FLASHINFER_WORKSPACE_BASE": str(request.work / "workspace"),
        "FLASHINFER_NO_DOWNLOAD": "1",
        "PYTHONNOUSERSITE": "1",
    }
    if request.jobs:
        env["MAX_JOBS"] = str(request.jobs)
    return env


@dataclass(frozen=True, kw_only=True)
class AotPlace:
    """Where one jit-cache build of a recipe runs and with what: the command's flags, or
    what ``wheel`` gives the builder alongside its compile."""

    out: Path
    python: Path
    """The interpreter whose site the builder's wheels are installed for."""
    cache_root: Path
    work: Path
    offline: bool
    jobs: int | None = None
    cuda_home: Path | None = None
    """None: the CUDA of this nvcc."""
    only: tuple[str, ...] = ()
    """Only the modules whose name matches one of these globs."""
    launcher_env: dict[str, str] = field(default_factory=dict)
    usable_bytes: float | None = None


def build_for_recipe(recipe: Recipe, place: AotPlace) -> AotResult:
    """``sparkbuild flashinfer-aot``: the recipe's target and module set (the model's, or
    ``[flashinfer] aot_args``), with the pinned wheel's builder (``wheel`` reuses a kept
    build: flashinfer/kept_builds.py)."""
    return build_jit_cache(request_for_recipe(recipe, place))


def request_for_recipe(recipe: Recipe, place: AotPlace) -> AotRequest:
    """The build the recipe asks for: its target, its module set (``only``: the modules
    whose name matches one of these globs), the pinned wheel and its builder's wheels
    (downloaded now when online and missing), and this nvcc."""
    from sparkbuild.flashinfer.module_set import recipe_set, select
    from sparkbuild.toolchain.tools import cuda_root, find_nvcc

    pin = pinned_flashinfer(recipe)
    chosen = recipe_set(recipe)
    only, offline = place.only, place.offline
    modules = tuple(select(chosen.modules, only)) if chosen is not None else ()
    args = recipe.flashinfer.aot_args
    if chosen is None and only:
        args = (*args, *(a for glob in only for a in ("--only", glob)))
    nvcc = find_nvcc()
    wheel, wheel_dir = aot_wheels(pin, place.python, place.cache_root, offline=offline)
    version = nvcc.version
    return AotRequest(
        flashinfer_wheel=wheel, wheel_dir=wheel_dir, python=place.python,
        archs=recipe.target.cuda_archs, out=place.out, work=place.work,
        cuda_home=place.cuda_home or cuda_root(nvcc),
        cuda_version=f"{version.major}.{version.minor}" if version else "0.0",
        args=args, jobs=place.jobs, sha256=pin.sha256, modules=modules,
        launcher_env=tuple(sorted(place.launcher_env.items())), cache_root=place.cache_root,
        usable_bytes=place.usable_bytes, job_memory_gib=recipe.build.job_memory_gib,
        offline=offline)
