"""A ``wheel`` run killed with SIGKILL leaves its build running (each child runs in a
process group of its own); the next run finds that build in the lock file and stops it before it
starts its own.

The source is an sdist whose setup.py records its pid and sleeps: the "build" is still
running when sparkbuild is killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from corpus import builders as b

SLEEPING_SETUP = """\
import os, time
with open({pids!r}, "a") as f:
    f.write(f"{{os.getpid()}}\\n")
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    return stat.rpartition(")")[2].split()[0] != "Z"


def _wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _kill_left(pids: Path) -> None:
    """Whatever the test leaves (a failed run): the builds' groups, not this process."""
    for pid in _pids(pids):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)


def test_the_next_run_stops_what_a_killed_wheel_left_running(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    try:
        _run_twice(tmp_path, pids)
    finally:
        _kill_left(pids)


def _run_twice(tmp_path: Path, pids: Path) -> None:
    files = {**b.source_files(), "setup.py": SLEEPING_SETUP.format(pids=str(pids))}
    top = b.write_tree(tmp_path / "src" / b.TOP, files)
    sdist = tmp_path / f"{b.TOP}.tar.gz"
    subprocess.run(["tar", "-czf", str(sdist), "-C", str(top.parent), b.TOP], check=True)
    recipe = b.good_recipe(tmp_path / "recipe")
    argv = [sys.executable, "-m", "sparkbuild", "wheel", "--source", str(sdist), "--recipe",
            str(recipe), "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out")]

    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        _wait_for(lambda: _pids(pids), 300, "the first build to start")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    (orphan,) = _pids(pids)
    assert _alive(orphan), "the dead run's build should still be running (its own group)"

    second = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        _wait_for(lambda: len(_pids(pids)) == 2 or second.poll() is not None, 300,
                  "the second build to start")
        assert not _alive(orphan), "the second run started its build beside the dead run's"
        second.send_signal(signal.SIGTERM)  # an orderly stop: its own build goes with it
        _, stderr = second.communicate(timeout=60)
    finally:
        if second.poll() is None:
            second.kill()
    assert "stopping what a killed sparkbuild run left running" in stderr, stderr
    for pid in _pids(pids):
        assert not _alive(pid), f"pid {pid} of a build is still running"
