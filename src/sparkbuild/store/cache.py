"""The dependency cache: content-addressed blobs, a small JSON index, one file lock.

Blobs live at ``root/blobs/sha256/<hex>``; their name *is* their hash, so an entry is
either complete and correct or it is not there.  Every write goes to a ``.partial-<pid>-*``
file in the same directory, is fsynced, then renamed: a run killed at any moment leaves
at most a partial file (swept by the next run), never a half-written entry under its
final name.  Reads re-hash the blob unless a "verified" marker matches the blob's
size, mtime, ctime and inode, so a corrupted entry is found, removed and reported.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import quote

from sparkbuild.console import info
from sparkbuild.errors import (
    CacheMissError,
    HashMismatchError,
    UsageError,
    VerifyError,
    disk_full_as_error,
)
from sparkbuild.settings import CACHE
from sparkbuild.store.files import (
    discarded,
    fsync_dir,
    read_kept_file,
    set_aside,
    write_atomic,
    write_synced,
    writer_gone,
)
from sparkbuild.store.hashing import CHUNK, is_sha256, sha256_bytes, sha256_file
from sparkbuild.store.lock import CacheLock
from sparkbuild.store.user_files import parse_json

FILL_HINT = (
    "fill the cache once online: run `sparkbuild wheel` without --offline, or prepare a "
    "tree (`sparkbuild prepare --dest TREE`) and run `sparkbuild vendor --tree TREE "
    "--cache DIR`"
)
"""How to fill the cache: ``vendor`` needs a prepared tree, ``wheel`` prepares its own."""

if TYPE_CHECKING:
    from collections.abc import Iterator

PARTIAL_PREFIX = ".partial-"
INDEX_ENTRY_LIMIT = 16 << 20
"""The largest index entry read back (each is a small JSON object)."""
_NAMESPACE = re.compile(r"[A-Za-z0-9_.-]+")
_MAX_STEM = 180


def default_cache_root() -> Path:
    """``$SPARKBUILD_CACHE``, else ``~/.cache/sparkbuild``."""
    override = CACHE.path()
    if override is not None:
        return override
    return Path.home() / ".cache" / "sparkbuild"


class Cache:
    """A content-addressed store under ``root``; safe to share between processes."""

    def __init__(self, root: Path, *, lock_timeout: float | None = None) -> None:
        self.root = Path(root).expanduser()
        self._lock = CacheLock(self.root / ".lock", timeout=lock_timeout)

    # -- layout ---------------------------------------------------------------------------

    @property
    def blob_dir(self) -> Path:
        return self.root / "blobs" / "sha256"

    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    @property
    def marker_dir(self) -> Path:
        return self.root / "verified"

    def blob_path(self, sha256: str) -> Path:
        """Where the blob would be; not checked.  Use :meth:`path_of` to read it."""
        return self.blob_dir / _checked_hex(sha256)

    def __repr__(self) -> str:
        return f"Cache({str(self.root)!r})"

    # -- locking --------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[Cache]:
        """Hold the cache's file lock; a second run waits here and says so.

        Taking the lock is also when what killed runs left behind is swept (and said).
        """
        with self._lock.held() as outermost:
            if outermost:
                self.sweep_partials()
            yield self

    # -- reading --------------------------------------------------------------------------

    def has(self, sha256: str) -> bool:
        """True when an entry exists under the name (cheap: not re-hashed)."""
        return self.blob_path(sha256).is_file()

    def path_of(self, sha256: str) -> Path:
        """The path of a verified entry (:meth:`find`); :class:`CacheMissError` when absent."""
        found = self.find(sha256)
        if found is None:
            raise CacheMissError(
                f"the cache holds no entry sha256:{sha256}",
                where=str(self.blob_path(sha256)),
                hint=FILL_HINT,
            )
        return found

    def find(self, sha256: str) -> Path | None:
        """The path of a verified entry; None when the cache holds none.

        Raises :class:`VerifyError` when the entry's bytes no longer hash to its name (the
        entry is removed first, so the next fetch stores it again).
        """
        path = self.blob_path(sha256)
        if not path.is_file():
            return None
        if self._marker_matches(path):
            return path
        actual = sha256_file(path)
        if actual != sha256:
            self.remove(sha256)
            raise VerifyError(
                f"cache entry sha256:{sha256} is corrupted (its bytes hash to {actual}); "
                "removed it",
                where=str(path),
                hint="run again online to fetch it again",
            )
        self._write_marker(path)
        return path

    def remove(self, sha256: str) -> None:
        for path in (self.blob_path(sha256), self.marker_dir / sha256):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    # -- verified markers -----------------------------------------------------------------

    @staticmethod
    def _stamp(path: Path) -> str:
        # ctime cannot be set by utime(), so any rewrite of the blob changes the stamp.
        st = path.stat()
        return f"{st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}"

    def _marker_matches(self, path: Path) -> bool:
        marker = self.marker_dir / path.name
        try:
            return marker.read_text(encoding="ascii") == self._stamp(path)
        except (OSError, UnicodeDecodeError):
            return False

    def _write_marker(self, path: Path) -> None:
        with contextlib.suppress(OSError):  # only a speed-up: never fail a read for it
            self._atomic_write_bytes(self.marker_dir / path.name, self._stamp(path).encode())

    # -- writing blobs --------------------------------------------------------------------

    def put_file(self, path: Path, *, sha256: str | None = None, name: str | None = None) -> str:
        """Copy ``path`` into the cache; returns its sha256.

        With ``sha256`` the bytes must match it (:class:`HashMismatchError` otherwise,
        nothing stored).  With ``name`` the index ``names`` maps it to the hash.
        """
        path = Path(path)
        if sha256 is not None and self._reuse(sha256):
            self._record_name(name, sha256, path.stat().st_size)
            return sha256
        with path.open("rb") as stream:
            return self.put_stream(stream, sha256=sha256, name=name, origin=str(path))

    def put_bytes(self, data: bytes, *, sha256: str | None = None, name: str | None = None) -> str:
        with discarded(self._new_partial(self.blob_dir)) as partial:
            with self._disk_full_guard(partial):
                write_synced(partial, data)
            return self._commit_partial(partial, sha256_bytes(data), sha256, name, "bytes")

    def put_stream(
        self,
        stream: IO[bytes],
        *,
        sha256: str | None = None,
        name: str | None = None,
        origin: str = "stream",
    ) -> str:
        """Store everything ``stream`` yields, hashing it on the way in."""
        digest = hashlib.sha256()
        with discarded(self._new_partial(self.blob_dir)) as partial:
            with self._disk_full_guard(partial), partial.open("wb") as out:
                for chunk in iter(lambda: stream.read(CHUNK), b""):
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            return self._commit_partial(partial, digest.hexdigest(), sha256, name, origin)

    def adopt_file(self, path: Path, *, sha256: str, name: str | None = None) -> str:
        """Move a file whose sha256 the caller computed while writing it into the cache.

        Renamed, not copied or re-hashed (a finished download of gigabytes): ``path``
        must be on the cache's filesystem, as :meth:`new_partial_path` gives.
        """
        with discarded(Path(path)) as partial:
            return self._commit_partial(partial, _checked_hex(sha256), sha256, name, str(partial))

    def new_partial_path(self) -> Path:
        """A temp name inside the cache that the next run sweeps if we die."""
        return self._new_partial(self.blob_dir)

    def _reuse(self, sha256: str) -> bool:
        try:
            return self.find(sha256) is not None
        except VerifyError:  # the damaged entry was removed: store it again
            return False

    def _commit_partial(
        self, partial: Path, actual: str, expected: str | None, name: str | None, origin: str
    ) -> str:
        if expected is not None and actual != _checked_hex(expected):
            raise HashMismatchError(
                f"sha256 mismatch for {origin}: expected {expected}, got {actual}",
                where=origin,
                hint="the file is not the pinned one; check the pin or the source",
            )
        final = self.blob_dir / actual
        if not self._reuse(actual):
            partial.replace(final)
            fsync_dir(self.blob_dir)
            self._write_marker(final)
        self._record_name(name, actual, final.stat().st_size)
        return actual

    def _record_name(self, name: str | None, sha256: str, size: int) -> None:
        if name is not None:
            self.record("names", name, {"sha256": sha256, "size": size})

    # -- the JSON index -------------------------------------------------------------------

    def _index_path(self, namespace: str, key: str) -> Path:
        if not _NAMESPACE.fullmatch(namespace):
            raise UsageError(f"bad cache index namespace {namespace!r}")
        stem = quote(key, safe="")
        if len(stem) > _MAX_STEM:  # file names stop at 255 bytes; keep them unique
            stem = f"{stem[:100]}-{sha256_bytes(key.encode())[:32]}"
        return self.index_dir / namespace / (stem + ".json")

    def record(self, namespace: str, key: str, data: dict[str, Any]) -> None:
        """Store a small JSON object under ``namespace``/``key`` (atomic replace)."""
        payload = json.dumps(data, indent=2, sort_keys=True).encode() + b"\n"
        self._atomic_write_bytes(self._index_path(namespace, key), payload)

    def keep(self, namespace: str, key: str, schema: int, data: dict[str, Any]) -> None:
        """:meth:`record` ``data`` as a kept result: stamped with its ``schema`` and when it
        was made (``when``, local time), which :meth:`kept` checks on the way back."""
        when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())
        self.record(namespace, key, {"schema": schema, "when": when, **data})

    def kept(self, namespace: str, key: str, schema: int) -> dict[str, Any] | None:
        """The entry :meth:`keep` stored, only with this ``schema`` and a ``when``."""
        entry = self.lookup(namespace, key)
        if entry is None or entry.get("schema") != schema or not isinstance(entry.get("when"),
                                                                            str):
            return None
        return entry

    def lookup(self, namespace: str, key: str) -> dict[str, Any] | None:
        """The object stored by :meth:`record`, or None.  An entry that cannot be read, is
        no regular file, or holds no JSON object is named and set aside (never trusted,
        never a crash): the next run records it again."""
        path = self._index_path(namespace, key)
        what = f"the cache's {namespace} entry"
        raw = read_kept_file(path, what, INDEX_ENTRY_LIMIT)
        if raw is None:
            return None
        try:
            data = parse_json(raw.decode("utf-8"))
        except ValueError:
            data = None
        if not isinstance(data, dict):
            set_aside(path, what, "holds no JSON object")
            return None
        return data

    # -- partial files --------------------------------------------------------------------

    def _new_partial(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        return directory / f"{PARTIAL_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"

    def _atomic_write_bytes(self, target: Path, data: bytes) -> None:
        partial = self._new_partial(target.parent)
        with self._disk_full_guard(partial):
            write_atomic(target, data, partial=partial)

    def partial_files(self) -> list[Path]:
        """Half-written files of runs that died (their writer's pid is gone).

        Only the cache's own directories are searched: other tools keep large trees
        (git mirrors, unpacked sources) under the same root.
        """
        candidates = [
            *self.blob_dir.glob(PARTIAL_PREFIX + "*"),
            *self.marker_dir.glob(PARTIAL_PREFIX + "*"),
            *self.index_dir.glob(f"*/{PARTIAL_PREFIX}*"),
        ]
        found = []
        for path in candidates:
            pid_text = path.name[len(PARTIAL_PREFIX) :].split("-", 1)[0]
            if writer_gone(pid_text):
                found.append(path)
        return sorted(found)

    def sweep_partials(self) -> int:
        """Remove what interrupted runs left; says so, returns how many files."""
        leftovers = self.partial_files()
        for path in leftovers:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if leftovers:
            info(
                f"removed {len(leftovers)} half-written cache file(s) left by an interrupted "
                f"run in {self.root}"
            )
        return len(leftovers)

    def _disk_full_guard(self, partial: Path) -> contextlib.AbstractContextManager[None]:
        """A full disk while writing ``partial``: removed, and said with the space left."""

        def what() -> str:
            free = shutil.disk_usage(self.root).free if self.root.exists() else 0
            return f"the disk holding the cache filled up ({free // (1 << 20)} MiB free)"

        return disk_full_as_error(
            what,
            where=self.root,
            hint="free some space or point SPARKBUILD_CACHE at a bigger disk; "
            "nothing half-written was kept",
            cleanup=lambda: partial.unlink(missing_ok=True),
        )


def _checked_hex(sha256: str) -> str:
    if not is_sha256(sha256):
        raise UsageError(
            f"not a sha256 digest: {sha256!r}", hint="64 lower-case hexadecimal digits"
        )
    return sha256
