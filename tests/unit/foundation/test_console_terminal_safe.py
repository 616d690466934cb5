"""Text from outside cannot drive the terminal: every line a person reads goes through
``say`` (messages, summaries, errors), and ``--json`` keeps the text exact."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from sparkbuild import cli
from sparkbuild.console import (
    PLAIN_SECONDS,
    PlainProgress,
    count_progress,
    info,
    say,
    step,
    terminal_safe,
    warn,
)
from sparkbuild.errors import SparkbuildError

ATTACKS = ["\x1b]0;pwned\x07", "\x1b[2J\x1b[31m", "\x9b31m", "\x1b]8;;https://x.invalid\x1b\\",
           "a\u202ecod.exe", "back\x08\x08", "\x00nul"]


@pytest.mark.parametrize("attack", ATTACKS)
def test_terminal_safe_leaves_no_control_a_terminal_acts_on(attack: str) -> None:
    safe = terminal_safe(f"Qwen{attack}ForCausalLM")
    assert safe.isprintable() and safe.startswith("Qwen") and safe.endswith("ForCausalLM")


def test_terminal_safe_keeps_a_message_s_layout_and_plain_text() -> None:
    assert terminal_safe("error: x\n  hint: y\tz") == "error: x\n  hint: y\tz"
    assert terminal_safe("plain é 日本 [bold]") == "plain é 日本 [bold]"
    assert terminal_safe("\x1b[31m") == "\\u001b[31m"


def test_every_kind_of_message_is_safe_and_markup_is_not_read(
        capsys: pytest.CaptureFixture[str]) -> None:
    say("summary \x1b[2J")
    info("info \x1b]0;t\x07")
    step("step [red]\x1b[31m")
    warn("warn \x9b1m [/]")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x9b" not in err and "\x07" not in err
    assert "step [red]\\u001b[31m" in err and "warn \\u009b1m [/]" in err


@dataclass
class _Result:
    name: str

    @property
    def error(self) -> SparkbuildError | None:
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"architecture": self.name}

    def summary(self) -> list[str]:
        return [f"modules for {self.name}"]


def test_a_summary_is_safe_and_the_json_exact(capsys: pytest.CaptureFixture[str]) -> None:
    name = "Evil\x1b]0;pwned\x07Model"
    cli._print_result(_Result(name), as_json=False)
    assert "\x1b" not in capsys.readouterr().err
    cli._print_result(_Result(name), as_json=True)
    assert json.loads(capsys.readouterr().out) == {"architecture": name}


def test_an_error_is_safe(capsys: pytest.CaptureFixture[str]) -> None:
    cli._print_error(SparkbuildError("bad \x1b[2J name", where="/x\x1b]0;t\x07",
                                     hint="h"), as_json=True)
    captured = capsys.readouterr()
    assert "\x1b" not in captured.err and "bad \\u001b[2J name" in captured.err
    assert json.loads(captured.out)["error"]["what"] == "bad \x1b[2J name"


# -- progress without a terminal ----------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_progress_says_each_tenth_and_every_interval() -> None:
    clock, lines = _Clock(), list[str]()
    progress = PlainProgress("compiling", clock=clock, write=lines.append)
    for done in range(1, 401):
        clock.now += 0.01
        progress.update(done, 400)
    progress.finish()
    assert len(lines) == 10 and lines[0].startswith("compiling: 40/400 (10%)")
    assert lines[-1].startswith("compiling: 400/400 (100%)")
    late = list[str]()
    slow = PlainProgress("compiling", clock=clock, write=late.append)
    for done in range(1, 4):  # a tenth of 10,000 is far off: the interval speaks
        clock.now += PLAIN_SECONDS
        slow.update(done, 10_000)
    assert late == [f"compiling: {n}/10000 (0%), {30 * n} s" for n in (1, 2, 3)]


def test_plain_byte_progress_says_nothing_of_a_short_transfer() -> None:
    clock, lines = _Clock(), list[str]()
    progress = PlainProgress("downloading", by_steps=False, clock=clock, write=lines.append)
    progress.total = 100
    for _ in range(100):
        progress.advance(1)
    progress.finish()
    assert lines == []
    clock.now += PLAIN_SECONDS
    progress.advance(0)
    assert lines == ["downloading: 100/100 (100%), 30 s"]


def test_count_progress_without_a_terminal_prints_plain_lines(
        capsys: pytest.CaptureFixture[str]) -> None:
    with count_progress("compiling \x1b[31m") as update:
        for done in range(1, 5):
            update(done, 4)
    err = capsys.readouterr().err
    assert "compiling \\u001b[31m: 4/4 (100%)" in err and "\x1b" not in err
