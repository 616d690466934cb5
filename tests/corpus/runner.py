"""One corpus case through the real command line: the one piece of code that runs a case.

``tests/integration/test_hostile_corpus.py`` (pytest) and ``tests/corpus/run.py`` (the
script that prints ``cases N, ok N, defects N``) both call :func:`run_case`.

Each case runs twice in a fresh directory: plain, then with ``--json``.  Both must exit with
the code of the case's error class, print no traceback, show none of the case's secrets
(a token it hands the command) and none of its ``never_says``; the plain run must say the
case's message fragment on stderr (and each of its ``says``), and the JSON run must carry
the error class and the fragment in its ``error``
object.  A case whose sparkbuild module is missing fails, naming the module.
A defect is an :class:`AssertionError`; a case this machine cannot run (no private tmpfs) is
:class:`CannotRun`.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
from typing import TYPE_CHECKING

from corpus.cases import CLI, Case, Invocation

if TYPE_CHECKING:
    from pathlib import Path

TIMEOUT = 600
"""Seconds one command may take (a case that builds a wheel on a loaded machine)."""


def summary(ok: int, defects: int, skipped: int = 0) -> str:
    """The corpus's count: the cases run (a skipped one is not), ok and defects."""
    line = f"cases {ok + defects}, ok {ok}, defects {defects}"
    return line + (f" ({skipped} skipped)" if skipped else "")


class CannotRun(Exception):
    """This machine cannot run the case (it is skipped, which is not a pass)."""


def missing_modules(case: Case) -> list[str]:
    return [name for name in case.needs if importlib.util.find_spec(name) is None]


@functools.cache
def can_unshare() -> bool:
    try:
        probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def run_cli(inv: Invocation, *, as_json: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARKBUILD_QUIET": "", "COLUMNS": "200", **inv.env}
    for name in inv.unset:
        env.pop(name, None)
    argv = [*inv.wrap, *(inv.program or CLI), *inv.args, *(["--json"] if as_json else [])]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT)


def build(case: Case, work: Path) -> Invocation:
    work.mkdir(parents=True)
    inv = case.build(work)
    if inv.wrap[:1] == ["unshare"] and not can_unshare():
        raise CannotRun("cannot mount a tiny tmpfs here (unshare -rm is not permitted)")
    return inv


def check_common(case: Case, inv: Invocation, result: subprocess.CompletedProcess[str]) -> None:
    """No traceback, the expected exit code, and none of what the case must never print:
    its ``never_says`` and the secrets its invocation hands the command."""
    both = result.stdout + result.stderr
    assert "Traceback" not in both, both
    said = [text for text in (*case.never_says, *inv.secrets) if text in both]
    assert not said, f"printed {said!r}, which it must never print:\n{both}"
    code, name = (
        (0, "success") if case.error is None else (case.error.exit_code, case.error.__name__)
    )
    assert result.returncode == code, (
        f"expected exit {code} ({name}), got {result.returncode}:\n{both}"
    )


def run_case(case: Case, work: Path) -> None:
    """Run ``case`` plain and with ``--json`` under ``work`` (an empty directory)."""
    absent = missing_modules(case)
    assert not absent, f"the case needs sparkbuild module(s) {', '.join(absent)}"
    plain_inv = build(case, work / "plain")
    plain = run_cli(plain_inv, as_json=False)
    check_common(case, plain_inv, plain)
    assert case.fragment in plain.stderr, plain.stderr
    missing = [text for text in case.says if text not in plain.stderr + plain.stdout]
    assert not missing, f"did not say {missing!r}:\n{plain.stderr}"
    if plain_inv.after is not None:
        plain_inv.after()

    json_inv = build(case, work / "json")
    as_json = run_cli(json_inv, as_json=True)
    check_common(case, json_inv, as_json)
    try:
        payload = json.loads(as_json.stdout)
    except ValueError:
        raise AssertionError(f"--json printed no JSON object:\n{as_json.stdout}"
                             f"{as_json.stderr}") from None
    if case.error is None:
        assert "error" not in payload or payload["error"] is None, payload
        assert case.fragment in as_json.stderr + as_json.stdout
    else:
        error = payload["error"]
        assert error["error"] == case.error.__name__, error
        assert error["exit_code"] == case.error.exit_code, error
        said = " ".join(str(error.get(key) or "") for key in ("what", "where", "hint"))
        assert case.fragment in said, error
    if json_inv.after is not None:
        json_inv.after()
