"""proc.run's echoes: all of them with -v (or on a terminal), each kind once in a log."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sparkbuild.cli import build_parser
from sparkbuild.console import echo_command, set_verbose
from sparkbuild.proc import command_kind

if TYPE_CHECKING:
    from collections.abc import Iterator

GIT_ENV = {"GIT_CEILING_DIRECTORIES": "/work"}


@pytest.fixture(autouse=True)
def every_echo_afterwards() -> Iterator[None]:
    yield
    set_verbose(True)


def echo_a_run() -> None:
    for n in range(3):
        echo_command(f"git apply --check p{n}.diff", "git apply", GIT_ENV)
    echo_command("cmake -P arch_eval.cmake", "cmake -P", {"CUDA": "13.0"})
    echo_command("git apply p9.diff", "git apply", GIT_ENV)


def test_verbose_echoes_every_command_and_env_line(capsys: pytest.CaptureFixture[str]) -> None:
    set_verbose(True)
    echo_a_run()
    err = capsys.readouterr().err
    assert err.count("+ git apply") == 4
    assert err.count("env GIT_CEILING_DIRECTORIES=/work") == 4
    assert "not echoed" not in err


def test_without_a_terminal_each_kind_is_echoed_once(capsys: pytest.CaptureFixture[str]) -> None:
    set_verbose(False)  # capsys: stderr is not a terminal
    echo_a_run()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "+ git apply --check p0.diff",
        "  env GIT_CEILING_DIRECTORIES=/work",
        "  (further `git apply` commands are not echoed; -v echoes them all)",
        "+ cmake -P arch_eval.cmake",
        "  env CUDA=13.0",
    ]


def test_a_new_run_starts_counting_again(capsys: pytest.CaptureFixture[str]) -> None:
    set_verbose(False)
    echo_a_run()
    set_verbose(False)
    echo_a_run()
    assert capsys.readouterr().err.count("+ git apply --check p0.diff") == 2


def test_command_kind_is_program_and_subcommand() -> None:
    assert command_kind(["/usr/bin/git", "apply", "--check", "-R"]) == "git apply"
    assert command_kind(["ninja", "-j2"]) == "ninja"
    assert command_kind(["cmake"]) == "cmake"


def test_v_is_global_and_per_command() -> None:
    parser = build_parser()
    assert parser.parse_args(["-v", "doctor"]).verbose is True
    assert parser.parse_args(["doctor", "-v"]).verbose is True
    assert parser.parse_args(["doctor", "--verbose"]).verbose is True
    assert parser.parse_args(["doctor"]).verbose is False
    assert parser.parse_args(["patch", "status", "TREE", "-v"]).verbose is True
