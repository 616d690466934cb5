"""Structured edits go through the same git-apply path: apply, re-apply, revert, roll back.

The trees are generated here: a header with E2M1 inline asm at the newer
``csrc/libtorch_stable/...`` place, and a CMakeLists.txt whose arch lists are evaluated by a
deliberately small ``cuda_archs_loose_intersection`` written for this test (nearest lower
arch of the same major, later entries winning), through the real ``cmake -P`` path.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from corpus.builders import tree_digest, write_series
from sparkbuild.patches.engine import apply_series, revert_series
from sparkbuild.patches.report import ALREADY, APPLIED, FAILED, NOT_APPLIED
from sparkbuild.recipe import REPO_ROOT
from sparkbuild.toolchain.arch_eval import evaluate
from sparkbuild.toolchain.archs import find_arch_lists, is_native

HEADER = REPO_ROOT / "csrc" / "e2m1.cuh"

NVFP4 = """\
#pragma once
#include <cuda_runtime.h>

namespace vllm {
inline __device__ uint32_t fp32_vec8_to_e2m1(float (&array)[8]) {
  uint32_t val;
  asm volatile(
      "{\\n"
      ".reg .b8 byte0, byte1, byte2, byte3;\\n"
      "cvt.rn.satfinite.e2m1x2.f32   byte0, %2, %1;\\n"
      "cvt.rn.satfinite.e2m1x2.f32   byte1, %4, %3;\\n"
      "cvt.rn.satfinite.e2m1x2.f32   byte2, %6, %5;\\n"
      "cvt.rn.satfinite.e2m1x2.f32   byte3, %8, %7;\\n"
      "mov.b32 %0, {byte0, byte1, byte2, byte3};\\n"
      "}"
      : "=r"(val)
      : "f"(array[0]), "f"(array[1]), "f"(array[2]), "f"(array[3]),
        "f"(array[4]), "f"(array[5]), "f"(array[6]), "f"(array[7]));
  return val;
}
}  // namespace vllm
"""

SMALL_UTILS = """\
function(cuda_archs_loose_intersection OUT SRC TGT)
  set(_out)
  foreach(_t ${TGT})
    string(REGEX REPLACE "\\\\..*$" "" _tmajor "${_t}")
    set(_best)
    foreach(_s ${SRC})
      string(REGEX REPLACE "[af]$" "" _base "${_s}")
      string(REGEX REPLACE "\\\\..*$" "" _smajor "${_base}")
      if(_smajor STREQUAL _tmajor AND _base VERSION_LESS_EQUAL _t)
        set(_best "${_s}")
      endif()
    endforeach()
    if(_best)
      list(APPEND _out "${_best}")
    endif()
  endforeach()
  set(${OUT} ${_out} PARENT_SCOPE)
endfunction()
"""

CMAKELISTS = """\
if(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8)
  set(CUDA_SUPPORTED_ARCHS "8.0;9.0;10.0;12.0")
else()
  set(CUDA_SUPPORTED_ARCHS "8.0;9.0")
endif()
cuda_archs_loose_intersection(SCALED_MM_ARCHS "12.0;12.0a" "${CUDA_ARCHS}")
cuda_archs_loose_intersection(SM90_ONLY_ARCHS "9.0a" "${CUDA_ARCHS}")
cuda_archs_loose_intersection(DONE_ARCHS "12.0a;12.1a" "${CUDA_ARCHS}")
"""


EDITS = {
    "archs.toml": 'kind = "cuda-arch-lists"\nfile = "CMakeLists.txt"\ntarget = "12.1"\n',
    "e2m1.toml": f'kind = "e2m1-routing"\nfile = "nvfp4_utils.cuh"\nheader = "{HEADER}"\n'
                 f'header_sha256 = "{hashlib.sha256(HEADER.read_bytes()).hexdigest()}"\n',
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    nvfp4 = root / "csrc/libtorch_stable/quantization/fp4/nvfp4_utils.cuh"
    nvfp4.parent.mkdir(parents=True)
    nvfp4.write_text(NVFP4)
    (root / "cmake").mkdir()
    (root / "cmake/utils.cmake").write_text(SMALL_UTILS)
    (root / "CMakeLists.txt").write_text(CMAKELISTS)
    return root


def test_both_edits_apply_reapply_and_revert(tree: Path, tmp_path: Path) -> None:
    recipe = write_series(tmp_path / "patches", EDITS)
    pristine = tree_digest(tree)
    report = apply_series(tree, recipe)
    assert [p.status for p in report.patches] == [APPLIED, APPLIED]
    cmake = (tree / "CMakeLists.txt").read_text()
    assert 'set(CUDA_SUPPORTED_ARCHS "8.0;9.0;10.0;12.0;12.1")' in cmake
    assert '"12.0;12.1;12.0a;12.1a"' in cmake
    assert '"9.0a"' in cmake and '"8.0;9.0")' in cmake and '"12.0a;12.1a"' in cmake
    routed = (tree / "csrc/libtorch_stable/quantization/fp4/nvfp4_utils.cuh").read_text()
    assert "::sparkbuild::cvt_f32x8_to_e2m1x8(array)" in routed
    assert '#include "e2m1.cuh"' in routed and "asm" not in routed
    copy = tree / "csrc/libtorch_stable/quantization/fp4/e2m1.cuh"
    assert copy.read_bytes() == HEADER.read_bytes()
    assert report.raw_instruction_uses == []

    patched = tree_digest(tree)
    again = apply_series(tree, recipe)
    assert [p.status for p in again.patches] == [ALREADY, ALREADY]
    assert tree_digest(tree) == patched

    assert [p.status for p in revert_series(tree, recipe).patches] == [NOT_APPLIED] * 2
    assert tree_digest(tree) == pristine


def test_every_sm12x_list_evaluates_to_native_12_1_after_the_edit(
    tree: Path, tmp_path: Path
) -> None:
    lists = [lst for lst in find_arch_lists(CMAKELISTS) if lst.has_major(12)]
    before = evaluate(tree, [lst.values for lst in lists], ["12.1"])
    assert [is_native(r, "12.1") for r in before] == [False, False, True]
    apply_series(tree, write_series(tmp_path / "patches", {"archs.toml": EDITS["archs.toml"]}))
    edited = [lst for lst in find_arch_lists((tree / "CMakeLists.txt").read_text())
              if lst.has_major(12)]
    after = evaluate(tree, [lst.values for lst in edited], ["12.1"])
    assert after == [["12.1"], ["12.1a"], ["12.1a"]]


def test_a_failing_edit_rolls_back_the_edits_before_it(tree: Path, tmp_path: Path) -> None:
    (tree / "csrc/libtorch_stable/quantization/fp4/nvfp4_utils.cuh").write_text(
        NVFP4.replace("byte0, %2, %1;", "byte0, %1, %2;")
    )
    recipe = write_series(tmp_path / "patches", EDITS)
    before = tree_digest(tree)
    report = apply_series(tree, recipe)
    assert [p.status for p in report.patches] == [NOT_APPLIED, FAILED]
    assert "nibble order" in report.patches[1].detail
    assert report.patches[1].where is not None
    assert report.patches[1].where.endswith("nvfp4_utils.cuh:7")
    assert tree_digest(tree) == before


def test_a_tree_without_sm12x_lists_fails_the_arch_edit(tree: Path, tmp_path: Path) -> None:
    (tree / "CMakeLists.txt").write_text('set(CUDA_SUPPORTED_ARCHS "8.0;9.0")\n')
    report = apply_series(tree, write_series(tmp_path / "p", {"archs.toml": EDITS["archs.toml"]}))
    assert [p.status for p in report.patches] == [FAILED]
    assert "SM12x" in report.patches[0].detail
