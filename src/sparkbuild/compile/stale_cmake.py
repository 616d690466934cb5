"""Build directories an earlier run configured with another CUDA compiler.

A bundle's tree is kept between runs (a warm rebuild reuses its objects).  When its build
directory holds a ``CMakeCache.txt`` whose ``CMAKE_CUDA_COMPILER`` is not the nvcc this
run gives CMake (vLLM's setup.py passes ``{CUDA_HOME}/bin/nvcc``), CMake deletes that
cache itself and configures again without the ``-D`` values it was given: vLLM then stops
with "Please set VLLM_PYTHON_EXECUTABLE".  Seen here on a second run whose CUDA root had
changed.  So such a cache is removed first; the objects stay, and ninja rebuilds what the
other compiler changes.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from sparkbuild.toolchain.tools import nvcc_candidates

_COMPILER = re.compile(r"^CMAKE_CUDA_COMPILER:[A-Z]+=(.*)$", re.MULTILINE)


def cuda_compiler_for(env: dict[str, str]) -> Path:
    """The nvcc a vLLM build in ``env`` hands CMake: torch's CUDA_HOME (``CUDA_HOME``,
    ``CUDA_PATH``, the nvcc on ``PATH``, ``/usr/local/cuda``), then ``bin/nvcc``.  torch does
    not read ``CUDACXX``."""
    return next(path for path, source in nvcc_candidates(env) if source != "CUDACXX")


def cached_cuda_compiler(cache: Path) -> str | None:
    try:
        match = _COMPILER.search(cache.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    return match.group(1).strip() if match else None


def _same_file(a: str, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def stale_caches(tree: Path, nvcc: Path) -> list[tuple[Path, str]]:
    """The CMake caches under ``tree/build`` configured with a CUDA compiler other than
    ``nvcc`` (or with one that no longer exists), each with the compiler it names."""
    stale = []
    for cache in sorted((tree / "build").glob("*/CMakeCache.txt")):
        compiler = cached_cuda_compiler(cache)
        if compiler and (not Path(compiler).exists() or not _same_file(compiler, nvcc)):
            stale.append((cache, compiler))
    return stale


def drop_stale_caches(tree: Path, nvcc: Path) -> list[tuple[Path, str]]:
    """Remove each stale cache and its ``CMakeFiles``; (cache, the compiler it named)."""
    dropped = stale_caches(tree, nvcc)
    for cache, _compiler in dropped:
        cache.unlink()
        shutil.rmtree(cache.parent / "CMakeFiles", ignore_errors=True)
    return dropped
