"""Every case of the hostile-input corpus (tests/corpus/cases.py) through the real CLI.

Each case runs twice in a fresh directory: plain, then with ``--json``.  Both must exit
with the code of the case's error class and print no traceback; the plain run must say the
case's message fragment on stderr, and the JSON run must carry the error class and the
fragment in its ``error`` object.  There is no xfail: a case whose sparkbuild module is
missing fails, naming the module.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from corpus.cases import CASES, CLI, Case, Invocation

TIMEOUT = 120


def missing_modules(case: Case) -> list[str]:
    return [name for name in case.needs if importlib.util.find_spec(name) is None]


@functools.cache
def can_unshare() -> bool:
    try:
        probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def params() -> list[Any]:
    return [pytest.param(case, id=case.id) for case in CASES]


def run_cli(inv: Invocation, *, as_json: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARKBUILD_QUIET": "", "COLUMNS": "200", **inv.env}
    for name in inv.unset:
        env.pop(name, None)
    argv = [*inv.wrap, *CLI, *inv.args, *(["--json"] if as_json else [])]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT)


def build(case: Case, work: Path) -> Invocation:
    work.mkdir(parents=True)
    inv = case.build(work)
    if inv.wrap[:1] == ["unshare"] and not can_unshare():
        pytest.skip("cannot mount a tiny tmpfs here (unshare -rm is not permitted)")
    return inv


def check_common(case: Case, result: subprocess.CompletedProcess[str]) -> None:
    both = result.stdout + result.stderr
    assert "Traceback" not in both, both
    code, name = (
        (0, "success") if case.error is None else (case.error.exit_code, case.error.__name__)
    )
    assert result.returncode == code, (
        f"expected exit {code} ({name}), got {result.returncode}:\n{both}"
    )


@pytest.mark.parametrize("case", params())
def test_case(case: Case, tmp_path: Path) -> None:
    absent = missing_modules(case)
    assert not absent, f"the case needs sparkbuild module(s) {', '.join(absent)}"
    plain_inv = build(case, tmp_path / "plain")
    plain = run_cli(plain_inv, as_json=False)
    check_common(case, plain)
    assert case.fragment in plain.stderr, plain.stderr
    if plain_inv.after is not None:
        plain_inv.after()

    json_inv = build(case, tmp_path / "json")
    as_json = run_cli(json_inv, as_json=True)
    check_common(case, as_json)
    payload = json.loads(as_json.stdout)
    if case.error is None:
        assert "error" not in payload or payload["error"] is None, payload
        assert case.fragment in as_json.stderr + as_json.stdout
        if json_inv.after is not None:
            json_inv.after()
        return
    error = payload["error"]
    assert error["error"] == case.error.__name__
    assert error["exit_code"] == case.error.exit_code
    said = " ".join(str(error.get(key) or "") for key in ("what", "where", "hint"))
    assert case.fragment in said, error
    if json_inv.after is not None:
        json_inv.after()


def test_every_error_class_has_its_own_exit_code() -> None:
    from sparkbuild.errors import ALL_ERRORS

    codes = [cls.exit_code for cls in ALL_ERRORS]
    assert len(codes) == len(set(codes))


def test_corpus_covers_the_issue() -> None:
    """The areas issue 6 lists each have cases (a guard against a case list shrinking)."""
    areas = {case.area for case in CASES}
    assert {"archive", "hash", "patch", "recipe", "git", "toolchain", "disk", "cache"} <= areas
    assert len({case.id for case in CASES}) == len(CASES)
