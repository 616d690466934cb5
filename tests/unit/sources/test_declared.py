"""What a fetched tree requires of the recipe's pins, and where it says so (relative)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkbuild.sources.declared import pinned_requirements

if TYPE_CHECKING:
    from pathlib import Path


def test_the_origin_is_the_trees_relative_file_name(tmp_path: Path) -> None:
    tree = tmp_path / "scratch" / "tree"
    tree.mkdir(parents=True)
    (tree / "pyproject.toml").write_text(
        '[project]\nname = "x"\nversion = "1"\ndependencies = ["flashinfer-python==0.6.18"]\n')
    found = pinned_requirements(tree, "c" * 40, ["flashinfer-python"])
    assert found is not None
    assert found.origin == "pyproject.toml"
    (tree / "requirements").mkdir()
    (tree / "requirements" / "cuda.txt").write_text("torch==2.11.0\nflashinfer-python==0.6.18\n")
    found = pinned_requirements(tree, "c" * 40, ["flashinfer-python"])
    assert found is not None
    assert str(tmp_path) not in found.origin
    assert "requirements/cuda.txt" in found.origin
