"""A packaging step that failed half-way leaves ``build/bdist.*``: the next build clears it,
and nothing else of the tree's ``build/`` (the warm rebuild's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkbuild.compile.tree_build import clear_packaging_scratch

if TYPE_CHECKING:
    from pathlib import Path


def test_only_the_backend_s_packaging_scratch_goes(tmp_path: Path) -> None:
    left = tmp_path / "build" / "bdist.linux-aarch64" / "wheel" / "demo-1.0.dist-info"
    left.mkdir(parents=True)
    (left / "METADATA").write_text("half written")
    (tmp_path / "build" / "bdist.stray").write_text("a file of that name")
    kept = tmp_path / "build" / "temp.linux-aarch64-cpython-312" / "build.ninja"
    kept.parent.mkdir(parents=True)
    kept.write_text("rule cc\n")
    (tmp_path / "build" / "lib.linux-aarch64-cpython-312").mkdir()
    assert clear_packaging_scratch(tmp_path) == ["build/bdist.linux-aarch64", "build/bdist.stray"]
    assert sorted(p.name for p in (tmp_path / "build").iterdir()) == [
        "lib.linux-aarch64-cpython-312", "temp.linux-aarch64-cpython-312"]
    assert kept.read_text() == "rule cc\n"
    assert clear_packaging_scratch(tmp_path) == []


def test_a_link_named_like_the_scratch_is_removed_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    tree = tmp_path / "tree"
    (tree / "build").mkdir(parents=True)
    (tree / "build" / "bdist.linux-x86_64").symlink_to(outside, target_is_directory=True)
    assert clear_packaging_scratch(tree) == ["build/bdist.linux-x86_64"]
    assert (outside / "keep.txt").read_text() == "keep"
