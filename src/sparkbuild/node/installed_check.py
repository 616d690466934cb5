"""``sparkbuild verify --installed VENV``: does a venv still hold its wheelhouse, file for file?

Checked against what ``install`` recorded in the venv (:mod:`sparkbuild.wheelhouse.
fingerprint`):

* the recorded manifest still hashes to the recorded fingerprint;
* the same distributions, at the same versions, as right after the install (one added,
  removed or upgraded since is named), and every wheel of the manifest is installed;
* each distribution's RECORD is byte for byte the one the install wrote, and every file
  RECORD lists has RECORD's sha256 (a changed, truncated or deleted file is named);
* where the wheelhouse is at hand (``verify --installed VENV DIR``, or the local directory
  it was installed from), each installed file's hash is the one in its wheel's own RECORD.

Two nodes that print the same fingerprint and pass this check run the same bits.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from sparkbuild.errors import SparkbuildError, VerifyError
from sparkbuild.node.fingerprint import Installation, fingerprint, read_installation
from sparkbuild.node.installed import (
    Distribution,
    distributions,
    file_problem,
    installed_path,
    parse_record,
    read_record,
)
from sparkbuild.store.hashing import sha256_file
from sparkbuild.wheelhouse.manifest import MANIFEST_NAME
from sparkbuild.wheelhouse.verify import Mismatch


@dataclass
class InstalledCheckResult:
    venv: Path
    fingerprint: str
    origin: str
    distributions: int = 0
    files_checked: int = 0
    compared_with: str | None = None
    """The wheelhouse directory whose wheels' RECORDs were compared, if any."""
    mismatches: list[Mismatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"venv": str(self.venv), "fingerprint": self.fingerprint,
                "wheelhouse": self.origin, "ok": self.error is None,
                "distributions": self.distributions, "files_checked": self.files_checked,
                "compared_with_wheelhouse": self.compared_with,
                "mismatches": [m.to_dict() for m in self.mismatches], "notes": self.notes}

    def summary(self) -> list[str]:
        verdict = "OK" if self.error is None else "FAILED"
        lines = [f"verify --installed {self.venv}: {verdict} ({self.distributions} "
                 f"distributions, {self.files_checked} files re-hashed)",
                 f"wheelhouse fingerprint: {self.fingerprint}"]
        lines += [f"  MISMATCH {m.file}: {m.problem}" for m in self.mismatches]
        return lines + [f"  note: {note}" for note in self.notes]

    @property
    def error(self) -> SparkbuildError | None:
        if not self.mismatches:
            return None
        named = "; ".join(f"{m.file} ({m.problem})" for m in self.mismatches[:20])
        more = len(self.mismatches) - 20
        return VerifyError(
            f"{len(self.mismatches)} difference(s) from the installed wheelhouse: {named}"
            + (f"; and {more} more" if more > 0 else ""),
            where=str(self.venv),
            hint="reinstall: `sparkbuild install WHEELHOUSE --venv VENV` into a fresh venv")


def _relative(venv: Path, path: Path) -> str:
    try:
        return path.relative_to(venv).as_posix()
    except ValueError:
        return str(path)


def _check_sets(result: InstalledCheckResult, installation: Installation,
                current: dict[str, Distribution]) -> None:
    for key, recorded in sorted(installation.dists.items()):
        dist = current.get(key)
        if dist is None:
            result.mismatches.append(Mismatch(f"{recorded.name}=={recorded.version}",
                                              "uninstalled since the wheelhouse was installed"))
        elif dist.version != recorded.version:
            result.mismatches.append(Mismatch(
                _relative(result.venv, dist.dist_info),
                f"version {dist.version}, the install left {recorded.version}"))
    for key, dist in sorted(current.items()):
        if key not in installation.dists:
            result.mismatches.append(Mismatch(_relative(result.venv, dist.dist_info),
                                              "installed after the wheelhouse: not from it"))


def _check_files(result: InstalledCheckResult, installation: Installation,
                 current: dict[str, Distribution]) -> None:
    for key, dist in sorted(current.items()):
        recorded = installation.dists.get(key)
        if recorded is None or recorded.version != dist.version:
            continue
        record_hash = sha256_file(dist.record, progress=False) if dist.record.is_file() else ""
        if record_hash != recorded.record_sha256:
            result.mismatches.append(Mismatch(_relative(result.venv, dist.record),
                                              "RECORD changed since the install"))
        for row in read_record(dist):
            problem = file_problem(dist, row)
            result.files_checked += row.digest is not None
            if problem:
                result.mismatches.append(Mismatch(
                    _relative(result.venv, installed_path(dist, row)), problem))


def _manifest_wheels(installation: Installation) -> list[dict[str, Any]]:
    try:
        wheels = json.loads(installation.manifest_text).get("wheels", [])
    except ValueError:
        return []
    return [w for w in wheels if isinstance(w, dict)]


def _check_manifest(result: InstalledCheckResult, installation: Installation,
                    current: dict[str, Distribution]) -> None:
    if fingerprint(installation.manifest_text.encode("utf-8")) != installation.fingerprint:
        result.mismatches.append(Mismatch(
            "sparkbuild-wheelhouse.json", "the recorded manifest does not hash to the "
            "recorded fingerprint"))
    for wheel in _manifest_wheels(installation):
        dist = current.get(canonicalize_name(str(wheel.get("name", ""))))
        if dist is None or dist.version != str(wheel.get("version")):
            result.mismatches.append(Mismatch(
                str(wheel.get("file")), "in the wheelhouse, not installed at its version"))


def _compare_with_wheels(result: InstalledCheckResult, installation: Installation,
                         current: dict[str, Distribution], wheelhouse: Path) -> None:
    """Each installed file against the RECORD inside its wheel in the wheelhouse."""
    manifest = wheelhouse / MANIFEST_NAME
    actual = fingerprint(manifest.read_bytes()) if manifest.is_file() else None
    if actual != installation.fingerprint:
        result.mismatches.append(Mismatch(
            str(manifest), f"this wheelhouse's fingerprint is {actual or 'none'}, the venv "
            f"was installed from {installation.fingerprint}"))
        return
    result.compared_with = str(wheelhouse)
    for wheel in _manifest_wheels(installation):
        dist = current.get(canonicalize_name(str(wheel.get("name", ""))))
        path = wheelhouse / str(wheel.get("file"))
        if dist is None or not path.is_file():
            continue
        installed = {row.path: row for row in read_record(dist)}
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith(".dist-info/RECORD")
                     and n.count("/") == 1]
            rows = parse_record(archive.read(names[0]).decode("utf-8"),
                                f"{path}!RECORD") if names else []
        for row in rows:
            mine = installed.get(row.path)
            if row.digest is None or ".data/" in row.path or mine is None:
                continue  # scripts and data files move (and scripts are rewritten)
            if mine.digest != row.digest:
                result.mismatches.append(Mismatch(
                    _relative(result.venv, installed_path(dist, mine)),
                    f"RECORD says {mine.digest}, its wheel {path.name} says {row.digest}"))


def verify_installed(venv: Path, wheelhouse: Path | None = None) -> InstalledCheckResult:
    """Check ``venv`` against what ``sparkbuild install`` recorded (see the module doc)."""
    venv = venv.absolute()
    installation = read_installation(venv)
    current = {dist.key: dist for dist in distributions(venv)}
    result = InstalledCheckResult(venv, installation.fingerprint, installation.origin,
                                  len(current))
    _check_manifest(result, installation, current)
    _check_sets(result, installation, current)
    _check_files(result, installation, current)
    local = wheelhouse or Path(installation.origin)
    if "://" not in installation.origin or wheelhouse is not None:
        if local.is_dir():
            _compare_with_wheels(result, installation, current, local)
        else:
            result.notes.append(f"the wheelhouse {local} is not here: installed files were "
                                "checked against their RECORDs only")
    else:
        result.notes.append(f"installed from {installation.origin}: pass the wheelhouse "
                            "directory to also compare with its wheels")
    if result.files_checked == 0:
        result.mismatches.append(Mismatch(str(venv), "no installed file was checked: no "
                                          "RECORD lists a hash"))
    return result
