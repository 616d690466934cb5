"""Structured edits: patches that compute their change from the tree they meet.

A line diff breaks when upstream moves or reflows the lines it touches.  A structured edit
instead reads the tree, decides what must change (an arch list without native 12.1, a raw
E2M1 conversion) and returns an :class:`EditPlan`: the new contents of each file.  The engine
turns the plan into a unified diff (:func:`plan_diff`) and applies it through the same
``git apply`` path as a diff patch, so all-or-nothing and revert behave the same for both.
An empty plan is the edit's own already-applied test: the result is already in the tree.

Each kind lives in its own module: the arch lists (:mod:`.arch_lists`), the E2M1 routing
(:mod:`.e2m1_routing`, with the inline asm it reads in :mod:`.inline_asm`), the SM12x family
guards (:mod:`.family_guards`, judging preprocessor conditions with :mod:`.preprocessor`)
and the MoE shuffle bounds guard (:mod:`.shuffle_guard_edit`).  Diff patches whose change
upstream may have adopted in its own words name a semantic *applied check* instead
(:mod:`.shuffle_guard_check`).
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


def _edit_kinds() -> dict[str, EditFactory]:
    from sparkbuild.patches.edits import arch_lists, e2m1_routing, family_guards, shuffle_guard_edit

    return {
        arch_lists.KIND: arch_lists.from_params,
        e2m1_routing.KIND: e2m1_routing.from_params,
        family_guards.KIND: family_guards.from_params,
        shuffle_guard_edit.KIND: shuffle_guard_edit.from_params,
    }


def _applied_checks() -> dict[str, AppliedCheck]:
    from sparkbuild.patches.edits import shuffle_guard_check

    return {shuffle_guard_check.CHECK_NAME: shuffle_guard_check.guard_present}


def make_edit(kind: str, params: Mapping[str, object], *, base: Path, origin: str,
              context: EditContext | None = None) -> Edit:
    """The edit of ``kind`` configured by ``params``; ``base`` resolves relative file names;
    ``context``: the recipe's target (the Spark's 12.1a when None)."""
    kinds = _edit_kinds()
    if kind not in kinds:
        raise RecipeError(
            f"unknown structured edit kind {kind!r}",
            where=origin,
            hint=f"known kinds: {', '.join(sorted(kinds))}",
        )
    return kinds[kind](params, base, origin, context or EditContext())


def applied_check_names() -> list[str]:
    return sorted(_applied_checks())


def applied_check(name: str) -> AppliedCheck:
    return _applied_checks()[name]
