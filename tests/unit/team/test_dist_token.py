"""The team's secrets: one word of printable ASCII, checked as read, never shown."""

from __future__ import annotations

import stat
from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import UsageError
from sparkbuild.team import dist_token
from sparkbuild.team.dist_token import checked_secret, read_client_token, read_secret_file

if TYPE_CHECKING:
    from pathlib import Path

SECRET = "SeCrEt0123456789"


def test_a_secret_is_one_word_around_which_white_space_is_dropped() -> None:
    for text in (SECRET, f"{SECRET}\n", f"  {SECRET}\r\n\n", f"\t{SECRET} "):
        assert checked_secret(text, what="the token", where="f") == SECRET


@pytest.mark.parametrize(("text", "fault"), [
    (f"{SECRET}\n{SECRET}-2\n", "holds more than one line"),
    (f"{SECRET}\r{SECRET}", "holds more than one line"),
    (f"{SECRET} {SECRET}", "holds white space inside"),
    (f"{SECRET}\t{SECRET}", "holds white space inside"),
    (f"{SECRET}\x1b[2J", "not printable ASCII"),
    (f"{SECRET}\x00", "not printable ASCII"),
    (f"{SECRET}\u00e9", "not printable ASCII"),
    (f"{SECRET}\u202e", "not printable ASCII"),
    ("x" * 5000, "more than 4096 characters"),
    (" \n ", "is empty"),
])
def test_a_secret_that_breaks_the_rule_is_refused_unshown(text: str, fault: str) -> None:
    with pytest.raises(UsageError, match=fault) as error:
        checked_secret(text, what="the dist token file", where="/etc/t")
    said = error.value.render()
    assert error.value.where == "/etc/t" and SECRET not in said and "xxxx" not in said


def test_a_file_is_read_checked_and_named(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "token"
    path.write_bytes(f"{SECRET}\n".encode())
    path.chmod(0o600)
    assert read_secret_file(path, what="the dist token file") == SECRET
    assert capsys.readouterr().err == ""
    path.chmod(0o644)
    read_secret_file(path, what="the dist token file")
    assert "readable by others" in capsys.readouterr().err
    path.write_bytes(SECRET.encode() + b"\xff\xfe")
    with pytest.raises(UsageError, match="not printable ASCII") as error:
        read_secret_file(path, what="the dist token file")
    assert error.value.where == str(path) and SECRET not in error.value.render()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # read, never changed


def test_the_environment_is_checked_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(dist_token.TOKEN_ENV, f"{SECRET}\nsecond-line")
    with pytest.raises(UsageError, match="more than one line") as error:
        read_client_token(None)
    assert error.value.where == "$SPARKBUILD_DIST_TOKEN" and SECRET not in error.value.render()
    monkeypatch.setenv(dist_token.TOKEN_ENV, f" {SECRET}\n")
    assert read_client_token(None) == (SECRET, "$SPARKBUILD_DIST_TOKEN")
