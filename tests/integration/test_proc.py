"""The one subprocess helper: echo, env differences, log file, timeout, failure tail."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.errors import CommandFailed, ToolchainError
from sparkbuild.proc import run


def test_output_goes_to_the_log_and_progress_sees_each_line(tmp_path: Path) -> None:
    seen: list[str] = []
    log = tmp_path / "logs" / "step.log"
    result = run(["sh", "-c", "echo '[1/2] a'; echo '[2/2] b'"], log=log, progress=seen.append)
    assert result.returncode == 0
    assert seen == ["[1/2] a", "[2/2] b"]
    assert log.read_text() == "[1/2] a\n[2/2] b\n"


def test_echo_shows_the_command_and_only_the_env_it_changes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKBUILD_KEEP", "same")
    run(["true"], env={"SPARKBUILD_KEEP": "same", "SPARKBUILD_NEW": "1"})
    err = capsys.readouterr().err
    assert "+ true" in err
    assert "env SPARKBUILD_NEW=1" in err
    assert "SPARKBUILD_KEEP" not in err


def test_failure_names_the_command_and_shows_the_tail(tmp_path: Path) -> None:
    script = "for i in $(seq 1 100); do echo line$i; done; exit 3"
    with pytest.raises(CommandFailed) as failure:
        run(["sh", "-c", script], log=tmp_path / "x.log", echo=False)
    what = failure.value.what
    assert "exited with status 3" in what
    assert "line100" in what and "line50" not in what
    assert failure.value.where == f"full log: {tmp_path / 'x.log'}"


def test_timeout_kills_the_child(tmp_path: Path) -> None:
    with pytest.raises(CommandFailed, match="timed out after 1 s"):
        run(["sleep", "30"], timeout=1, echo=False)


def test_check_false_returns_the_status() -> None:
    result = run(["sh", "-c", "echo out; exit 4"], check=False, echo=False)
    assert (result.returncode, result.output) == (4, "out\n")


def test_a_missing_program_is_a_toolchain_error() -> None:
    with pytest.raises(ToolchainError, match="program not found: no-such-tool-xyz"):
        run(["no-such-tool-xyz"], echo=False)
