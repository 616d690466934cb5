"""The cache's file lock: one sparkbuild run at a time writes a cache; a second one waits.

Also importable as ``sparkbuild.store.cache.CacheLock``.  The lock file holds the pid of its
holder, so a waiting run can say whom it waits for, and the process groups of the children
it runs (``group PGID STARTTIME`` lines, kept up to date through
:func:`sparkbuild.proc.add_group_listener`).  Each child runs in a process group of its own, so a
run killed with SIGKILL leaves its build running: the next run that takes the lock finds
those groups in the file and stops them (SIGTERM, then SIGKILL) before it starts.  A
release in order rewrites the file without groups: a live run answers for its children.  A
group is taken to be the dead run's only while it lives and its leader, if still there,
has the start time recorded (a reused id is someone else's).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.console import info
from sparkbuild.errors import UsageError, is_disk_full
from sparkbuild.proc import GRACE_SECONDS, add_group_listener
from sparkbuild.settings import LOCK_TIMEOUT
from sparkbuild.settings import seconds_from_env as seconds_from_env  # read from here too
from sparkbuild.store.files import held_flock, open_locked

if TYPE_CHECKING:
    from collections.abc import Iterator

DEFAULT_LOCK_TIMEOUT = float(LOCK_TIMEOUT.default)
"""Seconds to wait for another run's lock: a vendor step can take hours on a slow link."""


class CacheLock:
    """An exclusive ``fcntl.flock`` on one file, re-entrant within a process."""

    def __init__(self, path: Path, *, timeout: float | None = None) -> None:
        self.path = Path(path)
        self.timeout = (
            timeout
            if timeout is not None
            else LOCK_TIMEOUT.seconds(DEFAULT_LOCK_TIMEOUT)
        )

    @contextlib.contextmanager
    def held(self) -> Iterator[bool]:
        """Hold the lock; yields True for the outermost hold of this process."""
        key = self.path.resolve()
        with held_flock(key, self._acquire) as outermost:
            try:
                yield outermost
            finally:
                if outermost:  # an orderly release: what still runs is not left behind
                    with _RECORD_GUARD:
                        fd = _RECORDING.pop(key, None)
                        if fd is not None:
                            _write_record(fd, groups=False)

    def _acquire(self) -> int:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = open_locked(
                self.path,
                os.O_RDWR | os.O_CREAT,
                timeout=self.timeout,
                waiting=self._waiting,
                busy="held the cache lock",
                hint="wait for it to finish, or raise SPARKBUILD_LOCK_TIMEOUT (seconds)",
            )
        except OSError as exc:
            if is_disk_full(exc):
                raise
            raise unusable_directory(self.path.parent, exc) from exc
        stop_left_running(self.path, _read_groups(fd))
        with _RECORD_GUARD:
            _RECORDING[self.path.resolve()] = fd
            _write_record(fd)
        return fd

    def _waiting(self, fd: int) -> str:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").split("\n")[0].strip()
        holder = f", held by pid {text}" if text.isdigit() else ""
        return f"waiting for another sparkbuild run that holds the cache lock ({self.path}{holder})"


def recipe_work_lock(root: Path, recipe: str) -> CacheLock:
    """The lock of ``ROOT/work/RECIPE``, the recipe's work directory: ``wheel`` and
    ``bundle`` hold it while they use it (one at a time, a second run waits)."""
    return CacheLock(root / "work" / f"{recipe}.lock")


def unusable_directory(directory: Path, exc: OSError) -> UsageError:
    """A cache (or work) directory that cannot be written: which one, and why."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        return UsageError(f"the cache directory cannot be made: {existing} is a file",
                          where=str(existing), hint="give --cache (or $SPARKBUILD_CACHE) a "
                          "directory, or a path that does not exist yet")
    why = "it is read-only" if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) else (
        exc.strerror or str(exc))
    return UsageError(f"the cache directory is not writable: {why}",
                      where=str(existing if exc.errno == errno.EROFS else directory),
                      hint="give --cache (or $SPARKBUILD_CACHE) a directory this user may "
                      "write; sparkbuild keeps its locks and downloads there")


# -- the process groups of the holder ----------------------------------------------------

_RECORDING: dict[Path, int] = {}
"""The lock files this process holds (outermost), by path: each records its groups."""
_GROUPS: dict[int, str] = {}
"""The process groups of this process's running children: pgid -> the leader's start time."""
_RECORD_GUARD = threading.Lock()


def start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot), None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def _write_record(fd: int, *, groups: bool = True) -> None:
    text = f"{os.getpid()}\n" + "".join(
        f"group {g} {t}\n" for g, t in sorted(_GROUPS.items()) if groups)
    with contextlib.suppress(OSError):  # the record helps the next run; it never fails this one
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode(), 0)


def _on_group(pgid: int, started: bool) -> None:
    with _RECORD_GUARD:
        if started:
            _GROUPS[pgid] = start_time(pgid) or "?"
        else:
            _GROUPS.pop(pgid, None)
        for fd in _RECORDING.values():
            _write_record(fd)


add_group_listener(_on_group)


def _read_groups(fd: int) -> dict[int, str]:
    try:
        text = os.pread(fd, 65536, 0).decode("ascii", "replace")
    except OSError:
        return {}
    groups = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "group" and parts[1].isdigit():
            groups[int(parts[1])] = parts[2]
    return groups


def _group_alive(pgid: int, started: str) -> bool:
    """Whether the group recorded as ``pgid`` (leader started at ``started``) still runs.

    A group lives while any member does, and its id cannot be a new process's id
    meanwhile; a live process with that id started at another time is someone else's.
    """
    if pgid in _GROUPS:
        return False  # one of this process's own
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's group: not one of ours
    leader = start_time(pgid)
    return leader is None or leader == started


def stop_left_running(lock: Path, groups: dict[int, str]) -> list[int]:
    """Stop the groups a dead holder of ``lock`` left running; returns the ones stopped."""
    alive = [pgid for pgid, started in groups.items() if _group_alive(pgid, started)]
    if not alive:
        return []
    info(f"stopping what a killed sparkbuild run left running (process group "
         f"{', '.join(map(str, alive))}; {lock})")
    for sig, wait in ((signal.SIGTERM, GRACE_SECONDS), (signal.SIGKILL, 10.0)):
        for pgid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(_exists(pgid) for pgid in alive):
            time.sleep(0.05)
    return alive


def _exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
