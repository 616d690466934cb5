"""sm12x-family-guards, proved in the machine code on a generated tree.

The tree's guard has the shape later vLLM releases use (the SM120 body, else printf and a
trap).  Built for sm_121a before the series, the kernel is trap-only; after the series it
has its body: a global store and no trap.  The same unit for sm_120a is real both times.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus.builders import write_series
from sparkbuild.patches.engine import apply_series
from sparkbuild.patches.report import APPLIED
from sparkbuild.proc import run
from sparkbuild.toolchain.sass import read_sass, summarize
from sparkbuild.toolchain.tools import find_nvcc

pytestmark = pytest.mark.nvcc

GUARD = """\
#pragma once
#include <cstdio>

template <typename Kernel>
struct only_sm120 : Kernel {
  template <typename... Args>
  __device__ void operator()(Args&&... args) {
#if defined __CUDA_ARCH__
  #if __CUDA_ARCH__ == 1200
    Kernel::operator()(args...);
  #else
    printf("This kernel only supports sm120.\\n");
    asm("trap;");
  #endif
#endif
  }
};
"""
UNIT = """\
#include "guards.cuh"

struct Store {
  __device__ void operator()(int* out) { out[threadIdx.x] = 1210; }
};

__global__ void guarded_store(int* out) { only_sm120<Store>{}(out); }
"""
EDIT = 'kind = "sm12x-family-guards"\nsearch = "csrc"\n'


def _compile(tree: Path, arch: str, out: Path) -> dict[str, object]:
    obj = out / f"unit.{arch}.o"
    run([str(find_nvcc().path), "-std=c++17", "-c", "-gencode",
         f"arch=compute_{arch.removeprefix('sm_')},code={arch}", f"-I{tree / 'csrc'}",
         "-o", str(obj), str(tree / "csrc" / "unit.cu")], timeout=300)
    functions = read_sass(obj)
    summary = summarize(functions, arch).to_dict()
    summary["stores"] = sum(f.opcode_counts()["STG"] for f in functions if f.arch == arch)
    return summary


def test_trap_only_before_real_after(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "csrc").mkdir(parents=True)
    (tree / "csrc" / "guards.cuh").write_text(GUARD)
    (tree / "csrc" / "unit.cu").write_text(UNIT)
    before = _compile(tree, "sm_121a", tmp_path)
    assert before["trap_only_kernels"] == ["_Z13guarded_storePi"] and before["stores"] == 0
    assert _compile(tree, "sm_120a", tmp_path)["stores"] == 1

    report = apply_series(tree, write_series(tmp_path / "patches", {"guards.toml": EDIT}))
    (outcome,) = report.patches
    assert outcome.status == APPLIED, outcome.detail
    assert outcome.details["widened"][0]["line"] == 9
    after = _compile(tree, "sm_121a", tmp_path)
    assert after["trap_only_kernels"] == [] and after["stores"] == 1
    assert _compile(tree, "sm_120a", tmp_path)["stores"] == 1
