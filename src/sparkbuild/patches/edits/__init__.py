"""Structured edits: patches that compute their change from the tree they meet.

A line diff breaks when upstream moves or reflows the lines it touches.  A structured edit
instead reads the tree, decides what must change (an arch list without native 12.1, a raw
E2M1 conversion) and returns an :class:`EditPlan`: the new contents of each file.  The engine
turns the plan into a unified diff (:func:`plan_diff`) and applies it through the same
``git apply`` path as a diff patch, so all-or-nothing and revert behave the same for both.
An empty plan is the edit's own already-applied test: the result is already in the tree.

What every edit shares -- the plan, its context, its checked parameters, the plan as a diff
-- is in :mod:`.edit_plan`.  Each kind lives in its own module, which declares its name
(``KIND``) and its factory (``from_params``): the arch lists (:mod:`.arch_lists`), the E2M1
routing (:mod:`.e2m1_routing`, with the inline asm it reads in :mod:`.inline_asm`), the SM12x
family guards (:mod:`.family_guards`, judging preprocessor conditions with
:mod:`.preprocessor`) and the MoE shuffle bounds guard (:mod:`.shuffle_guard_edit`).  Diff
patches whose change upstream may have adopted in its own words name a semantic *applied
check* instead (:mod:`.shuffle_guard_check`, which declares ``CHECK_NAME``).

The registry is here, one entry per kind: :data:`EDIT_KINDS` (a series file's ``kind`` ->
the kind's factory, what :func:`make_edit` builds from) and :data:`APPLIED_CHECKS` (an
``applied-check`` name -> its test, :func:`applied_check`).  A new kind is a module and one
line in :data:`EDIT_KINDS`.
"""


from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from sparkbuild.errors import RecipeError
from sparkbuild.patches.edits import (
    arch_lists,
    e2m1_routing,
    family_guards,
    shuffle_guard_check,
    shuffle_guard_edit,
)
from sparkbuild.patches.edits.edit_plan import (
    AppliedCheck,
    Edit,
    EditContext,
    EditFactory,
    EditPlan,
    FileChange,
    Params,
    file_diff_text,
    plan_diff,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = ["APPLIED_CHECKS", "EDIT_KINDS", "AppliedCheck", "Edit", "EditContext",
           "EditFactory", "EditPlan", "FileChange", "Params", "applied_check",
           "applied_check_names", "file_diff_text", "make_edit", "plan_diff"]

EDIT_KINDS: Mapping[str, EditFactory] = MappingProxyType({
    arch_lists.KIND: arch_lists.from_params,
    e2m1_routing.KIND: e2m1_routing.from_params,
    family_guards.KIND: family_guards.from_params,
    shuffle_guard_edit.KIND: shuffle_guard_edit.from_params,
})
"""Every structured edit kind, by the ``kind`` a series file names."""

APPLIED_CHECKS: Mapping[str, AppliedCheck] = MappingProxyType({
    shuffle_guard_check.CHECK_NAME: shuffle_guard_check.guard_present,
})
"""Every applied check, by the name a diff patch's preamble gives it."""


def make_edit(kind: str, params: Mapping[str, object], *, base: Path, origin: str,
              context: EditContext | None = None) -> Edit:
    """The edit of ``kind`` configured by ``params``; ``base`` resolves relative file names;
    ``context``: the recipe's target (the Spark's 12.1a when None)."""
    if kind not in EDIT_KINDS:
        raise RecipeError(
            f"unknown structured edit kind {kind!r}",
            where=origin,
            hint=f"known kinds: {', '.join(sorted(EDIT_KINDS))}",
        )
    return EDIT_KINDS[kind](params, base, origin, context or EditContext())


def applied_check_names() -> list[str]:
    return sorted(APPLIED_CHECKS)


def applied_check(name: str) -> AppliedCheck:
    return APPLIED_CHECKS[name]
