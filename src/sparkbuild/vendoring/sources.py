"""The FetchContent sources of a tree, from its own CMake run under a few assumption sets.

The recorder (:mod:`sparkbuild.toolchain.cmake_recorder`) runs the tree's CMake for real,
``cmake/external_projects/*.cmake`` included, and records every ``FetchContent_Declare`` and
full-signature ``FetchContent_Populate`` with its arguments.  One run sees one machine, so
the tree is recorded under each assumption set that decides what a build fetches:

* a CUDA build with a CUDA 12.x and a 13.x toolkit (:data:`CUDA_VERSIONS`), a host compiler
  new enough for every release's checks, and a target list that spans every SM family
  (:data:`VENDOR_ARCHS`): what the build fetches.  A source declared under only some of
  them is planned, marked ``certain: false``.
* the same CUDA build with every ``*_SRC_DIR`` variable the tree's CMake names pointing at
  an empty directory: a source that the tree then takes from that directory (a
  SOURCE_DIR-only declaration, or ``<name>_SOURCE_DIR`` set to it) hangs on that option,
  which becomes the source's ``override``.
* CPU builds on x86_64 and aarch64 (VLLM_TARGET_DEVICE=cpu, /proc/cpuinfo read from a file
  that lists the ISA): sources only those fetch are listed as ``unreached``.

A run keeps going past FATAL_ERROR (what a configure would stop at under one assumption
does not hide the declarations after it), and a CMake error that cuts a run short is
reported in the plan's notes with what was recorded before it.
"""

from __future__ import annotations

import re
import shlex
import sys
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.toolchain import tools
from sparkbuild.toolchain.cmake_recorder import (
    BuildRecord,
    FetchDeclaration,
    RecordInputs,
    cmake_files,
    find_recorder_cmake,
    gencode_for,
    record_build,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

CUDA_VERSIONS = ("12.9", "13.0")
"""The toolkits a Spark build may use: 12.9 is the first with sm_121."""
VENDOR_ARCHS = ("7.5", "8.0", "8.9", "9.0a", "10.0a", "12.0a", "12.1a")
ASSUMED_GCC = "14.2"
"""The host compiler a build machine has (releases refuse GCC < 13 for CUDA builds)."""
CPUINFO = {
    "x86_64": "flags\t: fpu sse sse2 avx avx2 avx512f avx512bw avx512vl avx512_bf16 amx_bf16\n",
    "aarch64": "Features\t: fp asimd evtstrm aes crc32 bf16 i8mm sve\n",
}
_OVERRIDE_VAR = re.compile(r"\b([A-Z][A-Z0-9_]*_SRC_DIR)\b")

# FetchContent options whose value is one word; the rest may take several.
_SINGLE_VALUE = frozenset({
    "GIT_REPOSITORY", "GIT_TAG", "GIT_SHALLOW", "GIT_PROGRESS", "URL_HASH", "URL_MD5",
    "SOURCE_DIR", "BINARY_DIR", "SUBBUILD_DIR", "SOURCE_SUBDIR", "DOWNLOAD_NAME",
    "GIT_SUBMODULES_RECURSE", "EXCLUDE_FROM_ALL", "SYSTEM", "OVERRIDE_FIND_PACKAGE",
    "DOWNLOAD_EXTRACT_TIMESTAMP", "TLS_VERIFY", "GIT_REMOTE_NAME", "QUIET",
})
_MULTI_VALUE = frozenset({
    "URL", "GIT_SUBMODULES", "GIT_CONFIG", "CONFIGURE_COMMAND", "BUILD_COMMAND",
    "INSTALL_COMMAND", "TEST_COMMAND", "PATCH_COMMAND", "UPDATE_COMMAND",
    "FIND_PACKAGE_ARGS", "CMAKE_ARGS",
})


def fetch_options(args: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """FetchContent keyword arguments: keyword -> values (GIT_TAG, URL, URL_HASH, ...)."""
    options: dict[str, list[str]] = {}
    key: str | None = None
    for value in args:
        if value in _SINGLE_VALUE or value in _MULTI_VALUE:
            key = value
            options.setdefault(key, [])
        elif key is not None:
            options[key].append(value)
            if key in _SINGLE_VALUE:
                key = None
    return {k: tuple(v) for k, v in options.items()}


@dataclass(frozen=True)
class Assumption:
    """One machine the tree's CMake is run as."""

    name: str
    device: str = "cuda"
    cuda: str = CUDA_VERSIONS[-1]
    processor: str = "x86_64"
    overrides: bool = False


ASSUMPTIONS = (
    *(Assumption(f"cuda-{version}", cuda=version) for version in CUDA_VERSIONS),
    Assumption("cuda-overrides", overrides=True),
    Assumption("cpu-x86_64", device="cpu"),
    Assumption("cpu-aarch64", device="cpu", processor="aarch64"),
)


def cmake_defines(env: Mapping[str, str]) -> dict[str, str]:
    """The ``-DNAME=VALUE`` entries of CMAKE_ARGS (how setup.py passes options to CMake)."""
    defines: dict[str, str] = {}
    for word in shlex.split(env.get("CMAKE_ARGS", "")):
        match = re.fullmatch(r"-D([A-Za-z0-9_]+)(?::[A-Za-z]+)?=(.*)", word)
        if match:
            defines[match.group(1)] = match.group(2)
    return defines


def override_names(tree: Path) -> list[str]:
    """Every ``*_SRC_DIR`` variable the tree's CMake files name."""
    names: set[str] = set()
    for path in cmake_files(tree):
        names.update(_OVERRIDE_VAR.findall(path.read_text(encoding="utf-8", errors="replace")))
    return sorted(names)


@dataclass(frozen=True)
class Recorded:
    assumption: Assumption
    record: BuildRecord
    markers: dict[str, str]
    """Override variable -> the empty directory it pointed at (overrides run only)."""


def _record_one(tree: Path, work: Path, assumption: Assumption, env: Mapping[str, str],
                overrides: list[str], torch: str) -> Recorded:
    cmake = find_recorder_cmake()
    binary = work / assumption.name
    binary.mkdir(parents=True)
    cpuinfo = binary / "cpuinfo"
    cpuinfo.write_text(CPUINFO[assumption.processor], encoding="utf-8")
    defines = cmake_defines(env)
    run_env = {name: env[name] for name in overrides if name in env}
    markers: dict[str, str] = {}
    if assumption.overrides:
        for name in overrides:
            marker = binary / "overrides" / name
            marker.mkdir(parents=True)
            markers[name] = str(marker)
        defines.update(markers)
        run_env.update(markers)
    inputs = RecordInputs(
        tree=tree, binary_dir=binary / "cmake", cmake=cmake, python=Path(sys.executable),
        python_version=f"{sys.version_info.major}.{sys.version_info.minor}",
        python_include=Path(sysconfig.get_paths()["include"]), cuda_version=assumption.cuda,
        cuda_root=tools.DEFAULT_CUDA_ROOT, arch_list=";".join(VENDOR_ARCHS),
        gencode=gencode_for(VENDOR_ARCHS), torch_version=torch, torch_includes=(),
        cxx_version=ASSUMED_GCC, processor=assumption.processor, device=assumption.device,
        stop_at_fatal=False, cpuinfo=cpuinfo, defines=defines, env=run_env,
        clear_env=tuple(name for name in overrides if name not in run_env),
    )
    return Recorded(assumption, record_build(inputs, partial_ok=True), markers)


def record_assumptions(tree: Path, env: Mapping[str, str], torch: str | None) -> list[Recorded]:
    """The tree's CMake recorded under every :data:`ASSUMPTIONS` set, two at a time."""
    overrides = override_names(tree)
    with tempfile.TemporaryDirectory(prefix="sparkbuild-vendor-") as scratch:
        work = Path(scratch)
        with ThreadPoolExecutor(2) as pool:
            return list(pool.map(
                lambda a: _record_one(tree, work, a, env, overrides, torch or "0"), ASSUMPTIONS))


def override_of(name: str, recorded: Recorded) -> tuple[str | None, bool]:
    """(the variable the tree takes ``name``'s source from, whether that local copy is
    declared with SOURCE_SUBDIR) in the overrides run."""
    lower = name.lower()
    by_dir = {marker: variable for variable, marker in recorded.markers.items()}
    for declaration in recorded.record.declarations:
        if declaration.name.lower() != lower:
            continue
        options = fetch_options(declaration.args)
        source_dir = (options.get("SOURCE_DIR") or ("",))[0]
        if source_dir in by_dir:
            return by_dir[source_dir], "SOURCE_SUBDIR" in options
    value = recorded.record.variables.get(f"{lower}_SOURCE_DIR", "")
    return (by_dir[value], True) if value in by_dir else (None, True)


def relative_where(declaration: FetchDeclaration, tree: Path) -> str:
    file, _, line = declaration.where.rpartition(":")
    path = Path(file or declaration.where)
    if path.is_relative_to(tree):
        path = path.relative_to(tree)
    return f"{path.as_posix()}:{line}" if file else path.as_posix()


def source_fields(declaration: FetchDeclaration) -> dict[str, Any] | None:
    """The SourcePlan fields of a declaration that fetches something; None for a local copy."""
    options = fetch_options(declaration.args)
    git = (options.get("GIT_REPOSITORY") or ("",))[0]
    urls = options.get("URL", ())
    if git:
        submodules = options.get("GIT_SUBMODULES")
        return {"kind": "git", "url": git, "ref": (options.get("GIT_TAG") or ("HEAD",))[0],
                "submodules": None if submodules is None else tuple(s for s in submodules if s),
                "subdir": (options.get("SOURCE_SUBDIR") or (None,))[0]}
    if urls:
        return {"kind": "url", "url": urls[0], "ref": None, "mirrors": tuple(urls[1:]),
                "url_hash": (options.get("URL_HASH") or (None,))[0],
                "subdir": (options.get("SOURCE_SUBDIR") or (None,))[0]}
    return None
