"""The ``--json`` of every command, byte for byte, on the records of :mod:`json_records`.

The JSON is an interface: a change of a key, of its order or of a value shows here.  The
golden files are ``tests/unit/fixtures/json/<name>.json``; after a change meant to alter
the JSON (a new key), write them again with
``python tests/unit/foundation/test_json_golden.py`` and read the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild import cli
from unit.foundation.json_records import COMMANDS

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "json"


def printed(name: str, capsys: pytest.CaptureFixture[str]) -> str:
    """What ``--json`` prints for the record ``name``."""
    cli._print_result(COMMANDS[name](), as_json=True)
    return capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_json_is_the_golden_file(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    golden = GOLDEN / f"{name}.json"
    assert printed(name, capsys) == golden.read_text(encoding="utf-8")


def test_every_golden_file_has_its_record() -> None:
    assert {path.stem for path in GOLDEN.glob("*.json")} == set(COMMANDS)


def _write() -> None:
    import contextlib
    import io

    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, make in COMMANDS.items():
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            cli._print_result(make(), as_json=True)
        (GOLDEN / f"{name}.json").write_text(out.getvalue(), encoding="utf-8")


if __name__ == "__main__":
    _write()
