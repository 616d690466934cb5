"""The team tests' processes on loopback: started, watched, and stopped by their PIDs.

A scheduler and build servers (``sparkbuild team ...`` or ``sccache-dist`` by hand) are
:class:`Started`: the process and every process seen below it, each stopped by its PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

SCCACHE_DIST = Path(sys.executable).parent / "sccache-dist"


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid``: the children of each of its threads (a server that
    spawns from worker threads, as sccache's does, lists them there), and theirs."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        children: list[int] = []
        try:
            tasks = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
        found += children
        todo += children
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in state


@dataclass
class Started:
    """A process the test started, and every process below it it has seen."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    pids: set[int] = field(default_factory=set)

    def note_children(self) -> list[int]:
        below = _descendants(self.process.pid)
        self.pids.update(below)
        return below

    def dist_pid(self) -> int:
        """The sccache-dist process itself (the test's own, or below sparkbuild)."""
        for pid in [self.process.pid, *self.note_children()]:
            try:
                if Path(f"/proc/{pid}/exe").readlink().name == "sccache-dist":
                    return pid
            except OSError:
                continue
        raise AssertionError(f"no sccache-dist process below {self.name}: {self.log}")

    def stop(self) -> None:
        """SIGTERM by PID (sparkbuild passes it on to its child's group), then SIGKILL for
        any PID of it still alive."""
        self.note_children()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)
        for pid in sorted(self.pids):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _start(name: str, command: list[str], root: Path, env: dict[str, str]) -> Started:
    log = root / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, env={**os.environ, **env})
    return Started(name, process, log)


TEAM = [sys.executable, "-m", "sparkbuild", "team"]


def start_scheduler(root: Path, address: str) -> Started:
    """``sparkbuild team scheduler`` on ``address``, its files under ``root``, ready: its
    client token in ``root/client.token``, the servers' key in ``root/server.key``.
    SCCACHE_LOG=info: the scheduler says which server each job goes to."""
    started = _start("scheduler", [
        *TEAM, "scheduler", "--listen", address, "--dir", str(root / "sched"),
        "--client-token-file", str(root / "client.token"),
        "--server-key-file", str(root / "server.key")], root, {"SCCACHE_LOG": "info"})
    _wait(lambda: (root / "sched" / "scheduler.toml").is_file(), started)
    return started


def start_server(name: str, root: Path, scheduler: str, address: str) -> Started:
    """``sparkbuild team server --cpus 1`` on ``address`` for the scheduler at ``scheduler``
    (host:port), its cache in ``root/name``."""
    return _start(name, [
        *TEAM, "server", "--scheduler", f"http://{scheduler}", "--listen", address,
        "--server-key-file", str(root / "server.key"), "--cache-dir", str(root / name),
        "--cpus", "1"], root, {})


def _requirements() -> None:
    missing = [what for what, ok in (("root", os.geteuid() == 0),
                                     ("bubblewrap", shutil.which("bwrap") is not None),
                                     ("sccache-dist", SCCACHE_DIST.is_file())) if not ok]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"a build server needs {', '.join(missing)}: .ci/run installs "
                        "bubblewrap and runs as root")
        pytest.skip(f"a build server needs {', '.join(missing)}")


def _wait(ready: Any, *watched: Started, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if ready():
                return
        except OSError:
            pass
        for process in watched:
            assert process.process.poll() is None, process.log.read_text()[-3000:]
        assert time.monotonic() < deadline, [p.log.read_text()[-1500:] for p in watched]
        time.sleep(0.2)
