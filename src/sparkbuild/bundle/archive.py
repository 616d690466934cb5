"""The bundle's archive format: a deterministic ``.tar.xz`` with its manifest first.

Every file under the staging root becomes a member ``sparkbuild-bundle/PATH`` with zero
timestamps and owners; identical files are stored once (later copies as tar hard links);
members are ordered by suffix and name so that the copies of one header that several
dependencies carry sit side by side, where xz finds them.  The manifest maps every member
to its sha256 and size (or, for a symbolic link, its target).  It is the first member, so a
reader has it before any other member is written (:mod:`sparkbuild.bundle.read` refuses an
unlisted or oversized member before a byte of it reaches the disk); a bundle of an older
sparkbuild, whose manifest is last, costs its reader one more pass over the archive.
Hashing the members and compressing them (minutes for a vLLM bundle at xz -9) each show
their progress (:func:`sparkbuild.console.count_progress`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.console import count_progress
from sparkbuild.store.files import writer_gone
from sparkbuild.store.hashing import sha256_file

if TYPE_CHECKING:
    from collections.abc import Callable

TOP = "sparkbuild-bundle"
MANIFEST = "manifest.json"


def _file_info(name: str, path: Path) -> tarfile.TarInfo:
    member = tarfile.TarInfo(f"{TOP}/{name}")
    member.mtime = 0
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    if path.is_symlink():
        member.type = tarfile.SYMTYPE
        member.linkname = str(path.readlink())
        member.mode = 0o777
    else:
        member.size = path.stat().st_size
        member.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
    return member


def members_of(root: Path) -> dict[str, Path]:
    """Every file and link under ``root``, by POSIX path relative to it (links to
    directories included: os.walk lists them among the directories)."""
    found = {}
    for directory, subdirs, files in os.walk(root):
        links = [d for d in subdirs if (Path(directory) / d).is_symlink()]
        for name in [*files, *links]:
            path = Path(directory) / name
            found[path.relative_to(root).as_posix()] = path
    return found


def _order(name: str) -> tuple[str, str, str]:
    """Same-named files side by side (the CUTLASS copies), so xz finds the repeats."""
    base = name.rsplit("/", 1)[-1]
    return (Path(base).suffix, base, name)


@dataclass
class _Written:
    members: int = 0
    raw_bytes: int = 0
    links: int = 0
    manifest: dict[str, Any] = field(default_factory=dict)


def sweep_partials(out: Path) -> list[Path]:
    """Remove the ``.NAME.partial-PID`` files of runs that died writing ``out``."""
    swept = []
    for path in out.parent.glob(f".{out.name}.partial-*"):
        if writer_gone(path.name.rpartition("-")[2]) and not path.is_dir():
            path.unlink(missing_ok=True)
            swept.append(path)
    return swept


def _planned(files: dict[str, Path], written: _Written, hashed: Callable[[int, int], None]
             ) -> tuple[dict[str, dict[str, Any]], list[tuple[tarfile.TarInfo, Path | None]]]:
    """Every member's manifest entry, and the tar headers to write (with the file whose
    bytes follow; None for a link), in the archive's order; ``hashed(done, total)`` after
    each member."""
    members: dict[str, dict[str, Any]] = {}
    planned: list[tuple[tarfile.TarInfo, Path | None]] = []
    first_of: dict[str, str] = {}
    for count, (name, path) in enumerate(sorted(files.items(),
                                                key=lambda item: _order(item[0])), 1):
        hashed(count, len(files))
        member = _file_info(name, path)
        if member.issym():
            members[name] = {"link": member.linkname}
            planned.append((member, None))
            continue
        digest = sha256_file(path, progress=False)  # inside the members' own progress
        members[name] = {"sha256": digest, "size": member.size}
        written.raw_bytes += member.size
        if digest in first_of:
            member.type, member.linkname, member.size = (
                tarfile.LNKTYPE, f"{TOP}/{first_of[digest]}", 0)
            planned.append((member, None))
            written.links += 1
            continue
        first_of[digest] = name
        planned.append((member, path))
    return members, planned


def write_archive(root: Path, out: Path, header: dict[str, Any]) -> _Written:
    """Write ``root`` as a bundle at ``out`` (atomically); the manifest goes first."""
    written = _Written()
    sweep_partials(out)
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    try:
        files = members_of(root)
        raw = sum(path.lstat().st_size for path in files.values())
        with count_progress(f"hashing the bundle's {len(files)} members") as hashed:
            members, planned = _planned(files, written, hashed)
        written.members = len(members)
        written.manifest = {**header, "members": dict(sorted(members.items()))}
        payload = json.dumps(written.manifest, indent=1, sort_keys=True).encode()
        # xz -9: a 64 MiB window, so the repeats between CUTLASS copies are found; a small
        # bundle needs no window larger than itself (-6: 8 MiB, and far faster to set up).
        with tarfile.open(partial, "w:xz", format=tarfile.PAX_FORMAT,
                          preset=9 if raw > 8 << 20 else 6) as tar, \
                count_progress(f"compressing the bundle's {len(planned)} members (xz)"
                               ) as compressed:
            info_ = tarfile.TarInfo(f"{TOP}/{MANIFEST}")
            info_.size, info_.mode, info_.mtime = len(payload), 0o644, 0
            tar.addfile(info_, _BytesReader(payload))
            for count, (member, path) in enumerate(planned, 1):
                if path is None:
                    tar.addfile(member)
                else:
                    with path.open("rb") as data:
                        tar.addfile(member, data)
                compressed(count, len(planned))
        partial.replace(out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return written


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self._data, self._offset = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else self._offset + size
        chunk, self._offset = self._data[self._offset:end], min(end, len(self._data))
        return chunk
