"""The on-disk journal of a patch run, and the tree lock: what to put back when a run dies.

SIGINT is caught and rolled back in-process, but SIGKILL (``kill -9``, the OOM killer, a CI
timeout) cannot be caught, so the *next* run must find a half-patched tree and make it
whole.  Before a run changes any file it appends that file's original bytes and mode (or
"absent", for a file it is about to create) to ``TREE/.sparkbuild/journal.jsonl``, marks
the patch it is in the middle of, and fsyncs.  A run that ends in any orderly way (applied,
rolled back, nothing to do) removes the journal, so a journal found by the next run is
always a dead run's.

Restore, never finish: going back to the pre-run state is always possible, because each
file's original reached the journal before the file changed.  Finishing is not: the dead
run may have been about to fail (all or nothing then means "nothing"), and a patch it was
killed inside may be half-written in a way that ``git apply`` can neither complete nor
reverse.  So the next run restores, says so, and starts clean.

Two runs on one tree would read each other's live journal; every run therefore holds an
``flock`` on the tree directory itself (which leaves no file behind) and only a holder of
that lock reads or replays a journal, i.e. only once its writer is gone.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.console import warn
from sparkbuild.errors import PatchError
from sparkbuild.records import Record
from sparkbuild.store.files import fsync_dir, held_flock, open_locked

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

STATE_DIR = Path(".sparkbuild")
JOURNAL = STATE_DIR / "journal.jsonl"
LOCK_TIMEOUT_S = 600.0
"""How long a run waits for another run on the same tree (a real series takes seconds)."""

Entry = dict[str, Any]


# --- one tree, one run ------------------------------------------------------------------


@contextlib.contextmanager
def tree_lock(tree: Path, *, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive flock on the directory ``tree``; a second run waits and says so.

    Re-entrant within a process; the lock leaves no file behind.
    """

    def acquire() -> int:
        return open_locked(
            tree,
            os.O_RDONLY | os.O_DIRECTORY,
            timeout=timeout,
            waiting=lambda _fd: f"waiting for another sparkbuild run on {tree}",
            busy="kept the tree busy",
            hint="wait for it to finish, or stop it; the next run repairs what it left",
        )

    with held_flock(tree, acquire):
        yield


# --- writing ----------------------------------------------------------------------------


class Journal:
    """The originals of every file this run changes, on disk before the change.

    ``begin``/``save`` only queue entries; ``commit`` writes and fsyncs them, and the
    caller commits before each change to the tree.  ``done`` marks a finished patch.
    """

    def __init__(self, tree: Path, action: str, patches: Sequence[str]) -> None:
        self.tree = tree
        self.path = tree / JOURNAL
        self.header: Entry = {
            "run": action, "pid": os.getpid(), "started": time.time(), "patches": list(patches)
        }
        self._queued: list[Entry] = []
        self._seen: set[Path] = set()
        self._fd: int | None = None

    def begin(self, name: str) -> None:
        self._queued.append({"begin": name})

    def done(self, name: str) -> None:
        if self._fd is not None:
            self._write([{"done": name}], sync=False)

    def save(self, path: Path) -> None:
        """Queue the state of ``path`` (and of parent directories not there yet)."""
        if path in self._seen:
            return
        self._seen.add(path)
        parent, missing = path.parent, []
        while parent != self.tree and not parent.exists():
            missing.append(parent)
            parent = parent.parent
        self._queued += [{"mkdir": self._rel(d)} for d in missing]
        self._queued.append(_file_entry(path, self._rel(path)))

    def commit(self) -> None:
        """Make every queued entry durable: after this the tree may change."""
        if not self._queued:
            return
        if self._fd is None:
            self._open()
        entries, self._queued = self._queued, []
        self._write(entries, sync=True)

    def restore(self) -> Recovery | None:
        """Put every saved file back and remove the journal (an orderly rollback)."""
        self._close()
        self._queued = []
        return replay_journal(self.tree)

    def finish(self) -> None:
        """The run ended as it should: its changes stay, the journal goes."""
        self._close()
        self.path.unlink(missing_ok=True)

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.tree).as_posix()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self._write([self.header], sync=True)
        fsync_dir(self.path.parent)

    def _write(self, entries: list[Entry], *, sync: bool) -> None:
        assert self._fd is not None
        data = "".join(json.dumps(entry, separators=(",", ":")) + "\n" for entry in entries)
        os.write(self._fd, data.encode("utf-8"))
        if sync:
            os.fsync(self._fd)

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _file_entry(path: Path, rel: str) -> Entry:
    if path.is_symlink():
        return {"link": rel, "target": str(path.readlink())}
    if path.is_file():
        data = path.read_bytes()
        return {"keep": rel, "mode": path.stat().st_mode & 0o7777,
                "data": base64.b64encode(data).decode("ascii")}
    return {"absent": rel}


# --- replaying --------------------------------------------------------------------------


@dataclass(frozen=True)
class Recovery(Record):
    """What the start of a run found and undid: a run that died half way."""

    action: str
    """What the dead run was doing: ``apply`` or ``revert``."""
    pid: int | None
    in_flight: tuple[str, ...]
    """Patches it had begun and not finished."""
    finished: tuple[str, ...]
    restored: int
    """Files written back to their original bytes."""
    removed: int
    """Files it had created, removed."""

    def message(self) -> str:
        flight = ", ".join(self.in_flight) or "none"
        pid = f"pid {self.pid}, " if self.pid is not None else ""
        return (
            f"found an interrupted run of `patch {self.action}` ({pid}patches in flight: "
            f"{flight}; finished: {len(self.finished)}): restored {self.restored} files, "
            f"removed {self.removed} it had created, starting clean"
        )

    def json_extra(self) -> dict[str, Any]:
        return {"outcome": "restored", "message": self.message()}


def read_journal(path: Path) -> list[Entry]:
    """The journal's entries; a torn last line (killed mid-write) is dropped."""
    entries = []
    raw_lines = path.read_bytes().split(b"\n")
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            if number == len(raw_lines):  # no newline after it: the write was cut short
                break
            raise _corrupt(path, f"line {number} is not JSON") from None
        if not isinstance(entry, dict):
            raise _corrupt(path, f"line {number} is not an object")
        entries.append(entry)
    return entries


def _corrupt(path: Path, why: str) -> PatchError:
    return PatchError(
        f"the journal of an interrupted patch run is unreadable: {why}",
        where=str(path),
        hint="the tree may be half-patched: recreate it from its source (prepare), "
        "then delete the journal",
    )


def _target(tree: Path, rel: object, journal: Path) -> Path:
    """A journal path as a path inside ``tree``; anything else means the journal lies."""
    parts = rel.split("/") if isinstance(rel, str) else [""]
    inside = not any(p in ("", ".", "..", ".git") for p in parts)
    if not inside or not tree.joinpath(*parts).parent.resolve().is_relative_to(tree.resolve()):
        raise _corrupt(journal, f"it names a path outside the tree: {rel!r}")
    return tree.joinpath(*parts)


def _put_back(path: Path, entry: Entry) -> bool:
    """Restore one saved file or link; True when anything had to change."""
    if "link" in entry:
        target = str(entry["target"])
        if path.is_symlink() and str(path.readlink()) == target:
            return False
        _remove(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
        return True
    data, mode = base64.b64decode(entry["data"]), int(entry["mode"])
    same = path.is_file() and not path.is_symlink() and path.read_bytes() == data
    if not same:
        _remove(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    changed_mode = (path.stat().st_mode & 0o7777) != mode
    path.chmod(mode)
    return not same or changed_mode


def _remove(path: Path) -> bool:
    if path.is_symlink() or path.is_file():
        path.unlink()
        return True
    return False


def _check_entry(entry: Entry, journal: Path) -> None:
    """A saved file's entry carries its bytes and mode, a link its target; else it lies."""
    if "keep" in entry:
        data, mode = entry.get("data"), entry.get("mode")
        try:
            valid = isinstance(data, str) and base64.b64decode(data, validate=True) is not None
        except ValueError:
            valid = False
        if not valid:
            raise _corrupt(journal, f"the entry of {entry['keep']!r} has no saved data")
        if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777:
            raise _corrupt(journal, f"the entry of {entry['keep']!r} has no file mode")
    elif "link" in entry and not isinstance(entry.get("target"), str):
        raise _corrupt(journal, f"the entry of link {entry['link']!r} has no target")


def _replay(tree: Path, entries: list[Entry], journal: Path) -> tuple[int, int]:
    restored = removed = 0
    created_dirs = []
    for entry in entries:  # every entry checked before the first file is put back
        _check_entry(entry, journal)
    for entry in entries:
        kind = next((k for k in ("keep", "link", "absent", "mkdir") if k in entry), None)
        if kind is None:
            continue
        path = _target(tree, entry[kind], journal)
        if kind == "mkdir":
            created_dirs.append(path)
        elif kind == "absent":
            removed += _remove(path)
        else:
            restored += _put_back(path, entry)
    for directory in sorted(created_dirs, key=lambda d: len(d.parts), reverse=True):
        with contextlib.suppress(OSError):  # not empty (or gone): not ours to remove
            directory.rmdir()
    return restored, removed


def replay_journal(tree: Path) -> Recovery | None:
    """Undo what the run recorded in ``tree``'s journal, then remove it; None if none.

    Idempotent: killed while replaying, the journal stays and the next run replays again.
    """
    path = tree / JOURNAL
    if not path.is_file() or path.is_symlink():
        return None
    entries = read_journal(path)
    restored, removed = _replay(tree, entries, path)
    path.unlink()
    remove_empty_state_dirs(tree)
    header = entries[0] if entries and "run" in entries[0] else {}
    begun = dict.fromkeys(str(e["begin"]) for e in entries if "begin" in e)
    finished = dict.fromkeys(str(e["done"]) for e in entries if "done" in e)
    pid = header.get("pid")
    return Recovery(
        action=str(header.get("run", "apply")),
        pid=pid if isinstance(pid, int) else None,
        in_flight=tuple(name for name in begun if name not in finished),
        finished=tuple(finished),
        restored=restored,
        removed=removed,
    )


def recover_interrupted(tree: Path) -> Recovery | None:
    """At the start of a run (lock held): repair what a killed run left, and say so."""
    recovery = replay_journal(tree)
    if recovery is not None:
        warn(recovery.message())
    return recovery


def interrupted(tree: Path) -> bool:
    """Whether a journal sits in ``tree`` (a run is live or died half way)."""
    return (tree / JOURNAL).exists()


def remove_empty_state_dirs(tree: Path) -> None:
    """sparkbuild leaves no empty directory of its own in a tree."""
    state = tree / STATE_DIR
    if not state.is_dir() or state.is_symlink():
        return
    for directory in sorted(state.rglob("*"), key=lambda d: len(d.parts), reverse=True):
        if directory.is_dir() and not directory.is_symlink() and not any(directory.iterdir()):
            directory.rmdir()
    if not any(state.iterdir()):
        state.rmdir()
