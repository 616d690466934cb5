"""Deterministic wheels: the same inputs give the same bytes, whatever the backend did.

A build backend writes zip entries in its own order, with the build's clock and the
umask's permissions, so two builds of one commit differ byte for byte.  We rewrite every
built wheel: entries sorted (``.dist-info`` last, ``RECORD`` at the very end), one fixed
timestamp (``SOURCE_DATE_EPOCH``), permissions 0644 or 0755, a fixed compression level,
and ``RECORD`` regenerated.  The same pass gives the version a local label naming the
patch set (``0.33.0+sm121.<series hash>``), so a patched wheel can never be mistaken for
the index's.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import time
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from sparkbuild.errors import UnsafeArchiveError, VerifyError
from sparkbuild.recipe import ZIP_FIRST_EPOCH, ZIP_LAST_EPOCH, check_source_date_epoch
from sparkbuild.store.files import replacing
from sparkbuild.store.hashing import CHUNK, record_form, sha256_file

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    ExtraFiles = Callable[[str, str], Mapping[str, bytes]]
    """(project name, new version) -> files to add under the new ``.dist-info`` (relative
    path -> bytes), such as the SBOM PEP 770 puts in ``sboms/``."""

DEFAULT_EPOCH = ZIP_FIRST_EPOCH
"""1980-01-01 00:00:00 UTC: the earliest time a zip entry can hold."""
MAX_EPOCH = ZIP_LAST_EPOCH
APPLIED_STATUSES = ("applied", "already-applied")
_SIGNATURES = ("RECORD.jws", "RECORD.p7s")
_COMPRESSLEVEL = 6


@dataclass(frozen=True)
class WheelName:
    """The parts of a wheel's file name (PEP 427)."""

    distribution: str
    version: str
    build: str | None
    tags: str

    @classmethod
    def parse(cls, filename: str) -> WheelName:
        parts = filename.removesuffix(".whl").split("-")
        if not filename.endswith(".whl") or len(parts) not in (5, 6):
            raise VerifyError(f"not a wheel file name: {filename}")
        build = parts[2] if len(parts) == 6 else None
        return cls(parts[0], parts[1], build, "-".join(parts[-3:]))

    @property
    def filename(self) -> str:
        build = f"-{self.build}" if self.build else ""
        return f"{self.distribution}-{self.version}{build}-{self.tags}.whl"


@dataclass(frozen=True)
class NormalizedWheel:
    path: Path
    name: str
    """The project name as METADATA spells it."""
    version: str
    sha256: str
    size: int


# -- the label -------------------------------------------------------------------------


def series_hash(patches: Sequence[Mapping[str, Any]]) -> str:
    """A short hash of the patches that made the tree: their names and file hashes."""
    lines = [f"{p['name']} {p['sha256']}\n" for p in patches if p.get("status") in APPLIED_STATUSES]
    return hashlib.sha256("".join(lines).encode()).hexdigest()[:8]


def local_label(cuda_archs: Sequence[str], patches: Sequence[Mapping[str, Any]]) -> str:
    """``sm121.<series hash>``: the target archs and the patch set, as a PEP 440 local label."""
    archs = ".".join("sm" + arch.replace(".", "").lower() for arch in cuda_archs)
    return f"{archs}.{series_hash(patches)}" if archs else series_hash(patches)


def relabel_version(version: str, label: str | None) -> str:
    """``version`` with ``label`` appended to its local part, normalized (PEP 440)."""
    try:
        parsed = Version(version)
    except InvalidVersion as exc:
        raise VerifyError(f"the wheel's version {version!r} is not a PEP 440 version") from exc
    if not label:
        return str(parsed)
    local = parsed.local
    if local is not None and (local == label or local.endswith("." + label)):
        return str(parsed)
    return str(Version(f"{parsed.public}+{local + '.' if local else ''}{label}"))


def source_date_epoch(source: Mapping[str, Any] | None = None) -> int:
    """$SOURCE_DATE_EPOCH (a value out of a zip's range is refused: ``wheel`` checks it
    before the build), else the source's commit time when known, else 1980."""
    given = check_source_date_epoch(os.environ.get("SOURCE_DATE_EPOCH"))
    if given is not None:
        return given
    for key in ("source_date_epoch", "commit_time"):
        value = (source or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return min(max(value, DEFAULT_EPOCH), MAX_EPOCH)
    return DEFAULT_EPOCH


# -- reading ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """One file of a wheel, as its zip directory lists it (its bytes stay in the zip)."""

    info: zipfile.ZipInfo
    executable: bool

    @property
    def name(self) -> str:
        return self.info.filename


def _checked_name(name: str, wheel: Path) -> str:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name:
        raise UnsafeArchiveError(f"wheel entry escapes the install tree: {name}", where=str(wheel))
    return name


def list_members(archive: zipfile.ZipFile, wheel: Path) -> list[Member]:
    """The wheel's files (directories dropped), with their executable bit; nothing is read."""
    members: dict[str, Member] = {}
    for info in archive.infolist():
        if info.is_dir():
            continue
        name = _checked_name(info.filename, wheel)
        if name in members:
            raise UnsafeArchiveError(f"duplicate wheel entry {name}", where=str(wheel))
        mode = (info.external_attr >> 16) & 0o777
        members[name] = Member(info, bool(mode & 0o111))
    return list(members.values())


def read_chunks(archive: zipfile.ZipFile, info: zipfile.ZipInfo, wheel: Path) -> Iterator[bytes]:
    """The member's bytes, one chunk at a time; a damaged member is a :class:`VerifyError`."""
    try:
        with archive.open(info) as stream:
            yield from iter(lambda: stream.read(CHUNK), b"")
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
        raise VerifyError(f"cannot read wheel entry {info.filename}: {exc}",
                          where=str(wheel)) from exc


def read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, wheel: Path) -> bytes:
    """A small member's bytes (METADATA, RECORD)."""
    return b"".join(read_chunks(archive, info, wheel))


def dist_info_dir(names: Iterable[str], wheel: Path) -> str:
    """The one top-level ``*.dist-info`` directory holding METADATA."""
    found = {
        name.split("/", 1)[0]
        for name in names
        if name.count("/") == 1 and name.endswith(".dist-info/METADATA")
    }
    if len(found) != 1:
        raise VerifyError(
            f"a wheel needs exactly one .dist-info directory with METADATA, found {len(found)}",
            where=str(wheel),
        )
    return found.pop()


def record_digest(data: bytes) -> str:
    """The hash form RECORD uses: urlsafe base64 without padding."""
    return record_form(hashlib.sha256(data))


def recorded_hashes(record: bytes) -> dict[str, str]:
    """RECORD's ``sha256=`` hashes by entry name (rows without one are left out)."""
    hashes = {}
    for row in csv.reader(io.StringIO(record.decode("utf-8"))):
        if len(row) >= 2 and row[1].startswith("sha256="):
            hashes[row[0]] = row[1]
    return hashes


def check_recorded(name: str, actual: str, recorded: Mapping[str, str], wheel: Path) -> None:
    """Refuse a wheel whose RECORD disagrees with its own bytes: it was damaged."""
    expected = recorded.get(name)
    if expected is not None and expected != actual:
        raise VerifyError(f"wheel entry {name} does not match its RECORD hash", where=str(wheel))


def metadata_field(metadata: bytes, field: str) -> str | None:
    """One header field of a METADATA file (the first occurrence)."""
    for line in metadata.decode("utf-8").splitlines():
        if not line.strip():
            return None
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == field.lower():
            return value.strip()
    return None


# -- rewriting -------------------------------------------------------------------------


def _set_version(head: str, version: str) -> str:
    head, count = re.subn(r"(?m)^Version:[^\n]*$", f"Version: {version}", head, count=1)
    if count != 1:
        raise VerifyError("the wheel's METADATA has no Version field")
    return head


def rewrite_metadata(metadata: bytes, version: str) -> bytes:
    """METADATA with the new version; every other line as the build wrote it (a recipe pin
    that contradicts a requirement is recorded as an override, never written in)."""
    head, sep, body = metadata.decode("utf-8").partition("\n\n")
    return (_set_version(head, version) + sep + body).encode("utf-8")


def _renamed(name: str, old_prefix: str, new_prefix: str) -> str:
    for suffix in (".dist-info/", ".data/"):
        if name.startswith(old_prefix + suffix):
            return new_prefix + name[len(old_prefix):]
    return name


def _sort_key(name: str) -> tuple[int, str]:
    """Package files first, then .dist-info, RECORD last (as the wheel spec suggests)."""
    top = name.split("/", 1)[0]
    if name.endswith(".dist-info/RECORD") and name.count("/") == 1:
        return (2, name)
    return (1 if top.endswith(".dist-info") else 0, name)


def _zip_info(name: str, executable: bool, size: int,
              date_time: tuple[int, int, int, int, int, int]) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=date_time)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = 3  # Unix: the mode bits below are read
    mode = 0o755 if executable or ".data/scripts/" in name else 0o644
    info.external_attr = (0o100000 | mode) << 16
    info.file_size = size  # decides zip64 up front, as writestr() does
    # ZipFile.open(info, "w") takes the level from the ZipInfo (Python 3.13 renamed it)
    level = "compress_level" if hasattr(info, "compress_level") else "_compresslevel"
    setattr(info, level, _COMPRESSLEVEL)
    return info


class _RecordWriter:
    """Writes entries one at a time, streaming, and collects RECORD's rows as it goes."""

    def __init__(self, archive: zipfile.ZipFile, epoch: int) -> None:
        self.archive = archive
        self.date_time = time.gmtime(epoch)[:6]
        self.rows: list[tuple[str, str, str]] = []

    def add(self, name: str, chunks: Iterable[bytes], size: int, executable: bool) -> str:
        """Write one entry; return the sha256 of its bytes in RECORD's form."""
        digest = hashlib.sha256()
        written = 0
        info = _zip_info(name, executable, size, self.date_time)
        with self.archive.open(info, "w") as out:
            for chunk in chunks:
                digest.update(chunk)
                out.write(chunk)
                written += len(chunk)
        hashed = record_form(digest)
        self.rows.append((name, hashed, str(written)))
        return hashed

    def finish(self, record_name: str) -> None:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerows(self.rows)
        writer.writerow([record_name, "", ""])
        data = buffer.getvalue().encode("utf-8")
        self.add(record_name, [data], len(data), False)


def normalize_wheel(
    wheel: Path,
    out_dir: Path,
    *,
    label: str | None,
    epoch: int = DEFAULT_EPOCH,
    extra: ExtraFiles | None = None,
) -> NormalizedWheel:
    """Rewrite ``wheel`` into ``out_dir`` deterministically, relabelled with ``label``;
    ``extra`` adds files under its ``.dist-info`` (replacing the backend's of that name).

    The wheel is streamed: one entry at a
    time, read, hashed (against the old RECORD) and written, so a vLLM wheel of more than
    a gigabyte never sits in memory; RECORD is built on the way and written last.
    """
    try:
        source = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise VerifyError(f"cannot read wheel: {exc}", where=str(wheel)) from exc
    with source:
        members = list_members(source, wheel)
        dist_info = dist_info_dir((m.name for m in members), wheel)
        by_name = {m.name: m for m in members}
        record = by_name.get(f"{dist_info}/RECORD")
        recorded = recorded_hashes(read_member(source, record.info, wheel)) if record else {}
        metadata = by_name[f"{dist_info}/METADATA"]
        old_metadata = read_member(source, metadata.info, wheel)
        check_recorded(metadata.name, record_digest(old_metadata), recorded, wheel)
        old_version = metadata_field(old_metadata, "Version") or ""
        new_version = relabel_version(old_version, label)
        parsed = WheelName.parse(wheel.name)
        old_prefix = dist_info.removesuffix(".dist-info")
        new_prefix = f"{old_prefix.rsplit('-', 1)[0]}-{new_version}"
        new_dist_info = f"{new_prefix}.dist-info"
        new_metadata = rewrite_metadata(old_metadata, new_version)
        project = metadata_field(old_metadata, "Name") or parsed.distribution
        added = {f"{new_dist_info}/{path}": data
                 for path, data in (extra(project, new_version) if extra else {}).items()}
        dropped = {f"{new_dist_info}/{n}" for n in ("RECORD", *_SIGNATURES)}
        renamed = {m.name: _renamed(m.name, old_prefix, new_prefix) for m in members}
        for member in members:  # RECORD and signatures are not copied; still checked
            if renamed[member.name] in dropped and member.name in recorded:
                actual = record_digest(read_member(source, member.info, wheel))
                check_recorded(member.name, actual, recorded, wheel)
        kept = sorted((m for m in members if renamed[m.name] not in dropped | set(added)),
                      key=lambda m: _sort_key(renamed[m.name]))
        name = WheelName(parsed.distribution, new_version, parsed.build, parsed.tags)
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / name.filename
        with replacing(target) as partial, zipfile.ZipFile(partial, "w") as archive:
            writer = _RecordWriter(archive, epoch)
            for member in kept:
                if member is metadata:
                    writer.add(renamed[member.name], [new_metadata], len(new_metadata),
                               member.executable)
                    continue
                actual = writer.add(renamed[member.name],
                                    read_chunks(source, member.info, wheel),
                                    member.info.file_size, member.executable)
                check_recorded(member.name, actual, recorded, wheel)
            for added_name, data in sorted(added.items()):
                writer.add(added_name, [data], len(data), False)
            writer.finish(f"{new_dist_info}/RECORD")
    return NormalizedWheel(target, project, new_version, sha256_file(target, progress=False),
                           target.stat().st_size)
