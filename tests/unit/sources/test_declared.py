"""What a fetched tree requires of the recipe's pins, and where it says so (relative); a
tree that declares nothing readable gives nothing, and only ``lock``, which needs them,
refuses it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import RecipeError
from sparkbuild.recipe import load_recipe
from sparkbuild.sources.declared import declared_requirements, find_declared, pinned_requirements
from sparkbuild.wheelhouse.closure import declared_texts
from sparkbuild.wheelhouse.lock import refuse_contradicted_pins

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


def _recipe(tmp_path: Path) -> Path:
    (tmp_path / "series").write_text("# empty\n")
    recipe = tmp_path / "r.toml"
    recipe.write_text('[recipe]\nname = "r"\n[source]\nspec = "."\n[series]\npath = "series"\n'
                      '[[pins]]\nname = "six"\nversion = "1.16.0"\nsha256 = "' + "a" * 64 + '"\n')
    return recipe


@pytest.mark.parametrize("pyproject", [None, '[project]\nname = "x"\ndynamic = ["dependencies"]\n'])
def test_a_tree_that_declares_nothing_readable_gives_nothing(tmp_path: Path,
                                                            pyproject: str | None) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    if pyproject is not None:
        (tree / "pyproject.toml").write_text(pyproject)
    assert find_declared(tree) is None
    assert pinned_requirements(tree, "c" * 40, ["six"]) is None
    assert declared_texts(tree) == []
    refuse_contradicted_pins(load_recipe(_recipe(tmp_path)), tree, None)  # nothing to contradict
    with pytest.raises(RecipeError, match="dynamic" if pyproject else "lists no runtime"):
        declared_requirements(tree)


def test_a_requirement_file_that_is_there_but_broken_is_named(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "requirements.txt").write_text("six>=1\nnot a requirement!\n")
    with pytest.raises(RecipeError, match="not a requirement") as raised:
        find_declared(tree)
    assert raised.value.where == f"{tree / 'requirements.txt'}:2"


def test_what_the_tree_declares_is_found(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "requirements.txt").write_text("six>=1\ntorch==2.11.0\n")
    found = find_declared(tree, not_in_wheel=["torch"])
    assert found is not None and [line.text for line in found] == ["six>=1"]
    assert declared_texts(tree, ["torch"]) == ["six>=1"]
