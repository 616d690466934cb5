"""A command line argparse refuses is a UsageError like any other: exit 2, and the JSON error
object under ``--json`` (docs/layout.md), printed by ``main`` in-process."""

from __future__ import annotations

import json

import pytest

from sparkbuild import cli


@pytest.mark.parametrize(("argv", "says"), [
    (["install", "W", "--json"], "the following arguments are required: --venv"),
    (["install", "W", "--jso"], "the following arguments are required: --venv"),
    (["wheel", "--jobs", "many", "--json"], "argument --jobs: invalid int value: 'many'"),
    (["frobnicate", "--json"], "invalid choice: 'frobnicate'"),
    (["verify", "--bogus", "--json"], "unrecognized arguments: --bogus"),
    (["install", "W", "--venv", "V", "--from", "conda", "--json"], "invalid choice: 'conda'"),
])
def test_an_argument_error_under_json_prints_the_error_object(
        capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert (error["error"], error["exit_code"]) == ("UsageError", 2)
    assert says in error["what"]
    assert error["where"].startswith("sparkbuild")
    assert "usage: sparkbuild" in err and says in err


def test_without_json_only_stderr_says_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["install", "W"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "error: the following arguments are required: --venv" in err


@pytest.mark.parametrize(("tokens", "asks"), [
    (["install", "--json"], True), (["--js"], True), (["--j"], False),
    (["--", "--json"], False), (["--jsonx"], False), (["x"], False),
])
def test_what_counts_as_asking_for_json(tokens: list[str], asks: bool) -> None:
    assert cli._asks_for_json(tokens) is asks
