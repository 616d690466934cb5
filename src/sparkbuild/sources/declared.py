"""What a source tree declares it needs at run time, read without building it.

vLLM lists its runtime requirements in ``requirements/cuda.txt`` (which includes
``common.txt``); other trees in ``requirements.txt`` or ``pyproject.toml``.  When the
recipe's own git source is fetched, the tree's requirements on each pinned project are
recorded in the recipe's lock file (``NAME.lock.json``): a branch such as PR #53896 moves,
and what it asked for at the locked commit is what a pin must agree with (or override).
"""

from __future__ import annotations

import contextlib
import os
import tomllib
from typing import TYPE_CHECKING

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sparkbuild.console import info
from sparkbuild.errors import RecipeError
from sparkbuild.recipe import TreeRequirements
from sparkbuild.sources.requirements import RequirementLine, parse_requirement, read_requirements
from sparkbuild.store.user_files import parse_toml

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from sparkbuild.recipe import Recipe

REQUIREMENT_FILES = ("requirements/cuda.txt", "requirements.txt")
"""Where a tree lists its runtime requirements: vLLM's CUDA set, then the usual file."""


def _pyproject_dependencies(path: Path) -> list[RequirementLine] | None:
    """The ``[project] dependencies`` of ``path``; None when they are dynamic (nothing can
    read them without building)."""
    try:
        project = parse_toml(path.read_text(encoding="utf-8")).get("project", {})
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"pyproject.toml is not valid TOML: {exc}", where=str(path)) from exc
    if "dependencies" in project.get("dynamic", []):
        return None
    lines = []
    for text in project.get("dependencies", []):
        parse_requirement(str(text), str(path))
        lines.append(RequirementLine(str(text), f"{path}"))
    return lines


def find_declared(tree: Path, not_in_wheel: Iterable[str] = ()
                  ) -> list[RequirementLine] | None:
    """The runtime requirements a source tree declares, each with its ``FILE:LINE``; those
    on a project of ``not_in_wheel`` (the recipe's ``[source] not_in_wheel``: what the
    tree's build leaves out of its wheel) left out.  None when the tree declares none that
    can be read without building: no requirement file, or a ``pyproject.toml`` whose
    dependencies are dynamic (then the built wheel's metadata decides).  A file that is
    there but cannot be read or parsed is its :class:`RecipeError`."""
    dropped = {canonicalize_name(name) for name in not_in_wheel}
    lines: list[RequirementLine] | None = None
    for relative in REQUIREMENT_FILES:
        if (tree / relative).is_file():
            lines = read_requirements(tree / relative)
            break
    else:
        if (tree / "pyproject.toml").is_file():
            lines = _pyproject_dependencies(tree / "pyproject.toml")
    if lines is None:
        return None
    return [line for line in lines if canonicalize_name(Requirement(line.text).name) not in dropped]


def declared_requirements(tree: Path, not_in_wheel: Iterable[str] = ()
                          ) -> list[RequirementLine]:
    """:func:`find_declared` for a command that needs them (``lock``): a tree that declares
    none readable is a :class:`RecipeError` naming why."""
    found = find_declared(tree, not_in_wheel)
    if found is not None:
        return found
    if (tree / "pyproject.toml").is_file():
        raise RecipeError("the tree's dependencies are dynamic; sparkbuild cannot read them "
                          "without building", where=str(tree / "pyproject.toml"),
                          hint="give the tree a requirements.txt")
    raise RecipeError(
        "the source tree lists no runtime requirements",
        where=str(tree),
        hint=f"expected one of {', '.join(REQUIREMENT_FILES)} or pyproject.toml",
    )


def relative_where(line: RequirementLine, tree: Path) -> str:
    """``requirements/cuda.txt:13`` rather than the absolute path of a scratch tree."""
    file, sep, number = line.where.rpartition(":")
    if not sep or not number.isdigit():
        file, sep, number = line.where, "", ""
    with contextlib.suppress(ValueError):
        file = os.path.relpath(file, tree)
    return f"{file}{sep}{number}"


def pinned_requirements(tree: Path, commit: str, names: list[str]) -> TreeRequirements | None:
    """The tree's own requirement lines on each of ``names`` (None: it lists none at all)."""
    declared = find_declared(tree)
    if declared is None:
        return None
    wanted: dict[str, list[str]] = {canonicalize_name(name): [] for name in names}
    origins: set[str] = set()
    for line in declared:
        key = canonicalize_name(Requirement(line.text).name)
        if key in wanted:
            wanted[key].append(line.text)
            where = relative_where(line, tree)
            file, sep, number = where.rpartition(":")
            origins.add(file if sep and number.isdigit() else where)
    origin = ", ".join(sorted(origins)) or next(
        (f for f in (*REQUIREMENT_FILES, "pyproject.toml") if (tree / f).is_file()), "")
    return TreeRequirements(commit, origin, {k: tuple(v) for k, v in wanted.items()})


def record_pinned_requirements(recipe: Recipe, tree: Path, commit: str) -> None:
    """Write what the fetched tree requires of each pinned project into the recipe's lock."""
    if not recipe.pins:
        return
    found = pinned_requirements(tree, commit, [pin.name for pin in recipe.pins])
    if found is None:
        return
    recipe.record_tree_requirements(found)
    for pin in recipe.pins:
        lines = found.requirements.get(pin.key) or (f"no {pin.name}",)
        info(f"the tree at {commit[:12]} asks for {'; '.join(lines)}; the recipe pins "
             f"{pin.requirement} (recorded in {recipe.lock_path.name})")
