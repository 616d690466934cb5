"""The wheel build: ``pip wheel --no-build-isolation --no-deps`` of a prepared tree.

The build never uses the network: sources come unpacked from the cache
(:mod:`sparkbuild.vendoring.materialize`), the build requirements are installed from cached wheels
into a build environment of their own (kept in the cache, keyed by the wheels' hashes),
and pip runs with no index and no config files.  What the tree's CMake sees:

* TORCH_CUDA_ARCH_LIST from the recipe (``12.1``), MAX_JOBS/NVCC_THREADS from doctor;
* the Ninja generator, and the launcher as CMAKE_<LANG>_COMPILER_LAUNCHER: sccache for a
  shared compile cache (its directory on PATH too, where vLLM's setup.py looks for it),
  else ccache if present (and VLLM_DISABLE_SCCACHE=1);
* in CMAKE_ARGS (vLLM's setup.py appends it to its cmake call):
  FETCHCONTENT_SOURCE_DIR_<NAME> for each source, the tree's own ``*_SRC_DIR``
  overrides (also as environment variables, which vLLM's CMake reads first),
  FETCHCONTENT_FULLY_DISCONNECTED=ON offline, and sparkbuild's dependency provider;
* CARGO_NET_OFFLINE=true and a CARGO_HOME whose config points at the vendored crates.

Ninja's ``[n/m]`` lines drive a progress bar with the time left; the whole output goes
to a log file, and its tail is shown when the build fails.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.checks.ext_targets import hook_environment
from sparkbuild.compile.cmake_shim import REAL_VARIABLE as CMAKE_REAL_VARIABLE
from sparkbuild.compile.stale_cmake import cuda_compiler_for, drop_stale_caches
from sparkbuild.compile.uncompressed_wheel import stored_wheel_environment
from sparkbuild.compile.unit_code_watch import ObjectRefusal, UnitCodeWatch, object_readers
from sparkbuild.console import count_progress, info, step
from sparkbuild.errors import CommandFailed, DiskFullError, UsageError, VerifyError, is_disk_full
from sparkbuild.jobplan.ninja_shim import (
    DEPTH_VARIABLE,
    PLAN_VARIABLE,
    REAL_VARIABLE,
    RECORD_VARIABLE,
    write_wrapper,
)
from sparkbuild.jobplan.timeline import BuildMarks, build_timeline, read_runs
from sparkbuild.jobplan.unit_memory import MemorySampler
from sparkbuild.proc import Streams, run
from sparkbuild.records import Record, as_json, rounded
from sparkbuild.resources import build_tools_dir
from sparkbuild.settings import FETCH_LOG, OFFLINE
from sparkbuild.store.files import venv_python
from sparkbuild.store.lock import CacheLock
from sparkbuild.store.phases import credit

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from sparkbuild.jobplan.timeline import BuildTimeline
    from sparkbuild.store.cache import Cache
    from sparkbuild.toolchain.sass_library import KeptCubins
    from sparkbuild.vendoring.materialize import Materialized

PROVIDER = build_tools_dir() / "sparkbuild_provider.cmake"
"""The CMake dependency provider: in the checkout, or in the installed wheel's resources."""

BUILD_TIMEOUT = 24 * 3600.0
_STEP = re.compile(r"\[(\d+)/(\d+)\]")
_UNIT = re.compile(r"\] Building (CUDA|CXX|C) object (\S+)")
LAUNCHER_LANGUAGES = ("C", "CXX", "CUDA")


@dataclass
class NinjaProgress:
    """Reads build output line by line: ninja's ``[n/m]`` steps and the compiled units."""

    update: Callable[[int, int], None] = lambda _done, _total: None
    units: list[str] = field(default_factory=list)
    last: tuple[int, int] | None = None

    def __call__(self, line: str) -> None:
        match = _STEP.search(line)
        if match is None:
            return
        done, total = int(match.group(1)), int(match.group(2))
        self.last = (done, total)
        self.update(done, total)
        unit = _UNIT.search(line)
        if unit:
            self.units.append(unit.group(2))


@dataclass(frozen=True)
class BuildRequest:
    """Everything one build needs to know; see :func:`build_environment`."""

    tree: Path
    work: Path
    archs: str
    """TORCH_CUDA_ARCH_LIST, e.g. ``12.1``."""
    jobs: int
    nvcc_threads: int | None
    offline: bool
    deps: Materialized
    recipe_env: Mapping[str, str] = field(default_factory=dict)
    launcher: str | None = None
    targets: tuple[str, ...] = ()
    """Only these extensions (``wheel --targets``; see sparkbuild.checks.ext_targets)."""
    pool_plan: Path | None = None
    """The heavy units' pool plan file (sparkbuild.jobplan.pools); None: no pool."""
    pool_depth: int | None = None
    code_targets: tuple[str, ...] = ()
    """The recipe's cuda_archs: each CUDA object's machine code is read for them as ninja
    finishes it (sparkbuild.compile.unit_code_watch); empty: not read until verify."""
    allow_jit: bool = False
    kept_code: KeptCubins | None = None
    """Where the unit watch keeps each object's cubin facts: verify's read of the built
    libraries then finds them (sparkbuild.toolchain.kept_sass)."""


@dataclass
class BuildOutcome(Record):
    wheels: list[Path]
    log: Path
    seconds: float = field(metadata=as_json(dump=rounded(1)))
    compiled_units: list[str] = field(metadata=as_json(dump=len))
    env: dict[str, str]
    fetch_log: Path = field(metadata=as_json(skip=True))
    python: Path = field(metadata=as_json(skip=True))
    timeline: BuildTimeline | None = field(default=None, metadata=as_json(skip=True))
    unit_code: dict[str, Any] | None = None
    """What the unit watch read (UnitCodeWatch.to_dict)."""


def _no_spaces(values: Mapping[str, str]) -> None:
    for key, value in values.items():
        if any(char.isspace() for char in value):
            raise UsageError(
                f"{key}={value!r} contains whitespace, which CMAKE_ARGS cannot carry "
                "(vLLM's setup.py splits it on spaces)",
                hint="use a cache and work directory whose path has no spaces",
            )


def cmake_overrides(request: BuildRequest, fetch_log: Path) -> dict[str, str]:
    """The -D options sparkbuild adds to CMAKE_ARGS."""
    defines = dict(request.deps.cmake_defines)
    if request.offline:
        defines["FETCHCONTENT_FULLY_DISCONNECTED"] = "ON"
    if PROVIDER.is_file():
        defines["CMAKE_PROJECT_TOP_LEVEL_INCLUDES"] = str(PROVIDER)
    if request.launcher:
        for language in LAUNCHER_LANGUAGES:
            defines[f"CMAKE_{language}_COMPILER_LAUNCHER"] = request.launcher
    defines["CMAKE_MAKE_PROGRAM"] = str(ninja_wrapper(request.work))
    _no_spaces(defines)
    return defines


def build_environment(request: BuildRequest, fetch_log: Path) -> dict[str, str]:
    """The variables the build runs with, on top of the current environment."""
    env = dict(request.recipe_env)
    args = shlex.split(env.get("CMAKE_ARGS", ""))
    overrides = cmake_overrides(request, fetch_log)
    args += [f"-D{key}={value}" for key, value in sorted(overrides.items())]
    env.update(request.deps.env)
    env.update({
        "TORCH_CUDA_ARCH_LIST": request.archs,
        "MAX_JOBS": str(request.jobs),
        "CMAKE_GENERATOR": "Ninja",
        "CMAKE_ARGS": " ".join(args),
        FETCH_LOG.name: str(fetch_log),
        "CARGO_NET_OFFLINE": "true",
        # pip: the cache is the only source, whatever the user's pip config says.
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(request.deps.wheel_dir or ""),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    })
    if request.nvcc_threads:
        env["NVCC_THREADS"] = str(request.nvcc_threads)
    if request.offline:
        env[OFFLINE.name] = "1"
    env.update(hook_environment(request.work, request.tree, request.targets))
    env.update(stored_wheel_environment(request.work, env))
    env[RECORD_VARIABLE] = str(request.work / "logs" / "ninja-runs.jsonl")
    if request.pool_plan is not None:
        env[PLAN_VARIABLE] = str(request.pool_plan)
        env[DEPTH_VARIABLE] = str(request.pool_depth or request.jobs)
    if request.launcher:
        for language in LAUNCHER_LANGUAGES:
            env[f"CMAKE_{language}_COMPILER_LAUNCHER"] = request.launcher
        if Path(request.launcher).name == "ccache":
            # Paths below the work directory hash as relative: a re-prepared tree hits.
            env.setdefault("CCACHE_BASEDIR", str(request.work))
            env.setdefault("CCACHE_NOHASHDIR", "true")
    if not _is_sccache(request.launcher):
        # vLLM's setup.py takes any sccache on PATH, whose default server would outlive us.
        env.setdefault("VLLM_DISABLE_SCCACHE", "1")
    return env


def ninja_wrapper(work: Path) -> Path:
    """sparkbuild's ninja (sparkbuild.jobplan.ninja_shim), CMake's CMAKE_MAKE_PROGRAM."""
    return work / "bin" / "ninja"


def _write_ninja_wrapper(work: Path, env: dict[str, str]) -> None:
    real = shutil.which("ninja", path=env.get("PATH"))
    if real is None:
        raise UsageError("ninja is not installed in the build environment or on PATH",
                         hint="add ninja to the build requirements, or install it")
    env[REAL_VARIABLE] = real
    package_parent = Path(__file__).resolve().parents[2]
    write_wrapper(ninja_wrapper(work), sys.executable, package_parent)


def _write_cmake_wrapper(work: Path, env: dict[str, str]) -> None:
    """sparkbuild's cmake (sparkbuild.compile.cmake_shim), first on the build's PATH: a
    configure that would repeat the last one is skipped."""
    real = shutil.which("cmake", path=env.get("PATH"))
    if real is None:
        return  # the tree's own build says what is missing
    env[CMAKE_REAL_VARIABLE] = real
    shim = work / "cmake-shim"
    write_wrapper(shim / "cmake", sys.executable, Path(__file__).resolve().parents[2],
                  module="sparkbuild.compile.cmake_shim")
    env["PATH"] = os.pathsep.join([str(shim), env["PATH"]])


def _is_sccache(launcher: str | None) -> bool:
    return launcher is not None and Path(launcher).name == "sccache"


# -- the build environment -----------------------------------------------------------------


def ensure_build_env(cache: Cache, deps: Materialized, key: str,
                     root: Path | None = None) -> Path:
    """A venv holding the build requirements, installed from the cached wheels only.

    Kept at ``CACHE/buildenv/KEY`` (KEY: the wheel set's hash), or ``ROOT/buildenv/KEY``
    for a shared compile cache's stable build root, and reused: installing torch takes
    most of a minute.  A venv cannot be moved (its scripts name their interpreter), so it
    is created in place and marked complete last.
    """
    venv = (root or cache.root) / "buildenv" / key[:24]
    marker = venv / ".sparkbuild-complete"
    python = venv_python(venv)
    if marker.is_file() and python.exists():
        return python
    # A stable build root is shared by every cache of the machine: it has its own lock.
    guard = CacheLock(venv.with_name(venv.name + ".lock")).held() if root else cache.locked()
    with guard:
        if marker.is_file() and python.exists():
            return python
        step(f"creating the build environment {venv}")
        shutil.rmtree(venv, ignore_errors=True)
        try:
            _fill_build_env(venv, python, deps)
            marker.write_text(" ".join(deps.requirements) + "\n", encoding="utf-8")
        except BaseException as exc:  # a half-made venv is never left to look reusable
            full = _filled_up(exc, venv.parent)
            shutil.rmtree(venv, ignore_errors=True)
            if full:
                raise DiskFullError(
                    "the disk filled up while creating the build environment",
                    where=str(venv), hint="free some space (the build environment holds "
                    "torch: several GB) and run again") from exc
            raise
    return python


LOW_DISK_BYTES = 16 << 20
"""Free space below which a failed step is taken to have failed for want of disk."""


def _filled_up(exc: BaseException, directory: Path) -> bool:
    """Whether ``exc`` (while writing under ``directory``) came from a full disk.

    ``python -m venv`` hides the errno of its ensurepip step, so a failed command on a
    filesystem left with almost no free space counts as one too.
    """
    if isinstance(exc, DiskFullError) or is_disk_full(exc):
        return True
    if not isinstance(exc, CommandFailed):
        return False
    if "No space left on device" in f"{exc.what} {exc.hint}":
        return True
    try:
        return shutil.disk_usage(directory).free < LOW_DISK_BYTES
    except OSError:
        return False


def _fill_build_env(venv: Path, python: Path, deps: Materialized) -> None:
    run([sys.executable, "-m", "venv", venv], timeout=600)
    if deps.requirements:
        with tempfile.TemporaryDirectory() as scratch:
            reqs = Path(scratch) / "build-requirements.txt"
            reqs.write_text("\n".join(deps.requirements) + "\n", encoding="utf-8")
            run([python, "-m", "pip", "install", "--no-index", "--find-links",
                 str(deps.wheel_dir), "-r", reqs],
                env={"PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "",
                     "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
                timeout=3600, log=venv.parent / f"{venv.name}.install.log")


# -- the build ---------------------------------------------------------------------------

PACKAGING_SCRATCH = ("build/bdist.*",)
"""What the build backend packs a wheel in (setuptools' ``bdist_wheel``), inside the tree."""


def clear_packaging_scratch(tree: Path) -> list[str]:
    """Remove the build backend's packaging scratch from ``tree``; the names removed.

    A warm rebuild keeps the tree's ``build/`` (CMake's build directory lives there), but a
    packaging step that failed half-way (a full disk) leaves ``build/bdist.*`` behind, and
    setuptools then fails every later build with "File exists".  Compiled objects are not
    in it: clearing it costs only the copy into the wheel.  A build that finishes clears
    what its own packaging left (setuptools keeps ``build/bdist.PLATFORM`` even then), so
    scratch found before a build is always that of one that did not finish.
    """
    removed = []
    for pattern in PACKAGING_SCRATCH:
        for scratch in sorted(tree.glob(pattern)):
            if scratch.is_dir() and not scratch.is_symlink():
                shutil.rmtree(scratch)
            else:
                scratch.unlink()
            removed.append(scratch.relative_to(tree).as_posix())
    return removed


def build_tree(request: BuildRequest, python: Path) -> BuildOutcome:
    """Build the wheel(s) of ``request.tree`` with ``python`` (the build environment)."""
    for name in clear_packaging_scratch(request.tree):
        info(f"removed {name}, the packaging scratch of an earlier build that did not finish")
    logs = request.work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / "build.log"
    fetch_log = logs / "fetchcontent.tsv"
    fetch_log.write_text("", encoding="utf-8")
    out = request.work / "dist"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = build_environment(request, fetch_log)
    path = [str(python.parent)]
    if request.launcher and _is_sccache(request.launcher):
        path.append(str(Path(request.launcher).parent))  # vLLM's setup.py looks on PATH
    env["PATH"] = os.pathsep.join([*path, os.environ.get("PATH", "")])
    _write_ninja_wrapper(request.work, env)
    _write_cmake_wrapper(request.work, env)
    nvcc = cuda_compiler_for(env)
    for cache, compiler in drop_stale_caches(request.tree, nvcc):
        info(f"removed {cache}: configured with {compiler}, this build uses {nvcc}")
    record = Path(env[RECORD_VARIABLE])
    record.unlink(missing_ok=True)
    find_links = ["--find-links", str(request.deps.wheel_dir)] if request.deps.wheel_dir else []
    command: list[str | os.PathLike[str]] = [
        python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
        *find_links, "-v", "--wheel-dir", out, request.tree,
    ]
    step(f"building {request.tree} for TORCH_CUDA_ARCH_LIST={request.archs} "
         f"with MAX_JOBS={request.jobs} (log: {log})")
    started = time.monotonic()
    marks = BuildMarks()
    with count_progress("compiling") as update, MemorySampler() as sampler, \
            UnitCodeWatch(request.code_targets, request.allow_jit,
                          object_readers(request.kept_code)) as watch:
        progress = NinjaProgress(update)

        def reader(line: str) -> None:
            progress(line)
            marks(line)
            watch(line)

        try:
            run(command, cwd=request.tree, env=env, log=log, timeout=BUILD_TIMEOUT,
                streams=Streams(progress=reader, stop=watch.stop))
        except CommandFailed as failure:
            if watch.refusal is not None:
                raise refused_while_compiling(watch.refusal, request.code_targets,
                                              time.monotonic() - started) from failure
            raise CommandFailed(
                f"the build of {request.tree} failed after "
                f"{time.monotonic() - started:.0f} s\n{failure.what}",
                where=failure.where, hint=failure.hint,
            ) from failure
    clear_packaging_scratch(request.tree)  # this build's own: it finished
    wheels = sorted(out.glob("*.whl"))
    if not wheels:
        raise CommandFailed("pip wheel succeeded but wrote no wheel", where=f"full log: {log}")
    seconds = time.monotonic() - started
    marks.ended = time.time()
    timeline = build_timeline(read_runs(record), marks, request.tree, sampler.peaks)
    for name, phase_seconds in timeline.phases.items():
        credit(name, phase_seconds)
    info(f"built {', '.join(w.name for w in wheels)} in {seconds:.0f} s "
         f"({len(progress.units)} compiled units)")
    if request.code_targets:
        info(watch.line())
    changed = {k: v for k, v in env.items() if k != "PATH"}
    return BuildOutcome(wheels, log, seconds, progress.units, changed, fetch_log, python,
                        timeline, watch.to_dict() if request.code_targets else None)


def refused_while_compiling(refusal: ObjectRefusal, targets: tuple[str, ...],
                            seconds: float) -> VerifyError:
    """The error for a build the unit watch stopped: what verify would have said, now."""
    return VerifyError(
        f"the build was stopped {seconds:.0f} s in: {refusal.output} "
        f"holds code verify would refuse for {', '.join(targets)}: {refusal.reason}",
        where=str(refusal.path),
        hint="the tree's arch lists or feature guards compile this unit into code the "
             "target cannot run; fix the series or the recipe's cuda_archs "
             "(`sparkbuild check --tree TREE --unit SOURCE` reads one unit's code in "
             "minutes); nothing was written")
