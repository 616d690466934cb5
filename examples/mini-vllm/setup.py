"""Build mini-vllm's extension with CMake and Ninja, the way vLLM's setup.py does.

Honours the same environment: TORCH_CUDA_ARCH_LIST (read by CMakeLists.txt),
MAX_JOBS, NVCC_THREADS and CMAKE_ARGS (extra -D options, split on whitespace).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


def _torch_version() -> str:
    # The torch build requirement is used at build time, as vLLM uses it for its
    # CMake config: here only for its version, baked into the extension.
    import torch

    return str(torch.__version__)


def _jobs() -> tuple[int, int | None]:
    jobs = int(os.environ.get("MAX_JOBS") or len(os.sched_getaffinity(0)))
    threads = os.environ.get("NVCC_THREADS")
    nvcc_threads = int(threads) if threads else None
    if nvcc_threads:
        jobs = max(1, jobs // nvcc_threads)
    return jobs, nvcc_threads


def _cmake() -> str:
    # The cmake on PATH first, as vLLM's setup.py runs it (a build puts its environment's
    # scripts, and sparkbuild its cmake wrapper, first on PATH); else the build
    # environment's own (the `cmake` build requirement).
    scripts = Path(sys.executable).parent
    for candidate in (shutil.which("cmake"), scripts / "cmake"):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    raise RuntimeError("cmake not found: install the `cmake` build requirement")


class cmake_build_ext(build_ext):
    def build_extension(self, ext: Extension) -> None:
        build_temp = Path(self.build_temp).resolve()
        build_temp.mkdir(parents=True, exist_ok=True)
        jobs, nvcc_threads = _jobs()
        args = [
            "-G", "Ninja",
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DMINI_VLLM_TORCH_VERSION={_torch_version()}",
            "-DCMAKE_JOB_POOL_COMPILE:STRING=compile",
            f"-DCMAKE_JOB_POOLS:STRING=compile={jobs}",
        ]
        if nvcc_threads:
            args.append(f"-DNVCC_THREADS={nvcc_threads}")
        args += os.environ.get("CMAKE_ARGS", "").split()
        cmake = _cmake()
        subprocess.check_call([cmake, "-S", str(ROOT), "-B", str(build_temp), *args])
        subprocess.check_call([cmake, "--build", str(build_temp), f"-j{jobs}", "--target", "_C"])
        out_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        prefix = out_dir.parent  # the install rule adds mini_vllm/
        subprocess.check_call(
            [cmake, "--install", str(build_temp), "--prefix", str(prefix), "--component", "_C"]
        )


setup(
    ext_modules=[CMakeExtension("mini_vllm._C")],
    cmdclass={"build_ext": cmake_build_ext},
)
