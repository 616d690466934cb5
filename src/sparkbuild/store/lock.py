"""The cache's file lock: one sparkbuild run at a time writes a cache; a second one waits.

Also importable as ``sparkbuild.store.cache.CacheLock``.  The lock file holds the pid of its
holder, so a waiting run can say whom it waits for.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.errors import UsageError
from sparkbuild.store.files import held_flock, open_locked

if TYPE_CHECKING:
    from collections.abc import Iterator

DEFAULT_LOCK_TIMEOUT = 6 * 3600.0
"""Seconds to wait for another run's lock: a vendor step can take hours on a slow link."""


def seconds_from_env(variable: str, default: float) -> float:
    """A duration in seconds from the environment; a bad value is a UsageError."""
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise UsageError(f"{variable} must be a number of seconds, not {raw!r}")
    return value


class CacheLock:
    """An exclusive ``fcntl.flock`` on one file, re-entrant within a process."""

    def __init__(self, path: Path, *, timeout: float | None = None) -> None:
        self.path = Path(path)
        self.timeout = (
            timeout
            if timeout is not None
            else seconds_from_env("SPARKBUILD_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT)
        )

    @contextlib.contextmanager
    def held(self) -> Iterator[bool]:
        """Hold the lock; yields True for the outermost hold of this process."""
        with held_flock(self.path.resolve(), self._acquire) as outermost:
            yield outermost

    def _acquire(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_locked(
            self.path,
            os.O_RDWR | os.O_CREAT,
            timeout=self.timeout,
            waiting=self._waiting,
            busy="held the cache lock",
            hint="wait for it to finish, or raise SPARKBUILD_LOCK_TIMEOUT (seconds)",
        )
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    def _waiting(self, fd: int) -> str:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        holder = f", held by pid {text}" if text.isdigit() else ""
        return f"waiting for another sparkbuild run that holds the cache lock ({self.path}{holder})"
