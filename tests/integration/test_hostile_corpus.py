"""Every case of the hostile-input corpus (tests/corpus/cases.py) through the real CLI.

:func:`corpus.runner.run_case` runs each (plain, then with ``--json``) and asserts what it
must do; ``python tests/corpus/run.py`` runs the same cases with the same code and prints
``cases N, ok N, defects N``.  There is no xfail: a case whose sparkbuild module is missing
fails, naming the module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from corpus.cases import CASES, Case
from corpus.runner import CannotRun, run_case

if TYPE_CHECKING:
    from pathlib import Path


def params() -> list[Any]:
    return [pytest.param(case, id=case.id) for case in CASES]


@pytest.mark.parametrize("case", params())
def test_case(case: Case, tmp_path: Path) -> None:
    try:
        run_case(case, tmp_path)
    except CannotRun as why:
        pytest.skip(str(why))


def test_every_error_class_has_its_own_exit_code() -> None:
    from sparkbuild.errors import ALL_ERRORS

    codes = [cls.exit_code for cls in ALL_ERRORS]
    assert len(codes) == len(set(codes))


def test_corpus_covers_the_issue() -> None:
    """Archives, hashes, patches, recipes, git, the toolchain, the disk and the cache each
    have cases (a guard against a case list shrinking)."""
    areas = {case.area for case in CASES}
    assert {"archive", "hash", "patch", "recipe", "git", "toolchain", "disk", "cache"} <= areas
    assert len({case.id for case in CASES}) == len(CASES)
