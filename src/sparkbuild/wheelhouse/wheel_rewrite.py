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

import base64
import csv
import hashlib
import io
import os
import re
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from sparkbuild.errors import UnsafeArchiveError, VerifyError
from sparkbuild.store.files import replacing

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

DEFAULT_EPOCH = 315532800
"""1980-01-01 00:00:00 UTC: the earliest time a zip entry can hold."""
MAX_EPOCH = 4354819199
"""2107-12-31: the latest time a zip entry can hold."""
APPLIED_STATUSES = ("applied", "already-applied")
_SIGNATURES = ("RECORD.jws", "RECORD.p7s")
_COMPRESSLEVEL = 6


@dataclass(frozen=True)
class Entry:
    name: str
    data: bytes
    executable: bool


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
    replaced: tuple[str, ...] = ()
    """The wheel's requirements that a recipe pin replaced."""


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
    """$SOURCE_DATE_EPOCH, else the source's commit time when known, else 1980."""
    raw = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if raw:
        if not raw.isdigit():
            raise VerifyError(f"SOURCE_DATE_EPOCH must be whole seconds, not {raw!r}")
        return min(max(int(raw), DEFAULT_EPOCH), MAX_EPOCH)
    for key in ("source_date_epoch", "commit_time"):
        value = (source or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return min(max(value, DEFAULT_EPOCH), MAX_EPOCH)
    return DEFAULT_EPOCH


# -- reading ---------------------------------------------------------------------------


def _checked_name(name: str, wheel: Path) -> str:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name:
        raise UnsafeArchiveError(f"wheel entry escapes the install tree: {name}", where=str(wheel))
    return name


def read_entries(wheel: Path) -> list[Entry]:
    """The wheel's files (directories dropped), with their executable bit."""
    entries: dict[str, Entry] = {}
    try:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                if info.is_dir():
                    continue
                name = _checked_name(info.filename, wheel)
                if name in entries:
                    raise UnsafeArchiveError(f"duplicate wheel entry {name}", where=str(wheel))
                mode = (info.external_attr >> 16) & 0o777
                entries[name] = Entry(name, archive.read(info), bool(mode & 0o111))
    except (zipfile.BadZipFile, OSError) as exc:
        raise VerifyError(f"cannot read wheel: {exc}", where=str(wheel)) from exc
    return list(entries.values())


def dist_info_dir(entries: Sequence[Entry], wheel: Path) -> str:
    """The one top-level ``*.dist-info`` directory holding METADATA."""
    found = {
        e.name.split("/", 1)[0]
        for e in entries
        if e.name.count("/") == 1 and e.name.endswith(".dist-info/METADATA")
    }
    if len(found) != 1:
        raise VerifyError(
            f"a wheel needs exactly one .dist-info directory with METADATA, found {len(found)}",
            where=str(wheel),
        )
    return found.pop()


def record_digest(data: bytes) -> str:
    """The hash form RECORD uses: urlsafe base64 without padding."""
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def check_record(entries: Sequence[Entry], dist_info: str, wheel: Path) -> None:
    """Refuse a wheel whose RECORD disagrees with its own bytes: it was damaged."""
    by_name = {e.name: e for e in entries}
    record = by_name.get(f"{dist_info}/RECORD")
    if record is None:
        return
    for row in csv.reader(io.StringIO(record.data.decode("utf-8"))):
        if len(row) < 2 or not row[1] or row[0] not in by_name:
            continue
        if row[1].startswith("sha256=") and record_digest(by_name[row[0]].data) != row[1]:
            raise VerifyError(
                f"wheel entry {row[0]} does not match its RECORD hash", where=str(wheel)
            )


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


def _pin_requirement(line: str, pins: Mapping[str, str], replaced: list[str]) -> str:
    """A ``Requires-Dist`` line on a pinned project becomes the pin (its marker kept)."""
    key, _, value = line.partition(":")
    if key.strip().lower() != "requires-dist":
        return line
    try:
        requirement = Requirement(value.strip())
    except InvalidRequirement:
        return line
    pin = pins.get(canonicalize_name(requirement.name))
    if pin is None:
        return line
    pinned = Requirement(pin)
    pinned.extras, pinned.marker = requirement.extras, requirement.marker
    if pinned.specifier == requirement.specifier:
        return line
    replaced.append(value.strip())
    return f"Requires-Dist: {pinned}"


def rewrite_metadata(
    metadata: bytes, version: str, pins: Mapping[str, str]
) -> tuple[bytes, list[str]]:
    """METADATA with the new version and the recipe's pins; and the requirements replaced.

    The recipe's pins are the last word (flashinfer-python 0.6.18 where vLLM asks for
    another): without this, pip would refuse the wheelhouse as inconsistent.
    """
    head, sep, body = metadata.decode("utf-8").partition("\n\n")
    replaced: list[str] = []
    lines = [_pin_requirement(line, pins, replaced) for line in head.split("\n")]
    head = _set_version("\n".join(lines), version)
    return (head + sep + body).encode("utf-8"), replaced


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


def _with_record(entries: list[Entry], dist_info: str) -> list[Entry]:
    record_name = f"{dist_info}/RECORD"
    kept = [e for e in entries if e.name != record_name
            and e.name not in {f"{dist_info}/{s}" for s in _SIGNATURES}]
    kept.sort(key=lambda e: _sort_key(e.name))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for entry in kept:
        writer.writerow([entry.name, record_digest(entry.data), len(entry.data)])
    writer.writerow([record_name, "", ""])
    return [*kept, Entry(record_name, buffer.getvalue().encode("utf-8"), False)]


def _zip_info(entry: Entry, date_time: tuple[int, int, int, int, int, int]) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(entry.name, date_time=date_time)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = 3  # Unix: the mode bits below are read
    mode = 0o755 if entry.executable or ".data/scripts/" in entry.name else 0o644
    info.external_attr = (0o100000 | mode) << 16
    return info


def write_wheel(path: Path, entries: Sequence[Entry], epoch: int) -> None:
    """Write ``entries`` in order, atomically (temporary name, then rename)."""
    date_time = time.gmtime(epoch)[:6]
    with replacing(path) as partial, zipfile.ZipFile(partial, "w") as archive:
        for entry in entries:
            archive.writestr(_zip_info(entry, date_time), entry.data,
                             compresslevel=_COMPRESSLEVEL)


def normalize_wheel(
    wheel: Path,
    out_dir: Path,
    *,
    label: str | None,
    epoch: int = DEFAULT_EPOCH,
    pins: Mapping[str, str] | None = None,
) -> NormalizedWheel:
    """Rewrite ``wheel`` into ``out_dir`` deterministically, relabelled with ``label``.

    ``pins`` maps canonical project names to requirements (``name==version``) that replace
    the wheel's own requirement on that project.
    """
    entries = read_entries(wheel)
    dist_info = dist_info_dir(entries, wheel)
    check_record(entries, dist_info, wheel)
    metadata = next(e for e in entries if e.name == f"{dist_info}/METADATA")
    old_version = metadata_field(metadata.data, "Version") or ""
    new_version = relabel_version(old_version, label)
    parsed = WheelName.parse(wheel.name)
    old_prefix = dist_info.removesuffix(".dist-info")
    new_prefix = f"{old_prefix.rsplit('-', 1)[0]}-{new_version}"
    new_metadata, replaced = rewrite_metadata(metadata.data, new_version, pins or {})
    renamed = []
    for entry in entries:
        data = new_metadata if entry is metadata else entry.data
        renamed.append(Entry(_renamed(entry.name, old_prefix, new_prefix), data, entry.executable))
    final = _with_record(renamed, f"{new_prefix}.dist-info")
    name = WheelName(parsed.distribution, new_version, parsed.build, parsed.tags)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / name.filename
    write_wheel(target, final, epoch)
    data = target.read_bytes()
    project = metadata_field(metadata.data, "Name") or parsed.distribution
    return NormalizedWheel(target, project, new_version, hashlib.sha256(data).hexdigest(),
                           len(data), tuple(replaced))
