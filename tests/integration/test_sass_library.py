"""A library's SASS read one ELF per worker process gives the facts the one-piece read gives.

The library is compiled here with nvcc (no GPU): three objects, one of them with two ELFs
(family code ``sm_120f`` beside ``sm_121a``) and a kernel that only traps, linked into one
.so.  An extracted cubin names ``sm_120f`` as ``sm_120``; the facts must still say
``sm_120f``, in the library's order, and flag the trap-only kernel in both ELFs.  Read
twice through ``wheel``'s machine code cache, the second read is a hit with the same facts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.proc import run
from sparkbuild.store.cache import Cache
from sparkbuild.toolchain import sass
from sparkbuild.toolchain.kept_sass import CodeCache
from sparkbuild.toolchain.sass_library import read_library_facts
from sparkbuild.toolchain.tools import find_nvcc
from sparkbuild.wheelhouse.verify import gpu_libraries
from support.wheels import demo_wheel

pytestmark = pytest.mark.nvcc

SOURCES = {
    "scale.cu": ("__global__ void scale_k(float* x) { x[threadIdx.x] *= 2.0f; }\n",
                 ["arch=compute_121a,code=sm_121a"]),
    "guard.cu": ("__global__ void add_k(float* x) { x[threadIdx.x] += 1.0f; }\n"
                 '__global__ void trap_k(float*) { asm volatile("trap;"); }\n',
                 ["arch=compute_120f,code=sm_120f", "arch=compute_121a,code=sm_121a"]),
    "copy.cu": ("__global__ void copy_k(float* x, const float* y) { x[threadIdx.x] = y[0]; }\n",
                ["arch=compute_121a,code=sm_121a"]),
}


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sass-library")
    nvcc = str(find_nvcc().path)
    objects = []
    for name, (text, gencodes) in SOURCES.items():
        (root / name).write_text(text, encoding="utf-8")
        objects.append(root / f"{name}.o")
        run([nvcc, "-Xcompiler", "-fPIC", "-c", root / name, "-o", objects[-1],
             *[flag for g in gencodes for flag in ("-gencode", g)]],
            cwd=root, timeout=300, echo=False)
    built = root / "libthree.so"
    run([nvcc, "-shared", *objects, "-o", built], cwd=root, timeout=300, echo=False)
    return built


def test_the_parallel_read_gives_the_one_piece_read_s_facts(library: Path) -> None:
    one_piece = [f.facts() for f in sass.read_sass(library)]
    parallel = read_library_facts(library, jobs=3)
    assert parallel == one_piece
    archs = {(f.name, f.arch) for f in parallel}
    assert ("_Z6trap_kPf", "sm_120f") in archs and ("_Z6trap_kPf", "sm_121a") in archs
    assert {f.name for f in parallel if f.is_trap_only} == {"_Z6trap_kPf"}
    assert sass.summarize(parallel, "sm_121a") == sass.summarize(sass.read_sass(library),
                                                                   "sm_121a")


def test_the_cached_read_gives_the_fresh_read_s_facts(library: Path, tmp_path: Path) -> None:
    """``wheel``'s path through the machine code cache (the real tools' identity): the second
    read of the same bytes is a hit, and judges the library as the fresh read does."""
    wheel = demo_wheel(tmp_path, {"demo/libthree.so": library.read_bytes()})
    targets = ("12.1a", "12.0f")
    fresh, _ = gpu_libraries([wheel], targets)
    first, second = CodeCache(Cache(tmp_path / "cache")), CodeCache(Cache(tmp_path / "cache"))
    assert gpu_libraries([wheel], targets, kept_code=first)[0] == fresh
    cubins = first.cubins_read  # one per ELF of the library
    assert cubins >= 4
    assert first.reads().to_dict() == {"libraries": 1, "read": 1, "from_cache": 0,
                                       "cubins_read": cubins, "cubins_from_cache": 0}
    assert gpu_libraries([wheel], targets, kept_code=second)[0] == fresh
    assert second.reads().to_dict() == {"libraries": 1, "read": 0, "from_cache": 1,
                                        "cubins_read": 0, "cubins_from_cache": 0}
    (lib,) = fresh
    assert lib.trap_only_kernels == ("_Z6trap_kPf",) and set(lib.sass_archs) == {
        "sm_120f", "sm_121a"}


def test_a_library_with_one_unit_changed_disassembles_that_cubin_only(
        library: Path, tmp_path: Path) -> None:
    """A warm rebuild's library: other bytes (a library-level miss), one changed unit.  Its
    cubins whose bytes were read before come from the cache, the changed one is read, and
    the facts are the fresh read's."""
    cache = Cache(tmp_path / "cache")
    cold = CodeCache(cache)
    read_library_facts(library, kept=cold)
    assert cold.cubins_from_cache == 0
    root = library.parent
    (root / "copy2.cu").write_text(SOURCES["copy.cu"][0].replace("y[0]", "y[1]"),
                                   encoding="utf-8")
    nvcc = str(find_nvcc().path)
    run([nvcc, "-Xcompiler", "-fPIC", "-c", root / "copy2.cu", "-o", root / "copy2.cu.o",
         "-gencode", SOURCES["copy.cu"][1][0]], cwd=root, timeout=300, echo=False)
    changed = tmp_path / "libchanged.so"
    run([nvcc, "-shared", root / "scale.cu.o", root / "guard.cu.o", root / "copy2.cu.o",
         "-o", changed], cwd=root, timeout=300, echo=False)
    warm = CodeCache(cache)
    assert read_library_facts(changed, kept=warm) == read_library_facts(changed)
    assert (warm.cubins_read, warm.cubins_from_cache) == (1, cold.cubins_read - 1)
