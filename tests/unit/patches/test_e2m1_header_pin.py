"""The e2m1-routing edit pins the header it copies into a tree: a changed header is refused."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import HashMismatchError, RecipeError
from sparkbuild.patches.edits import EditContext
from sparkbuild.patches.edits.e2m1_routing import E2m1RoutingEdit, from_params

if TYPE_CHECKING:
    from pathlib import Path

UTILS = """#pragma once
#include "e2m1.cuh"
namespace vllm {
inline __device__ uint32_t convert(float (&v)[8]) { return sparkbuild::fp32x8_to_e2m1(v); }
}
"""


def _edit(tmp_path: Path, header: bytes, pinned: str) -> E2m1RoutingEdit:
    (tmp_path / "e2m1.cuh").write_bytes(header)
    params = {"kind": "e2m1-routing", "header": "e2m1.cuh", "header_sha256": pinned}
    return from_params(params, tmp_path, "e2m1.toml", EditContext())


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "csrc").mkdir(parents=True)
    (tree / "csrc" / "nvfp4_utils.cuh").write_text(UTILS, encoding="utf-8")
    return tree


def test_the_pinned_header_is_copied(tmp_path: Path) -> None:
    header = b"#pragma once\nnamespace sparkbuild {}\n"
    edit = _edit(tmp_path, header, hashlib.sha256(header).hexdigest())
    plan = edit.plan(_tree(tmp_path))
    copied = [c for c in plan.changes if c.path.endswith("e2m1.cuh")]
    assert [c.new for c in copied] == [header.decode()]


def test_a_changed_header_is_refused_before_the_tree_is_touched(tmp_path: Path) -> None:
    pinned = hashlib.sha256(b"the reviewed header\n").hexdigest()
    edit = _edit(tmp_path, b"#pragma once\n// changed after review\n", pinned)
    tree = _tree(tmp_path)
    with pytest.raises(HashMismatchError, match="differs from the header the series pins"):
        edit.plan(tree)
    assert (tree / "csrc" / "nvfp4_utils.cuh").read_text(encoding="utf-8") == UTILS


def test_the_pin_must_be_a_sha256(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="header_sha256 must be 64 hexadecimal digits"):
        _edit(tmp_path, b"x", "not-a-digest")
