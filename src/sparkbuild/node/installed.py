"""What a venv holds: its distributions, their RECORD files and the files those list.

Read from the files alone (no interpreter is started): ``VENV/lib/pythonX.Y/site-packages``
and every ``*.dist-info`` in it.  A RECORD row is ``path,sha256=<urlsafe base64>,size``;
rows without a hash (RECORD itself, ``.pyc`` files pip compiled) are listed but not checked.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from packaging.utils import canonicalize_name

from sparkbuild.errors import VerifyError
from sparkbuild.store.hashing import record_form, sha256_stream


@dataclass(frozen=True)
class RecordRow:
    path: str
    """As RECORD spells it: relative to site-packages (``../../../bin/x`` for scripts)."""
    digest: str | None
    """``sha256=...`` in RECORD's urlsafe base64, or None for an unhashed row."""
    size: int | None


@dataclass(frozen=True)
class Distribution:
    name: str
    version: str
    dist_info: Path
    site_packages: Path

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)

    @property
    def record(self) -> Path:
        return self.dist_info / "RECORD"


def site_packages_dirs(venv: Path) -> list[Path]:
    """``VENV/lib*/python*/site-packages``, each real directory once."""
    found: dict[Path, Path] = {}
    for lib in ("lib", "lib64"):
        for candidate in sorted((venv / lib).glob("python*/site-packages")):
            if candidate.is_dir():
                found.setdefault(candidate.resolve(), candidate)
    return list(found.values())


def distributions(venv: Path) -> list[Distribution]:
    """Every distribution installed in ``venv`` (name and version from METADATA)."""
    dists = []
    for site in site_packages_dirs(venv):
        for info in sorted(site.glob("*.dist-info")):
            metadata = info / "METADATA"
            try:
                headers = HeaderParser().parsestr(metadata.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                stem = info.name.removesuffix(".dist-info")
                name, _, version = stem.partition("-")
                dists.append(Distribution(name, version, info, site))
                continue
            dists.append(Distribution(str(headers.get("Name", "")),
                                      str(headers.get("Version", "")), info, site))
    return dists


def parse_record(text: str, where: str) -> list[RecordRow]:
    rows = []
    for number, fields in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not fields:
            continue
        if len(fields) != 3:
            raise VerifyError(f"RECORD line {number} has {len(fields)} fields, not 3",
                              where=where)
        path, digest, size = fields
        rows.append(RecordRow(path, digest or None, int(size) if size.isdigit() else None))
    return rows


def read_record(dist: Distribution) -> list[RecordRow]:
    try:
        text = dist.record.read_text(encoding="utf-8")
    except OSError as exc:
        raise VerifyError(f"{dist.name} has no readable RECORD: {exc.strerror}",
                          where=str(dist.record)) from exc
    return parse_record(text, str(dist.record))


def record_digest(data_path: Path) -> str:
    """``sha256=<urlsafe base64 without padding>``, as RECORD writes it."""
    with data_path.open("rb") as handle:
        return record_form(sha256_stream(handle))


def installed_path(dist: Distribution, row: RecordRow) -> Path:
    """Where a RECORD row's file lies (paths are relative to site-packages)."""
    return Path(os.path.normpath(dist.site_packages / row.path))


def file_problem(dist: Distribution, row: RecordRow) -> str | None:
    """Why the installed file of ``row`` is not the one RECORD vouches for; None if it is."""
    if row.digest is None:
        return None
    path = installed_path(dist, row)
    if not path.is_file():
        return "missing"
    algorithm = row.digest.partition("=")[0]
    if algorithm != "sha256":
        return f"RECORD uses {algorithm}, which sparkbuild does not check"
    actual = record_digest(path)
    if actual != row.digest:
        return f"its {actual} differs from RECORD's {row.digest}"
    return None
