"""What a venv holds: its distributions, their RECORD files and the files those list.

Read from the files alone (no interpreter is started): ``VENV/lib/pythonX.Y/site-packages``
and every ``*.dist-info`` in it.  A RECORD row is ``path,sha256=<urlsafe base64>,size``;
rows without a hash (RECORD itself, ``.pyc`` files pip compiled) are listed but not checked
here (the bytecode is: :mod:`sparkbuild.node.venv_files`).  A symbolic link on the way to
site-packages is never followed: ``VENV/lib64`` may be the link to ``lib`` that venv makes,
any other is a :func:`layout_problems` finding, and so is a ``VENV/bin`` that is a link (its
scripts and interpreter links would be read from elsewhere, and a file added there missed).
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
from sparkbuild.store.user_files import parse_json, read_user_text

INSTALLING_MARK = "sparkbuild-install.incomplete"
"""In a venv while ``install`` works on it: still there, the install did not finish."""
INSTALLER_FILES = {
    "pip": ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json"),
    "uv": ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json", "uv_cache.json"),
}
"""What each installer sparkbuild runs writes into a dist-info that the wheel does not
carry, by the name it writes into ``INSTALLER``: pip's, and uv's (the pinned uv 0.13.9 adds
``uv_cache.json``, its record of where the wheel came from)."""
INSTALLERS = tuple(INSTALLER_FILES)
UV_CACHE_KEYS = frozenset({"timestamp", "commit", "tags", "env", "directories"})
"""The keys of the object uv writes into ``uv_cache.json``."""
SMALL_FILE = 64 << 10
"""The most of an installer's own file (``INSTALLER``, ``uv_cache.json``) that is read."""


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


def _site_candidates(venv: Path) -> list[Path]:
    """``VENV/lib*/python*/site-packages`` (a ``lib64`` that is venv's link to ``lib``
    left out: the same directories)."""
    found = []
    for lib in ("lib", "lib64"):
        base = venv / lib
        if lib == "lib64" and base.is_symlink() and str(base.readlink()) == "lib":
            continue
        found += sorted(base.glob("python*/site-packages"))
    return found


def layout_problems(venv: Path) -> list[tuple[Path, str]]:
    """Each symbolic link on the way to site-packages or for ``bin/`` (what would make a
    check read files that are not the venv's), named with its target."""
    found = []
    if (venv / "bin").is_symlink():
        found.append((venv / "bin", f"a symbolic link (to {(venv / 'bin').readlink()}): "
                                    "not followed"))
    for lib in ("lib", "lib64"):
        base = venv / lib
        if base.is_symlink() and not (lib == "lib64" and str(base.readlink()) == "lib"):
            found.append((base, f"a symbolic link (to {base.readlink()}): not followed"))
    for site in _site_candidates(venv):
        for path in (site.parent, site):
            if path.is_symlink():
                found.append((path, f"a symbolic link (to {path.readlink()}): not followed"))
    return found


METADATA_LIMIT = 16 << 20
RECORD_FILE_LIMIT = 256 << 20
"""The largest METADATA and RECORD read of an installed distribution."""


def site_packages_dirs(venv: Path) -> list[Path]:
    """``VENV/lib*/python*/site-packages``: each real directory reached through no symbolic
    link (:func:`layout_problems` names those)."""
    return [site for site in _site_candidates(venv)
            if site.is_dir() and not any(p.is_symlink() for p in (site, site.parent,
                                                                   site.parent.parent))]


def distributions(venv: Path) -> list[Distribution]:
    """Every distribution installed in ``venv`` (name and version from METADATA)."""
    dists = []
    for site in site_packages_dirs(venv):
        for info in sorted(site.glob("*.dist-info")):
            metadata = info / "METADATA"
            try:
                headers = HeaderParser().parsestr(read_user_text(
                    metadata, f"{info.name}/METADATA", METADATA_LIMIT, error=VerifyError))
            except VerifyError:
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
        text = read_user_text(dist.record, f"{dist.name}'s RECORD", RECORD_FILE_LIMIT,
                              error=VerifyError)
    except VerifyError as exc:
        raise VerifyError(f"{dist.name} has no readable RECORD: {exc.what}",
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


# -- what the installer itself wrote ------------------------------------------------------


def installer_of(dist: Distribution) -> str | None:
    """What ``INSTALLER`` says installed ``dist`` (None: the file is absent or unreadable)."""
    path = dist.dist_info / "INSTALLER"
    if path.is_symlink() or not path.is_file():
        return None
    try:
        with path.open("rb") as stream:
            return stream.read(SMALL_FILE).decode("utf-8", "replace").strip()
    except OSError:
        return None


def installer_files(dist: Distribution) -> set[Path]:
    """The files of ``dist``'s dist-info that its installer wrote (by ``INSTALLER``; an
    installer sparkbuild does not run is owned only its ``INSTALLER`` and ``RECORD``)."""
    names = INSTALLER_FILES.get(installer_of(dist) or "", ("INSTALLER", "RECORD"))
    return {dist.dist_info / name for name in names}


def installer_problems(dist: Distribution) -> list[tuple[Path, str]]:
    """How what installed ``dist`` is neither pip nor uv, and a ``uv_cache.json`` that is
    not the record uv writes.  (``INSTALLER`` is one of the files RECORD lists, and RECORD's
    hash is the install's: which installer it names cannot change unnoticed.)"""
    found: list[tuple[Path, str]] = []
    installer = installer_of(dist)
    where = dist.dist_info / "INSTALLER"
    if installer is None:
        return found  # no INSTALLER: nothing of an installer's is owned beside RECORD
    if installer not in INSTALLERS:
        found.append((where, f"says it was installed by {installer[:40]!r}, which sparkbuild "
                             "does not run"))
    cache = dist.dist_info / "uv_cache.json"
    if installer == "uv" and (cache.exists() or cache.is_symlink()) and not _uv_cache(cache):
        found.append((cache, "not the record uv writes (a JSON object of "
                             f"{', '.join(sorted(UV_CACHE_KEYS))})"))
    return found


def _uv_cache(path: Path) -> bool:
    """Whether ``path`` is the object uv writes into ``uv_cache.json``."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with path.open("rb") as stream:
            data = stream.read(SMALL_FILE + 1)
        value = parse_json(data.decode("utf-8")) if len(data) <= SMALL_FILE else None
    except (OSError, ValueError):
        return False
    return isinstance(value, dict) and set(value) == UV_CACHE_KEYS

