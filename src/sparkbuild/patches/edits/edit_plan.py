"""What every structured edit shares: the plan it returns, the context it may know, its
checked parameters, and the plan as a unified diff.

An edit reads the tree and returns an :class:`EditPlan` (the new contents of each file); the
engine turns it into a diff with :func:`plan_diff` and applies it through ``git apply``.
The kinds themselves, and the registry that names them, are in :mod:`sparkbuild.patches.edits`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sparkbuild.errors import RecipeError, ToolchainError
from sparkbuild.recipe import SPARK_ARCH

if TYPE_CHECKING:
    from sparkbuild.recipe import Recipe

SKIP_DIRS = frozenset({".git", ".sparkbuild", "node_modules", "__pycache__"})
"""Directories no scan of a tree's sources enters (an edit's or the series report's)."""
C_SUFFIXES = frozenset({".cu", ".cuh", ".h", ".hh", ".hpp", ".c", ".cc", ".cpp", ".cxx", ".inl"})
"""The C, C++ and CUDA sources those scans read."""


@dataclass(frozen=True)
class FileChange:
    path: str
    """Relative to the tree, POSIX form."""
    old: str | None
    """The current text; None when the edit creates the file."""
    new: str


@dataclass(frozen=True)
class EditPlan:
    changes: tuple[FileChange, ...]
    notes: tuple[str, ...]
    """What the edit changes, or why it has nothing to change: the outcome's detail."""
    details: dict[str, Any] = field(default_factory=dict)
    """Structured findings for ``patch status --json`` (the outcome's ``details``)."""


@dataclass(frozen=True)
class EditContext:
    """What an edit may know beside the tree: the recipe's target and the toolchain."""

    targets: tuple[str, ...] = (SPARK_ARCH,)
    """The recipe's ``cuda_archs`` (TORCH_CUDA_ARCH_LIST)."""
    cuda_version: str | None = None
    """The CUDA release to judge for (``13.0``); None: the nvcc a build would use, if any."""

    @classmethod
    def for_recipe(cls, recipe: Recipe) -> EditContext:
        return cls(targets=recipe.target.cuda_archs)

    def toolchain_cuda(self) -> str | None:
        if self.cuda_version is not None:
            return self.cuda_version
        from sparkbuild.toolchain.tools import find_nvcc

        try:
            version = find_nvcc().version
        except ToolchainError:
            return None
        return f"{version.major}.{version.minor}" if version is not None else None


class Edit(Protocol):
    def plan(self, tree: Path) -> EditPlan:
        """The changes this edit makes to ``tree``; empty when they are already there.

        Raises PatchError when the tree does not have what the edit needs.
        """


EditFactory = Callable[[Mapping[str, object], Path, str, EditContext], Edit]
AppliedCheck = Callable[[Path], "str | None"]
"""Returns a sentence saying where the change already is, or None when it is not."""


def _split_lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def file_diff_text(change: FileChange) -> str:
    """One file's change as a git-style unified diff (three lines of context)."""
    old_lines = _split_lines(change.old) if change.old is not None else []
    body = list(
        difflib.unified_diff(
            old_lines,
            _split_lines(change.new),
            fromfile="/dev/null" if change.old is None else f"a/{change.path}",
            tofile=f"b/{change.path}",
            n=3,
        )
    )
    header = f"diff --git a/{change.path} b/{change.path}\n"
    if change.old is None:
        header += "new file mode 100644\n"
    return header + "".join(body)


def plan_diff(plan: EditPlan) -> str:
    return "".join(file_diff_text(change) for change in plan.changes if change.old != change.new)


class Params:
    """Checked access to an edit's TOML parameters: unknown keys and wrong types are errors."""

    def __init__(self, params: Mapping[str, object], origin: str, known: set[str]) -> None:
        self.params = params
        self.origin = origin
        unknown = sorted(set(params) - known - {"kind", "description"})
        if unknown:
            raise RecipeError(
                f"unknown parameter(s) {', '.join(unknown)}",
                where=origin,
                hint=f"this edit kind takes: {', '.join(sorted(known))}",
            )

    def string(self, key: str, default: str | None = None) -> str:
        value = self.params.get(key, default)
        if not isinstance(value, str) or not value:
            raise RecipeError(f"parameter {key} must be a non-empty string", where=self.origin)
        return value
