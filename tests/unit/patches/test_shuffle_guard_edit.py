"""The shuffle-rows-guard edit on small kernel texts: inject, recognise, refuse."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkbuild.errors import PatchError
from sparkbuild.patches.edits import make_edit
from sparkbuild.patches.edits.shuffle_guard_check import guard_in_text
from sparkbuild.patches.edits.shuffle_guard_edit import guard_text

SIGNATURE = """\
template <typename E>
__global__ void shuffleInputRowsKernel(const E* in, const int32_t* row_map,
                                       E* out, int64_t n_in, int64_t n_out,
                                       int64_t width) {
"""

# Our own words for the unguarded shape: the map is read before the block is checked.
UNGUARDED = "#include <cstdint>\n\n" + SIGNATURE + """\
  const int64_t row = blockIdx.x;
  const int64_t from = row_map[row];
  if (row < n_out) {
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
      out[row * width + c] = in[from * width + c];
    }
  }
}
"""

# Upstream's later form (vllm 0.33.0): read inside the bound, zero row for a bad source.
UPSTREAM_GUARDED = SIGNATURE + """\
  int64_t row = blockIdx.x;
  if (blockIdx.x < n_out) {
    int64_t const from = row_map[row];
    E const zero{};
    if (from < 0 || from >= n_in) {
      for (int64_t c = threadIdx.x; c < width; c += blockDim.x) out[row * width + c] = zero;
      return;
    }
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
      out[row * width + c] = in[from * width + c];
    }
  }
}
"""


def test_unguarded_kernel_gets_both_block_uniform_guards() -> None:
    guarded, lines = guard_text(UNGUARDED, "k.cu")
    assert lines == [4]
    assert not guard_in_text(UNGUARDED) and guard_in_text(guarded)
    body = guarded[guarded.index("width) {") + len("width) {"):]
    statements = [line.strip() for line in body.splitlines() if line.strip()]
    assert statements[1] == "if (blockIdx.x >= n_out) return;"
    read_at = statements.index("const int64_t from = row_map[row];")
    assert statements[read_at + 2 : read_at + 8] == [
        "if (from < 0 || from >= n_in) {",
        "for (int64_t col = threadIdx.x; col < width; col += blockDim.x) {",
        "out[static_cast<int64_t>(blockIdx.x) * width + col] = E{};",
        "}",
        "return;",
        "}",
    ]
    assert statements[0].startswith("//") and statements[read_at + 1].startswith("//")
    assert guarded.count("{") == guarded.count("}")
    head = UNGUARDED[: UNGUARDED.index("width) {") + len("width) {")]
    assert guarded.startswith(head)  # nothing before the body changed


def test_the_guarded_text_is_left_alone() -> None:
    guarded, _ = guard_text(UNGUARDED, "k.cu")
    assert guard_text(guarded, "k.cu") == (guarded, [])


def test_upstream_guard_is_not_touched() -> None:
    assert guard_in_text(UPSTREAM_GUARDED)
    assert guard_text(UPSTREAM_GUARDED, "k.cu") == (UPSTREAM_GUARDED, [])


def test_every_definition_is_guarded_and_launches_are_ignored() -> None:
    launch = "void go() { shuffleInputRowsKernel<float><<<1, 32>>>(0, 0, 0, 1, 1, 1); }\n"
    text = UNGUARDED + launch + UNGUARDED.replace("#include <cstdint>\n\n", "")
    guarded, lines = guard_text(text, "k.cu")
    assert len(lines) == 2
    assert guarded.count("if (blockIdx.x >= n_out) return;") == 2
    assert launch in guarded


@pytest.mark.parametrize(
    ("mutation", "message", "line"),
    [
        # a thread-dependent map index: an early return there would split the block
        (("row_map[row]", "row_map[row + threadIdx.x]"), "other than its block", 8),
        (("const int64_t from = row_map[row];\n  if (row < n_out) {",
          "if (row < n_out) {\n    const int64_t from = row_map[row];"), "top of its body", 9),
        (("  const int64_t from = row_map[row];\n", "  row_map[row];\n"),
         "into a variable", 8),
        (("in[from * width + c]", "in[row_map[row] * width + c]"), "2 times", 11),
        (("int64_t width)", "int64_t width, int flags)"), "does not take", 4),
        (("template <typename E>", "template <int N>"), "element type", 4),
    ],
)
def test_unrecognisable_shapes_are_refused_with_file_and_line(
    mutation: tuple[str, str], message: str, line: int
) -> None:
    old, new = mutation
    assert old in UNGUARDED
    with pytest.raises(PatchError, match=message) as caught:
        guard_text(UNGUARDED.replace(old, new), "csrc/moe/k.cu")
    assert caught.value.where == f"csrc/moe/k.cu:{line}"


def test_the_edit_plans_over_the_tree(tmp_path: Path) -> None:
    edit = make_edit("shuffle-rows-guard", {"search": "csrc"}, base=tmp_path, origin="t.toml")
    with pytest.raises(PatchError, match="no definition"):
        edit.plan(tmp_path)
    kernel = tmp_path / "csrc" / "moe" / "k.cu"
    kernel.parent.mkdir(parents=True)
    kernel.write_text(UNGUARDED)
    (plan_change,) = edit.plan(tmp_path).changes
    assert plan_change.path == "csrc/moe/k.cu" and plan_change.old == UNGUARDED
    kernel.write_text(plan_change.new)
    plan = edit.plan(tmp_path)
    assert plan.changes == () and re.search("already bounds both indices", plan.notes[0])
