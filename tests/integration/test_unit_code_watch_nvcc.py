"""The unit watch on objects nvcc compiles here (no GPU), read by cuobjdump: a feature
guard that compiles a kernel away at 9.0a (as vLLM's scaled_mm_c2x does for its sm89
kernels) is refused as its object lands; the same kernel built where the guard
opens is not."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sparkbuild.compile.unit_code_watch import (
    ObjectReaders,
    UnitCodeWatch,
    object_readers,
    object_refusal,
)
from sparkbuild.jobplan.ninja_shim import ANNOUNCE
from sparkbuild.proc import run
from sparkbuild.store.cache import Cache
from sparkbuild.toolchain.kept_sass import CodeCache
from sparkbuild.toolchain.sass_library import read_library_facts
from sparkbuild.toolchain.tools import find_nvcc

pytestmark = pytest.mark.nvcc

GUARDED = r"""
#include <cstdio>
__global__ void sm89_only_k(float* x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890 && __CUDA_ARCH__ < 900
  x[threadIdx.x] *= 2.0f;
#elif defined(__CUDA_ARCH__)
  printf("this kernel is for sm89 only\n");
  __trap();
#endif
}
"""


def _object(root: Path, name: str, gencode: str) -> Path:
    (root / "guarded.cu").write_text(GUARDED, encoding="utf-8")
    obj = root / "CMakeFiles" / "_C.dir" / name
    obj.parent.mkdir(parents=True, exist_ok=True)
    run([str(find_nvcc().path), "-c", root / "guarded.cu", "-o", obj, "-gencode", gencode],
        cwd=root, timeout=300, echo=False)
    return obj


def test_a_guard_compiled_away_is_refused_as_the_object_lands(tmp_path: Path) -> None:
    _object(tmp_path, "guarded.cu.o", "arch=compute_90a,code=sm_90a")
    with UnitCodeWatch(("9.0a",)) as watch:
        watch(f"{ANNOUNCE}{tmp_path}")
        watch("[7/40] Building CUDA object CMakeFiles/_C.dir/guarded.cu.o")
        assert watch.stop.wait(120), watch.unread
    assert watch.refusal is not None
    assert "sm89_only_k" in watch.refusal.reason and "trap" in watch.refusal.reason


def test_the_same_kernel_where_its_guard_opens_passes(tmp_path: Path) -> None:
    obj = _object(tmp_path, "guarded.cu.o", "arch=compute_89,code=sm_89")
    assert object_refusal(obj, ("8.9",), False, ObjectReaders()) is None
    found = object_refusal(obj, ("9.0a",), False, ObjectReaders())
    assert found is not None and "no code for 9.0a" in found


def test_the_objects_cubins_read_by_the_watch_are_found_by_the_library_read(
        tmp_path: Path) -> None:
    """The host link copies each object's cubin byte for byte into the library: what the
    watch read of the objects, verify's read of the library (wheel's cache) finds."""
    nvcc = str(find_nvcc().path)
    build = tmp_path / "build"
    objects = []
    for name, body in (("a", "x[threadIdx.x] *= 2.0f;"), ("b", "x[threadIdx.x] += 2.0f;")):
        (tmp_path / f"{name}.cu").write_text(
            f"__global__ void {name}_k(float* x) {{ {body} }}\n", encoding="utf-8")
        objects.append(build / "CMakeFiles" / "_C.dir" / f"{name}.cu.o")
        objects[-1].parent.mkdir(parents=True, exist_ok=True)
        run([nvcc, "-Xcompiler", "-fPIC", "-c", tmp_path / f"{name}.cu", "-o", objects[-1],
             "-gencode", "arch=compute_90a,code=sm_90a"], cwd=tmp_path, timeout=300, echo=False)
    cache = Cache(tmp_path / "cache")
    watched = CodeCache(cache)
    with UnitCodeWatch(("9.0a",), readers=object_readers(watched)) as watch:
        watch(f"{ANNOUNCE}{build}")
        watch("[1/3] Building CUDA object CMakeFiles/_C.dir/a.cu.o")
        watch("[2/3] Building CUDA object CMakeFiles/_C.dir/b.cu.o")
        deadline = time.monotonic() + 120
        while len(watch.read) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
    assert len(watch.read) == 2 and watch.refusal is None, watch.unread
    assert (watched.cubins_read, watched.cubins_from_cache) == (2, 0)
    library = tmp_path / "lib.so"
    run([nvcc, "-shared", *objects, "-o", library], cwd=tmp_path, timeout=300, echo=False)
    wheel = CodeCache(cache)
    assert read_library_facts(library, kept=wheel) == read_library_facts(library)
    assert wheel.cubins_from_cache == 2  # the two units' cubins; the link's own is read
