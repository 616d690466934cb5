"""File-system pieces several stages share: atomic writes, leftovers of dead runs, flocks.

Each stage must survive being killed at any moment (``kill -9``, the OOM killer, a CI
timeout) without leaving a half-written file under its final name, and the next run must
recognise what a dead run left.  The same few moves do that everywhere, so they live here
once: write beside the target and rename; name leftovers with the writer's pid and remove
them only once that pid is gone; wait for another run's ``flock`` and say so.  A small file
the cache keeps for later runs is read back with :func:`read_kept_file`: one that cannot be
read, or (its reader judges) does not parse, is named and set aside, never trusted and never
a crash.  Also the tree walk and venv layout that several modules need.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.console import info, shown, warn
from sparkbuild.errors import LockTimeoutError, UsageError
from sparkbuild.store.user_files import NotRegularFile, open_regular, size_text

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

_POLL_SECONDS = 0.1
NAME_MAX = 255
"""The longest file name (bytes) Linux file systems take."""
PATH_MAX = 4096
"""The longest path (bytes, with its NUL) a system call takes."""


# -- leftovers of dead runs --------------------------------------------------------------


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user counts: it is not ours to judge)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def writer_gone(pid_text: str) -> bool:
    """Whether the run named by ``pid_text`` (a leftover's name part) is gone.

    Text that is not a pid names no live run either.
    """
    return not pid_text.isdigit() or not pid_alive(int(pid_text))


# -- walking trees -----------------------------------------------------------------------


def walk_files(root: Path, skip: frozenset[str]) -> Iterator[Path]:
    """Every file under ``root`` in sorted order, directories named in ``skip`` left out."""
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in skip)
        for name in sorted(files):
            yield Path(directory) / name


def usable_path(path: Path, what: str) -> Path:
    """``path`` (a command's argument, ``what`` names it), or :class:`UsageError` when the
    system would refuse it as too long (ENAMETOOLONG): a part over NAME_MAX bytes, or the
    whole over PATH_MAX."""
    whole = len(os.fsencode(path.absolute()))
    longest = max((len(os.fsencode(part)) for part in path.parts), default=0)
    if whole < PATH_MAX and longest <= NAME_MAX:
        return path
    why = (f"has a name of {longest} bytes, over NAME_MAX ({NAME_MAX})" if longest > NAME_MAX
           else f"is {whole} bytes long, over PATH_MAX ({PATH_MAX - 1})")
    text = shown(str(path))
    raise UsageError(f"{what} {why}", where=text if len(text) <= 160 else text[:160] + "...",
                     hint="give a shorter path: the system refuses this one")


def read_at_most(path: Path, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``path``: a caller refuses a file longer than
    ``limit`` without holding it (the size ``stat`` gives is not trusted: a file grows).
    A path that is no regular file raises :class:`~sparkbuild.store.user_files.NotRegularFile` (an
    OSError) rather than blocking on a FIFO or reading a device without end."""
    with open_regular(path) as stream:
        return stream.read(limit + 1)


# -- what the cache keeps for later runs -------------------------------------------------


def set_aside(path: Path, what: str, why: str) -> None:
    """Say (a warning) that ``what`` at ``path`` is ``why`` and is not used, and move it to
    ``NAME.set-aside`` beside it, so the next run neither trusts it nor says it again (it
    stays there for a look; a later one replaces it)."""
    aside = path.with_name(path.name + ".set-aside")
    try:
        if aside.is_dir() and not aside.is_symlink():
            shutil.rmtree(aside)
        path.replace(aside)
        done = f"set aside as {aside.name}"
    except OSError as exc:
        done = f"ignored (it could not be moved aside: {exc.strerror or exc})"
    warn(f"{what} {path} {why}: {done}; this run goes on without it")


def read_kept_file(path: Path, what: str, limit: int) -> bytes | None:
    """The bytes of a small file the cache keeps for later runs (``what`` names it: "the
    unit table"); None when there is none.  One that is no regular file (a FIFO, a device,
    a directory), holds over ``limit`` bytes or cannot be read is never trusted and never a
    crash: it is :func:`set_aside`, and None returned."""
    try:
        data = read_at_most(path, limit)
    except FileNotFoundError:
        return None
    except NotRegularFile as exc:
        set_aside(path, what, f"is {exc.strerror}, not a regular file")
        return None
    except OSError as exc:
        set_aside(path, what, f"cannot be read ({exc.strerror or exc})")
        return None
    if len(data) > limit:
        set_aside(path, what, f"is over {size_text(limit)}")
        return None
    return data


def venv_python(venv: Path) -> Path:
    """The interpreter of a (POSIX) virtual environment."""
    return venv / "bin" / "python"


# -- atomic writes -----------------------------------------------------------------------


def fsync_dir(directory: Path) -> None:
    """Make a rename durable: without it a power cut may forget the new name."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and fsync it: on disk before anything renames it."""
    with path.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


@contextlib.contextmanager
def discarded(partial: Path) -> Iterator[Path]:
    """Yield ``partial``; whatever is still at that path at the end is removed."""
    try:
        yield partial
    finally:
        partial.unlink(missing_ok=True)


def partial_beside(target: Path) -> Path:
    """The temporary name a write of ``target`` uses (same directory: one rename)."""
    return target.with_name(f".{target.name}.partial-{os.getpid()}")


def sweep_partials_beside(target: Path) -> list[Path]:
    """Remove the :func:`partial_beside` files and directories of runs that died writing
    ``target`` (a link among them is removed, never followed)."""
    swept = []
    for path in sorted(target.parent.glob(f".{glob.escape(target.name)}.partial-*")):
        if not writer_gone(path.name.rpartition("-")[2]):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        swept.append(path)
    return swept


@contextlib.contextmanager
def replacing(target: Path, partial: Path | None = None) -> Iterator[Path]:
    """Yield a temporary path to write; renamed over ``target`` only if the block succeeds."""
    with discarded(partial or partial_beside(target)) as path:
        yield path
        path.replace(target)


def write_atomic(target: Path, data: bytes, *, partial: Path | None = None) -> None:
    """Replace ``target`` with ``data``: readers see the old bytes or the new, never half."""
    with replacing(target, partial) as path:
        write_synced(path, data)


def write_text_atomic(path: Path, text: str) -> None:
    write_atomic(path, text.encode("utf-8"))


# -- file locks --------------------------------------------------------------------------


def open_locked(
    path: Path,
    flags: int,
    *,
    timeout: float,
    waiting: Callable[[int], str],
    busy: str,
    hint: str,
) -> int:
    """Open ``path`` and take an exclusive ``flock`` on it; the descriptor holds the lock.

    While another run holds it, ``waiting(fd)`` is said once and the wait goes on for up
    to ``timeout`` seconds; then :class:`LockTimeoutError` ("another sparkbuild run
    ``busy`` for over ...").
    """
    fd = os.open(path, flags, 0o644)
    try:
        deadline = time.monotonic() + timeout
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                pass
            if not said:
                info(waiting(fd))
                said = True
            if time.monotonic() >= deadline:
                raise LockTimeoutError(
                    f"another sparkbuild run {busy} for over {timeout:g} s",
                    where=str(path),
                    hint=hint,
                )
            time.sleep(_POLL_SECONDS)
    except BaseException:
        os.close(fd)
        raise


# Per-process state of the flocks this process holds, keyed by what each one locks.
_HELD_DEPTH: dict[Path, int] = {}
_HELD_FDS: dict[Path, int] = {}
_HELD_GUARD = threading.Lock()


@contextlib.contextmanager
def held_flock(key: Path, acquire: Callable[[], int]) -> Iterator[bool]:
    """Hold the flock on ``key``, re-entrant within the process; True for the outermost hold.

    flock locks belong to an open file description, so a second ``open`` in the same
    process would wait for itself; a per-process depth count avoids that.  ``acquire``
    returns a descriptor that holds the lock (see :func:`open_locked`).
    """
    with _HELD_GUARD:
        depth = _HELD_DEPTH.get(key, 0)
        if depth:
            _HELD_DEPTH[key] = depth + 1
    if not depth:
        fd = acquire()
        with _HELD_GUARD:
            _HELD_FDS[key], _HELD_DEPTH[key] = fd, 1
    try:
        yield not depth
    finally:
        with _HELD_GUARD:
            _HELD_DEPTH[key] -= 1
            last = _HELD_DEPTH[key] == 0
            fd = _HELD_FDS.pop(key) if last else -1
            if last:
                del _HELD_DEPTH[key]
        if last:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
