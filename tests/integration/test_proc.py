"""The one subprocess helper: echo, env differences, log file, timeout, failure tail, and
stopping a child's whole process group on a timeout or an interrupt."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sparkbuild.errors import CommandFailed, ToolchainError
from sparkbuild.proc import GRACE_SECONDS, OUTPUT_TAIL_LINES, Streams, run


def test_output_goes_to_the_log_and_progress_sees_each_line(tmp_path: Path) -> None:
    seen: list[str] = []
    log = tmp_path / "logs" / "step.log"
    result = run(["sh", "-c", "echo '[1/2] a'; echo '[2/2] b'"], log=log,
                 streams=Streams(progress=seen.append))
    assert result.returncode == 0
    assert seen == ["[1/2] a", "[2/2] b"]
    assert log.read_text() == "[1/2] a\n[2/2] b\n"


def test_a_run_that_logs_keeps_only_the_tail_in_memory(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    count = OUTPUT_TAIL_LINES * 3
    result = run(["seq", str(count)], log=log)
    kept = result.output.splitlines()
    assert not result.complete and len(kept) == OUTPUT_TAIL_LINES
    assert kept[-1] == str(count) and kept[0] == str(count - OUTPUT_TAIL_LINES + 1)
    assert result.full_output().splitlines() == [str(i) for i in range(1, count + 1)]
    unlogged = run(["seq", str(count)])
    assert unlogged.complete and unlogged.full_output() == unlogged.output
    assert len(unlogged.output.splitlines()) == count


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


# -- process groups: nothing is left running -----------------------------------------------

# A child that starts a grandchild and waits for it; the grandchild's pid is its first line.
# A background job of a non-interactive shell ignores SIGINT, so only a kill of the whole
# group (SIGKILL after the grace) ends it.
SPAWNS_GRANDCHILD = ["sh", "-c", "sleep 300 & echo $!; wait"]
# The same, with SIGINT and SIGTERM ignored by the shell and, inherited, by the grandchild.
IGNORES_SIGNALS = ["sh", "-c", "trap '' INT TERM; sleep 300 & echo $!; wait"]


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its parent is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while running(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)  # do not leave it behind, but fail
            return False
        time.sleep(0.02)
    return True


def first_pid(text: str) -> int:
    return int(re.search(r"^(\d+)$", text, re.MULTILINE).group(1))  # type: ignore[union-attr]


@pytest.mark.parametrize("cmd", [SPAWNS_GRANDCHILD, IGNORES_SIGNALS], ids=["plain", "ignoring"])
def test_timeout_kills_the_grandchildren_too(cmd: list[str]) -> None:
    started = time.monotonic()
    with pytest.raises(CommandFailed, match="timed out after 1 s") as failure:
        run(cmd, timeout=1, echo=False)
    grandchild = first_pid(failure.value.what)
    assert gone(grandchild), "the timeout left the grandchild running"
    assert time.monotonic() - started < 1 + GRACE_SECONDS + 30  # not the full sleep


@pytest.mark.parametrize("cmd", [SPAWNS_GRANDCHILD, IGNORES_SIGNALS], ids=["plain", "ignoring"])
def test_keyboard_interrupt_kills_the_whole_group(cmd: list[str]) -> None:
    """Ctrl-C in this process (SIGINT): the child's group is stopped, the interrupt goes on."""
    pids: list[int] = []

    def seen(line: str) -> None:
        if line.isdigit() and not pids:
            pids.append(int(line))
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            run(cmd, echo=False, timeout=60, streams=Streams(progress=seen))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert pids, "the child never said its grandchild's pid"
    assert gone(pids[0]), "Ctrl-C left the grandchild running"


# A sparkbuild process as a terminal runs it: proc.run under Ctrl-C or a job killer's SIGTERM.
DRIVER = r"""
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with it ignored
from sparkbuild.proc import Streams, interrupt_on_sigterm, run

def seen(line):
    print(line, flush=True)

try:
    with interrupt_on_sigterm():
        run(["sh", "-c", "sleep 300 & echo $!; wait"], echo=False, streams=Streams(progress=seen))
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_to_the_foreground_group_reaches_the_children(sig: signal.Signals) -> None:
    """A terminal's Ctrl-C (or ``timeout``'s SIGTERM) goes to sparkbuild's process group;
    its children, in process groups of their own, are not in it: proc.run passes it on."""
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own, as a shell's foreground job
        env={**os.environ, "SPARKBUILD_QUIET": "1"},
    )
    assert driver.stdout is not None
    grandchild = int(driver.stdout.readline())
    os.killpg(driver.pid, sig)
    out, _ = driver.communicate(timeout=30)
    assert driver.returncode == 130 and "interrupted" in out
    assert gone(grandchild), f"{sig.name} left the grandchild running"



def test_a_set_stop_event_stops_the_run() -> None:
    """The unit watch's lever: a watcher of the output sets ``stop`` and the run ends at
    once (not at the child's own end), as a failure."""
    stop = threading.Event()

    def seen(line: str) -> None:
        if line == "ready":
            stop.set()

    began = time.monotonic()
    with pytest.raises(CommandFailed, match="stopped by its output's watcher"):
        run(["sh", "-c", "echo ready; sleep 30"], echo=False,
            streams=Streams(progress=seen, stop=stop))
    assert time.monotonic() - began < 10


def test_an_unset_stop_event_changes_nothing() -> None:
    result = run(["sh", "-c", "echo done"], echo=False,
                 streams=Streams(stop=threading.Event()))
    assert result.returncode == 0 and result.output == "done\n"
