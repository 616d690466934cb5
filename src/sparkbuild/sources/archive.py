"""Safe extraction of source archives: tar (plain, gzip, bzip2, xz) and zip.

The standard library reads the archives (:mod:`tarfile`, :mod:`zipfile`) and every member,
tar or zip, passes through :func:`tarfile.data_filter` (PEP 706).  On top of it this module
applies sparkbuild's own rules, which are stricter:

* a member name that is absolute or has a ``..`` component is refused, not rewritten
  (the data filter would strip a leading ``/``);
* a member that would be written *through* a symlink of the archive is refused; symlinks
  are created last, and each must point inside the destination, judged on its text and
  again on disk once every link exists (so a chain of links cannot lead out);
* a hardlink must name a regular file extracted earlier from the same archive;
* device files, fifos, sparse files and member types tar does not define are refused;
* file modes become 0644 or 0755; owners are never applied;
* a truncated or corrupt archive is an :class:`UnsafeArchiveError`: a bad header, short
  data, a broken compressed stream, and a missing end-of-archive marker (tarfile itself
  takes a truncated or unreadable header for the end of the archive).

On a Python whose tarfile has no data filter (before 3.11.4), nothing is extracted: a
:class:`ToolchainError` says to use a newer one.  The archive is hashed before anything is
written; on any error the destination (empty when extraction began) is emptied again.

A caller that knows what the archive must hold (a bundle's manifest, read first with
:func:`read_tar_member`) passes ``admit``: it sees each member (:class:`ArchiveMember`)
before a byte of it is written, and refuses the ones it does not expect.
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import gzip
import io
import lzma
import os
import platform
import shutil
import stat
import tarfile
import time
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

from sparkbuild.console import byte_progress
from sparkbuild.errors import (
    DestinationError,
    HashMismatchError,
    SourceError,
    ToolchainError,
    UnsafeArchiveError,
    disk_full_as_error,
)
from sparkbuild.store.hashing import sha256_bytes

if TYPE_CHECKING:
    from collections.abc import Iterator

BLOCK = 512
HINT = "the archive is broken or hostile; nothing of it was kept; get a good copy"
_CHUNK = 1 << 20
_REFUSED_TYPES = {
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a fifo",
    tarfile.GNUTYPE_SPARSE: "a GNU sparse file",
}
_VOLUME_LABEL = b"V"


def unsafe(what: str, origin: str) -> UnsafeArchiveError:
    """The error every refusal of an archive raises: ``what`` is wrong, in ``origin``."""
    return UnsafeArchiveError(what, where=origin, hint=HINT)


MemberKind = Literal["file", "dir", "symlink", "hardlink"]
"""What an archive member is, as extraction admits it."""


@dataclass(frozen=True)
class ArchiveMember:
    """A member about to be extracted: its clean name, what it is, its size, its link."""

    name: str
    kind: MemberKind
    size: int
    target: str | None = None
    """A link's target (a hardlink's, clean and relative to the destination)."""


MemberCheck = Callable[[ArchiveMember], None]
"""Called with each member before it is written; raises to refuse it."""


@dataclass(frozen=True)
class ExtractedArchive:
    """What one extraction wrote."""

    archive: Path
    sha256: str
    format: str
    """``tar``, ``tar.gz``, ``tar.bz2``, ``tar.xz`` or ``zip``."""
    entries: int
    size: int
    """Bytes of file data written."""
    top_level: tuple[str, ...]
    """Names directly under the destination (an sdist has exactly one directory)."""


# -- member names ------------------------------------------------------------------------


def clean_member_name(name: str, origin: str) -> str:
    """``name`` relative to the destination, or :class:`UnsafeArchiveError`.

    ``./`` and empty components are dropped; an absolute name or a ``..`` component is
    refused, even when it would land back inside (a well-made archive never has one).
    """
    if "\0" in name:
        raise unsafe(f"member name {name!r} contains a NUL byte", origin)
    if name.startswith("/"):
        raise unsafe(f"member {name!r} has an absolute path", origin)
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise unsafe(f"member {name!r} escapes the destination (a `..` component)", origin)
    return "/".join(parts)


def _link_escapes(name: str, target: str) -> bool:
    """True when symlink ``name`` -> ``target`` points outside, judged on the text."""
    if target.startswith("/"):
        return True
    depth = name.count("/")  # directories above the link inside the destination
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


def _data_filter(member: tarfile.TarInfo, root: str, origin: str) -> tarfile.TarInfo:
    """The standard library's ``data`` filter; its refusals in this module's words."""
    try:
        return tarfile.data_filter(member, root)
    except tarfile.FilterError as exc:
        name = member.name
        if isinstance(exc, tarfile.AbsolutePathError):
            what = f"member {name!r} has an absolute path"
        elif isinstance(exc, tarfile.OutsideDestinationError):
            what = f"member {name!r} escapes the destination"
        elif isinstance(exc, (tarfile.AbsoluteLinkError, tarfile.LinkOutsideDestinationError)):
            what = f"link {name!r} -> {member.linkname!r} points outside the tree"
        elif isinstance(exc, tarfile.SpecialFileError):
            what = f"member {name!r} is a special file; refused"
        else:
            what = f"member {name!r} refused by the data filter: {exc}"
        raise unsafe(what, origin) from None


# -- the tree being written ----------------------------------------------------------------


@dataclass
class _Tree:
    """What has been extracted under ``root`` so far, and the rules that depend on it."""

    root: str
    origin: str
    check: MemberCheck | None = None
    """The caller's own test of each member (``extract_archive``'s ``admit``)."""
    files: set[str] = field(default_factory=set)
    """Regular files (hardlinks included): what a later hardlink may name."""
    symlinks: dict[str, str] = field(default_factory=dict)
    """Recorded now, created by :meth:`finish`."""
    top_level: set[str] = field(default_factory=set)
    entries: int = 0
    size: int = 0

    def _not_through_symlink(self, name: str) -> None:
        parts = name.split("/")
        for end in range(1, len(parts)):
            parent = "/".join(parts[:end])
            if parent in self.symlinks:
                raise unsafe(
                    f"member {name!r} would be written through symlink {parent!r}", self.origin
                )

    def admit(self, raw_name: str) -> str:
        """The member's clean name; refused when it would be written through a symlink."""
        name = clean_member_name(raw_name, self.origin)
        if self.symlinks:
            self._not_through_symlink(name)
            self.symlinks.pop(name, None)  # a later member of the same name replaces it
        if name:
            self.entries += 1
            self.top_level.add(name.split("/", 1)[0])
        return name

    def make_room(self, name: str, *, parents: bool = True) -> Path:
        """The path for a new file or link: an earlier file of that name is removed first,
        never written through (it may be another member's hardlink)."""
        path = Path(self.root, name)
        if name in self.files:
            path.unlink()
            self.files.discard(name)
        if parents:
            path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def hardlink_target(self, name: str, target: str) -> str:
        try:
            clean = clean_member_name(target, self.origin)
        except UnsafeArchiveError:
            raise unsafe(
                f"hardlink {name!r} -> {target!r} points outside the tree", self.origin
            ) from None
        if clean not in self.files:
            raise unsafe(
                f"hardlink {name!r} -> {target!r} does not name a file extracted before it",
                self.origin,
            )
        return clean

    def hardlink(self, name: str, target: str) -> None:
        os.link(f"{self.root}/{target}", self.make_room(name), follow_symlinks=False)
        self.files.add(name)

    def symlink(self, name: str, target: str) -> None:
        if not name or not target or "\0" in target or _link_escapes(name, target):
            raise unsafe(f"symlink {name!r} -> {target!r} points outside the tree", self.origin)
        self.files.discard(name)
        self.symlinks[name] = target

    def finish(self) -> None:
        """Create the symlinks, then check on disk that no chain of them leads out.

        A link under a link recorded after it would be created through that one: refused.
        """
        for name in self.symlinks:
            self._not_through_symlink(name)
        for name, target in sorted(self.symlinks.items()):
            path = Path(self.root, name)
            if path.is_symlink() or path.is_file():
                path.unlink()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(target)
        real_root = os.path.realpath(self.root)
        for name, target in self.symlinks.items():
            real = os.path.realpath(f"{self.root}/{name}")
            if real != real_root and not real.startswith(real_root + os.sep):
                raise unsafe(
                    f"symlink {name!r} -> {target!r} resolves outside the tree "
                    "(through other links)",
                    self.origin,
                )


# -- tar -----------------------------------------------------------------------------------


def _tar_kind(member: tarfile.TarInfo, origin: str) -> MemberKind | None:
    """``file``, ``dir``, ``symlink`` or ``hardlink``; None for a volume label (no member)."""
    if member.type == _VOLUME_LABEL:
        return None
    if member.type in _REFUSED_TYPES:
        raise unsafe(f"member {member.name!r} is {_REFUSED_TYPES[member.type]}; refused", origin)
    if member.issparse():
        raise unsafe(f"member {member.name!r} is a sparse file; refused", origin)
    if member.isdir():
        return "dir"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    if member.isreg():
        return "file"
    raise unsafe(f"member {member.name!r} has an unknown type {member.type!r}; refused", origin)


def _tar_filter(tree: _Tree) -> Callable[[tarfile.TarInfo, str], tarfile.TarInfo | None]:
    """sparkbuild's rules, then the data filter; links are made here, files by tarfile."""

    def admit(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        kind = _tar_kind(member, tree.origin)
        if kind is None:
            return None
        name = tree.admit(member.name)
        if not name:
            if kind == "dir":
                return None  # the destination itself
            raise unsafe(f"a {kind} member names the destination itself", tree.origin)
        member = member.replace(name=name, deep=False)
        if kind == "file":
            member.mode = 0o755 if member.mode & 0o100 else 0o644
        elif kind == "hardlink":
            member.linkname = tree.hardlink_target(name, member.linkname)
        elif kind == "symlink":
            tree.symlink(name, member.linkname)
        checked = _data_filter(member, dest, tree.origin)
        if tree.check is not None:  # the caller's test, once the archive's rules passed
            tree.check(ArchiveMember(name, kind, member.size if kind == "file" else 0,
                                     member.linkname if kind in ("symlink", "hardlink")
                                     else None))
        if kind == "hardlink":
            tree.hardlink(name, checked.linkname)
            return None
        if kind == "symlink":
            return None
        if kind == "file":
            tree.make_room(name, parents=False)  # tarfile makes the parents
            tree.files.add(name)
            tree.size += member.size
        return checked

    return admit


class _ReadProgress(io.BytesIO):
    """The archive's bytes, telling a progress bar how far reading has come."""

    def __init__(self, data: bytes, advance: Callable[[int], None]) -> None:
        super().__init__(data)
        self._advance = advance
        self._reported = 0

    def read(self, size: int | None = -1, /) -> bytes:
        chunk = super().read(size)
        position = self.tell()
        if position > self._reported:
            self._advance(position - self._reported)
            self._reported = position
        return chunk


def _decompressed(raw: IO[bytes], compression: str) -> IO[bytes] | io.BufferedIOBase:
    if compression == "gz":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if compression == "bz2":
        return bz2.BZ2File(raw, mode="rb")
    if compression == "xz":
        return lzma.LZMAFile(raw, mode="rb")
    return raw


def _check_end(tar: tarfile.TarFile, origin: str) -> None:
    """tarfile ends at a truncated or unreadable header as at the end-of-archive marker:
    insist on the marker, then read the compressed stream to its end (its checksum)."""
    assert tar.fileobj is not None
    offset = tar.offset
    tar.fileobj.seek(offset)
    block = tar.fileobj.read(BLOCK)
    if len(block) < BLOCK:
        raise unsafe("truncated tar: it ends without an end-of-archive marker", origin)
    if block != bytes(BLOCK):
        try:
            tarfile.TarInfo.frombuf(block, tar.encoding or "utf-8", tar.errors or "strict")
            why = "a header tar cannot read"
        except tarfile.HeaderError as exc:
            why = str(exc)
        raise unsafe(f"corrupt tar header at byte {offset} ({why})", origin)
    while tar.fileobj.read(_CHUNK):
        pass


@contextlib.contextmanager
def _read_errors(origin: str) -> Iterator[None]:
    """What tarfile and the decompressors raise on a broken archive, as one error."""
    try:
        yield
    except EOFError:
        raise unsafe("truncated archive: the compressed stream ends early", origin) from None
    except tarfile.ReadError as exc:
        if "unexpected end of data" in str(exc):
            raise unsafe(
                "truncated archive: it ends in the middle of a member", origin
            ) from None
        raise unsafe(f"corrupt or truncated archive: {exc}", origin) from None
    except (zlib.error, lzma.LZMAError, tarfile.CompressionError) as exc:
        raise unsafe(f"corrupt or truncated archive: {exc}", origin) from None
    except OSError as exc:
        if exc.errno is not None:  # the destination's trouble, not the archive's
            raise
        raise unsafe(f"corrupt or truncated archive: {exc}", origin) from None  # bad gzip


def _extract_tar(raw: bytes, compression: str, tree: _Tree) -> None:
    label = f"extracting {Path(tree.origin).name}"
    with (
        byte_progress(label, len(raw)) as advance,
        _read_errors(tree.origin),
        _decompressed(_ReadProgress(raw, advance), compression) as stream,
        tarfile.TarFile(fileobj=stream, mode="r", errorlevel=2) as tar,
    ):
        tar.extractall(tree.root, filter=_tar_filter(tree))
        _check_end(tar, tree.origin)


# -- zip -----------------------------------------------------------------------------------


def _zip_mtime(info: zipfile.ZipInfo) -> float | None:
    try:
        return time.mktime((*info.date_time, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def _zip_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, tree: _Tree) -> None:
    """One zip member, through the same rules and the data filter as a tar member."""
    mode = info.external_attr >> 16
    name = tree.admit(info.filename)
    member = tarfile.TarInfo(name)
    if info.is_dir():
        member.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(mode):
        member.type = tarfile.SYMTYPE
        member.linkname = archive.read(info).decode("utf-8", "surrogateescape")
        tree.symlink(name, member.linkname)
    elif stat.S_IFMT(mode) not in (0, stat.S_IFREG):
        raise unsafe(f"member {info.filename!r} is a special file; refused", tree.origin)
    else:
        member.mode = 0o755 if mode & 0o100 else 0o644
    if not name:
        if member.isdir():
            return
        raise unsafe("a zip member names the destination itself", tree.origin)
    checked = _data_filter(member, tree.root, tree.origin)
    if tree.check is not None:  # the caller's test, once the archive's rules passed
        kind: MemberKind = ("dir" if member.isdir() else "symlink" if member.issym()
                            else "file")
        tree.check(ArchiveMember(name, kind, info.file_size if kind == "file" else 0,
                                 member.linkname or None))
    if checked.isdir():
        Path(tree.root, name).mkdir(parents=True, exist_ok=True)
    elif checked.isreg():
        path = tree.make_room(name)
        with archive.open(info) as source, path.open("xb") as out:
            shutil.copyfileobj(source, out, _CHUNK)
        path.chmod(checked.mode if checked.mode is not None else 0o644)
        mtime = _zip_mtime(info)
        if mtime is not None:
            os.utime(path, (mtime, mtime))
        tree.files.add(name)
        tree.size += info.file_size


def _extract_zip(raw: bytes, tree: _Tree) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            for info in archive.infolist():
                _zip_member(archive, info, tree)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as exc:
        raise unsafe(f"corrupt or truncated zip: {exc}", tree.origin) from None


# -- the entry point -----------------------------------------------------------------------


def _looks_like_tar(head: bytes) -> bool:
    """ustar magic, an empty archive, or a first header whose checksum is right."""
    if len(head) < BLOCK:
        return False
    if head[257:262] == b"ustar" or head[:BLOCK] == bytes(BLOCK):
        return True
    try:
        tarfile.TarInfo.frombuf(head[:BLOCK], "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True


def detect_format(head: bytes) -> str:
    """The archive format from its first bytes (a file name can lie)."""
    if head.startswith(b"\x1f\x8b"):
        return "tar.gz"
    if head.startswith(b"BZh"):
        return "tar.bz2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "tar.xz"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    return "tar" if _looks_like_tar(head) else "unknown"


def require_data_filter() -> None:
    """Refuse to extract anything with a tarfile that lacks the data filter (PEP 706)."""
    if not hasattr(tarfile, "data_filter"):
        raise ToolchainError(
            f"Python {platform.python_version()}'s tarfile has no data filter, so archives "
            "cannot be extracted safely; refusing to extract",
            hint="run sparkbuild with Python 3.11.4 or later (3.12 or later recommended)",
        )


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SourceError(f"cannot read archive: {exc.strerror}", where=str(path)) from exc


def _ready_destination(dest: Path) -> bool:
    """Make sure ``dest`` is an empty directory; True when this call created it."""
    try:
        created = not dest.exists()
        dest.mkdir(parents=True, exist_ok=True)
        with os.scandir(dest) as entries:
            empty = next(entries, None) is None
    except OSError as exc:
        raise DestinationError(f"cannot use directory: {exc.strerror}", where=str(dest)) from exc
    if not empty:
        raise DestinationError(
            "extraction needs an empty directory", where=str(dest), hint="use a new one"
        )
    return created


def _empty_again(dest: Path, created: bool) -> None:
    """Undo a failed extraction: ``dest`` was empty (or absent) when it began."""
    if created:
        shutil.rmtree(dest, ignore_errors=True)
        return
    for entry in list(dest.iterdir()):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


@contextlib.contextmanager
def _write_errors(dest: Path) -> Iterator[None]:
    """OS errors while writing become sparkbuild errors that say which kind of trouble."""
    try:
        with disk_full_as_error(
            "the disk filled up while extracting", where=dest, hint="free some space"
        ):
            yield
    except OSError as exc:
        where = str(exc.filename or dest)
        if exc.errno in (errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ELOOP):
            raise UnsafeArchiveError(
                f"archive members conflict with each other: {exc.strerror}", where=where, hint=HINT
            ) from exc
        raise DestinationError(f"cannot write: {exc.strerror}", where=where) from exc


def extract_archive(path: Path, dest: Path, *, sha256: str | None = None,
                    admit: MemberCheck | None = None) -> ExtractedArchive:
    """Extract ``path`` into the empty directory ``dest``, safely.

    The archive is hashed before anything is written: with ``sha256`` a mismatch is a
    :class:`HashMismatchError` and nothing is extracted.  ``admit`` sees each member that
    passed the rules before it is written, and may refuse it by raising.  On any error what
    was written is removed again (``dest`` is left empty, or absent if this call created it).
    """
    path = Path(path)
    origin = str(path)
    raw = _read(path)
    actual = sha256_bytes(raw)
    if sha256 is not None and actual != sha256.lower():
        raise HashMismatchError(
            f"sha256 mismatch: expected {sha256.lower()}, got {actual}",
            where=origin,
            hint="the file is not the one pinned; check the file or the #sha256= pin",
        )
    fmt = detect_format(raw[:BLOCK])
    if fmt == "unknown":
        raise unsafe("not a tar or zip archive (unknown format)", origin)
    require_data_filter()
    created = _ready_destination(dest)
    tree = _Tree(root=os.fspath(dest.absolute()), origin=origin, check=admit)
    try:
        with _write_errors(dest):
            if fmt == "zip":
                _extract_zip(raw, tree)
            else:
                _extract_tar(raw, fmt.partition(".")[2], tree)
            tree.finish()
    except BaseException:
        _empty_again(dest, created)
        raise
    return ExtractedArchive(
        path, actual, fmt, tree.entries, tree.size, tuple(sorted(tree.top_level))
    )


def read_tar_member(path: Path, name: str, *, limit: int) -> bytes | None:
    """The bytes of the regular member ``name`` of the tar archive ``path`` (any of tar's
    compressions), read before anything is extracted; None when it holds none.

    Reading stops at the member, so a member near the start costs nothing of the rest.  A
    member larger than ``limit`` bytes, or not a regular file, is an
    :class:`UnsafeArchiveError`, as is a broken archive (the whole of it is read, to its
    end-of-archive marker and its stream's end, when the member is not there).
    """
    origin = str(path)
    try:
        with path.open("rb") as raw:
            fmt = detect_format(raw.read(BLOCK))
            if fmt in ("zip", "unknown"):
                raise unsafe("not a tar archive", origin)
            raw.seek(0)
            with (
                _read_errors(origin),
                _decompressed(raw, fmt.partition(".")[2]) as stream,
                tarfile.TarFile(fileobj=stream, mode="r", errorlevel=2) as tar,
            ):
                for member in tar:
                    if clean_member_name(member.name, origin) != name:
                        continue
                    if not member.isreg():
                        raise unsafe(f"member {name!r} is not a regular file", origin)
                    if member.size > limit:
                        raise unsafe(f"member {name!r} is {member.size} bytes, more than the "
                                     f"{limit} it may be", origin)
                    data = tar.extractfile(member)
                    assert data is not None
                    return data.read()
                _check_end(tar, origin)
    except OSError as exc:
        raise SourceError(f"cannot read archive: {exc.strerror}", where=origin) from exc
    return None
