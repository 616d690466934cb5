"""The semantic already-applied test of the shuffle-rows guard: semantics, not spelling."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkbuild.patches.edits.shuffle_guard_check import guard_in_text, guard_present
from sparkbuild.patches.edits.shuffle_guard_edit import guard_text

if TYPE_CHECKING:
    from pathlib import Path

HEAD = """\
template <typename T>
__global__ void shuffleInputRowsKernel(const T* input,
                                       const int32_t* dst2src_map, T* output,
                                       int64_t num_src_rows,
                                       int64_t num_dst_rows, int64_t num_cols) {
"""

UNGUARDED = HEAD + """\
  int64_t dest_row_idx = blockIdx.x;
  int64_t const source_row_idx = dst2src_map[dest_row_idx];
  if (blockIdx.x < num_dst_rows) {
    auto const* src = input + source_row_idx * num_cols;
    for (int i = threadIdx.x; i < num_cols; i += blockDim.x) output[i] = src[i];
  }
}
"""

# The map read is bounded, the source row is not: half a guard is no guard.
HALF_GUARDED = HEAD + """\
  int64_t dest_row_idx = blockIdx.x;
  if (blockIdx.x < num_dst_rows) {
    int64_t const source_row_idx = dst2src_map[dest_row_idx];
    auto const* src = input + source_row_idx * num_cols;
    for (int i = threadIdx.x; i < num_cols; i += blockDim.x) output[i] = src[i];
  }
}
"""

# Another spelling of the full guard: early return, one unsigned comparison plus a lower bound.
EARLY_RETURN = HEAD + """\
  int64_t const row = blockIdx.x;
  if (row >= num_dst_rows) return;
  int64_t const src_row = dst2src_map[row];
  T* dst = output + row * num_cols;
  if (src_row < 0 || src_row >= num_src_rows) {
    for (int i = threadIdx.x; i < num_cols; i += blockDim.x) dst[i] = T{};
    return;
  }
  for (int i = threadIdx.x; i < num_cols; i += blockDim.x) dst[i] = input[src_row * num_cols + i];
}
"""

# The guard only in a comment does not count.
COMMENTED = UNGUARDED.replace(
    "  int64_t dest_row_idx = blockIdx.x;\n",
    "  int64_t dest_row_idx = blockIdx.x;\n"
    "  // if (source_row_idx < 0 || source_row_idx >= num_src_rows) { zero{}; }\n",
)


def test_unguarded_and_half_guarded_kernels_are_not_recognised() -> None:
    assert not guard_in_text(UNGUARDED)
    assert not guard_in_text(HALF_GUARDED)
    assert not guard_in_text(COMMENTED)


def test_another_spelling_of_the_guard_is_recognised() -> None:
    assert guard_in_text(EARLY_RETURN)


def test_the_series_own_edit_result_is_recognised() -> None:
    guarded, lines = guard_text(UNGUARDED, "shuffle.cu")
    assert lines == [2]
    assert "if (blockIdx.x >= num_dst_rows) return;" in guarded
    assert guard_in_text(guarded)


def test_guard_is_read_with_the_signature_own_names() -> None:
    renamed = EARLY_RETURN.replace("dst2src_map", "row_map").replace("num_src_rows", "n_in")
    assert guard_in_text(renamed)
    assert not guard_in_text(renamed.replace("src_row >= n_in", "src_row >= num_src_rows"))


def test_guard_present_searches_the_tree(tmp_path: Path) -> None:
    kernel = tmp_path / "csrc" / "moe" / "moved" / "shuffle.cu"
    kernel.parent.mkdir(parents=True)
    kernel.write_text(UNGUARDED)
    assert guard_present(tmp_path) is None
    kernel.write_text(EARLY_RETURN)
    found = guard_present(tmp_path)
    assert found is not None and "csrc/moe/moved/shuffle.cu" in found
