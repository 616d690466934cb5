"""The edit registry: every kind module is named in EDIT_KINDS by its own KIND, every
applied check in APPLIED_CHECKS by its own CHECK_NAME, and nothing else."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

from sparkbuild.errors import RecipeError
from sparkbuild.patches import edits
from sparkbuild.patches.edits import (
    APPLIED_CHECKS,
    EDIT_KINDS,
    applied_check,
    applied_check_names,
    make_edit,
)


def _modules() -> list[object]:
    return [importlib.import_module(f"{edits.__name__}.{info.name}")
            for info in pkgutil.iter_modules(edits.__path__)]


def test_every_kind_module_is_registered_by_its_own_kind() -> None:
    declared = {module.KIND: module.from_params for module in _modules()  # type: ignore[attr-defined]
                if hasattr(module, "KIND")}
    assert dict(EDIT_KINDS) == declared
    assert set(declared) == {"cuda-arch-lists", "e2m1-routing", "sm12x-family-guards",
                             "shuffle-rows-guard"}


def test_every_applied_check_is_registered_by_its_own_name() -> None:
    declared = {module.CHECK_NAME: module.guard_present  # type: ignore[attr-defined]
                for module in _modules() if hasattr(module, "CHECK_NAME")}
    assert dict(APPLIED_CHECKS) == declared
    assert applied_check_names() == sorted(declared)
    assert applied_check("shuffle-rows-bounds-guard") is declared["shuffle-rows-bounds-guard"]


def test_an_unknown_kind_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="unknown structured edit kind 'arch-lists'") as raised:
        make_edit("arch-lists", {}, base=tmp_path, origin="series/x.toml")
    assert "cuda-arch-lists" in (raised.value.hint or "")


def test_the_registry_cannot_be_changed_at_run_time() -> None:
    with pytest.raises(TypeError):
        EDIT_KINDS["new-kind"] = EDIT_KINDS["cuda-arch-lists"]  # type: ignore[index]
