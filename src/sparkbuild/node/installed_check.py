"""``sparkbuild verify --installed VENV``: does a venv still hold its wheelhouse, file for file?

Checked against what ``install`` recorded in the venv (:mod:`sparkbuild.wheelhouse.
fingerprint`):

* the recorded manifest still hashes to the recorded fingerprint;
* the same distributions, at the same versions, as right after the install (one added,
  removed or upgraded since is named), and every wheel of the manifest is installed;
* each distribution's RECORD is byte for byte the one the install wrote, and every file
  RECORD lists has RECORD's sha256 (a changed, truncated or deleted file is named);
* each of the wheelhouse's distributions says it was installed by pip or uv (its
  ``INSTALLER``), and of its dist-info only that installer's own files are not the wheel's
  (:data:`sparkbuild.node.installed.INSTALLER_FILES`: uv's ``uv_cache.json`` beside pip's,
  only where uv installed and only as uv writes it);
* the venv's own files, which no RECORD lists (:mod:`sparkbuild.node.venv_files`):
  ``pyvenv.cfg``, ``bin/python*``, ``bin/activate*``, sparkbuild's ``profile.sh`` and
  ``node.env`` against the manifest's profile, and the bytecode of every checked module;
* every file under site-packages and in ``bin/`` is one a RECORD lists (a ``.pth``, a
  ``sitecustomize.py`` dropped in beside is named), with or without the wheelhouse, and no
  symbolic link on the way to site-packages or in it, nor a linked ``bin/``, is followed;
* where the wheelhouse is at hand (``verify --installed VENV DIR``, or the local directory
  it was installed from), the wheelhouse is verified first (the same check as ``verify``
  and ``install``), then every member of each of its wheels must be installed with the
  same bytes (hashed in chunks), and every file under site-packages must be one a wheel of
  the wheelhouse put there (or the venv's own pip, as the install found it), even one its
  RECORD lists;
* an install into the venv that did not finish (its mark is still there) is named.

Two nodes that print the same fingerprint and pass this check run the same bits.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from packaging.utils import canonicalize_name

from sparkbuild.console import escaped
from sparkbuild.errors import SparkbuildError, VerifyError
from sparkbuild.node.fingerprint import Installation, fingerprint, read_installation
from sparkbuild.node.installed import (
    INSTALLING_MARK,
    Distribution,
    distributions,
    file_problem,
    installed_path,
    installer_files,
    installer_problems,
    layout_problems,
    read_record,
)
from sparkbuild.node.venv_files import (
    bytecode_findings,
    own_file_findings,
    own_files,
    pyc_source,
    walk_no_links,
)
from sparkbuild.records import Record, as_json
from sparkbuild.store.files import usable_path
from sparkbuild.store.hashing import sha256_file, sha256_stream
from sparkbuild.store.wheel_check import same_version
from sparkbuild.store.wheel_members import member_digest
from sparkbuild.wheelhouse.manifest import MANIFEST_NAME, stand_in_line, stand_ins_of
from sparkbuild.wheelhouse.verify import Mismatch, merged, verify_files


@dataclass
class InstalledCheckResult(Record):
    json_order: ClassVar[tuple[str, ...]] = ("venv", "fingerprint", "wheelhouse", "ok", "stand_ins")

    venv: Path
    fingerprint: str
    origin: str = field(metadata=as_json("wheelhouse"))
    distributions: int = 0
    files_checked: int = 0
    compared_with: str | None = field(default=None, metadata=as_json("compared_with_wheelhouse"))
    """The wheelhouse directory whose wheels' RECORDs were compared, if any."""
    mismatches: list[Mismatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    stand_ins: list[dict[str, str]] = field(default_factory=list)
    """Sources the installed wheelhouse's build took from another commit than the pin."""

    def json_extra(self) -> dict[str, Any]:
        return {"ok": self.error is None}

    def summary(self) -> list[str]:
        verdict = "OK" if self.error is None else "FAILED"
        lines = [f"verify --installed {self.venv}: {verdict} ({self.distributions} "
                 f"distributions, {self.files_checked} files re-hashed)",
                 f"wheelhouse fingerprint: {escaped(self.fingerprint)}"]
        lines += [f"  {escaped(stand_in_line(s))}" for s in self.stand_ins]
        lines += [m.line() for m in self.mismatches]
        return lines + [f"  note: {escaped(note)}" for note in self.notes]

    @property
    def error(self) -> SparkbuildError | None:
        if not self.mismatches:
            return None
        named = "; ".join(m.describe() for m in self.mismatches[:20])
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
        elif not same_version(dist.version, recorded.version):
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
        if recorded is None or not same_version(recorded.version, dist.version):
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


def _recorded_manifest(installation: Installation) -> dict[str, Any]:
    """The recorded manifest; {} when it does not parse (named by _check_manifest)."""
    try:
        return installation.manifest()
    except VerifyError:
        return {}


def _manifest_wheels(installation: Installation) -> list[dict[str, Any]]:
    wheels = _recorded_manifest(installation).get("wheels", [])
    return [w for w in wheels if isinstance(w, dict)] if isinstance(wheels, list) else []


def _check_manifest(result: InstalledCheckResult, installation: Installation,
                    current: dict[str, Distribution]) -> None:
    if fingerprint(installation.manifest_text.encode("utf-8")) != installation.fingerprint:
        result.mismatches.append(Mismatch(
            "sparkbuild-wheelhouse.json", "the recorded manifest does not hash to the "
            "recorded fingerprint"))
    for wheel in _manifest_wheels(installation):
        dist = current.get(canonicalize_name(str(wheel.get("name", ""))))
        if dist is None or not same_version(dist.version, str(wheel.get("version"))):
            result.mismatches.append(Mismatch(
                str(wheel.get("file")), "in the wheelhouse, not installed at its version"))
            continue
        result.mismatches += [Mismatch(_relative(result.venv, path), problem) for path, problem
                              in installer_problems(dist)]


def _file_digest(path: Path) -> bytes:
    with path.open("rb") as handle:
        return sha256_stream(handle).digest()


def _target(venv: Path, dist: Distribution, member: str) -> Path | None:
    """Where pip puts a wheel member (None: a script or header, which pip rewrites or
    moves: those are checked against the venv's RECORD only)."""
    head, _, rest = member.partition("/")
    if head.endswith(".data"):
        scheme, _, inner = rest.partition("/")
        base = {"purelib": dist.site_packages, "platlib": dist.site_packages,
                "data": venv}.get(scheme)
        if base is None or not inner:
            return None
        path = Path(os.path.normpath(base / inner))
    else:
        path = Path(os.path.normpath(dist.site_packages / member))
    return path if path.is_relative_to(venv) else None


def _compare_one_wheel(result: InstalledCheckResult, dist: Distribution, wheel: Path,
                       owned: set[Path]) -> None:
    """Each member of ``wheel`` against the file pip made of it, byte for byte (in chunks)."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            target = None if info.is_dir() else _target(result.venv, dist, info.filename)
            if target is None:
                continue
            owned.add(target)
            if target.parent == dist.dist_info and target.name == "RECORD":
                continue  # pip rewrites RECORD
            result.files_checked += 1
            if target.is_symlink() or not target.is_file():
                result.mismatches.append(Mismatch(_relative(result.venv, target),
                                                  f"in its wheel {wheel.name}, not installed"))
            elif _file_digest(target) != member_digest(archive, info):
                result.mismatches.append(Mismatch(
                    _relative(result.venv, target),
                    f"its bytes differ from its wheel {wheel.name}'s"))
    owned.update(installer_files(dist))


def _record_paths(dist: Distribution) -> set[Path]:
    """The files a distribution's RECORD lists, with RECORD and its installer's own files."""
    listed = {installed_path(dist, row) for row in read_record(dist)}
    return listed | installer_files(dist)


def _recorded_files(installation: Installation, current: dict[str, Distribution]
                    ) -> set[Path]:
    """Every file the RECORD of an installed distribution lists (each RECORD is checked
    against the install's by :func:`_check_files`)."""
    owned: set[Path] = set()
    for key, dist in current.items():
        if key in installation.dists:
            owned |= _record_paths(dist)
    return owned


def _check_added(result: InstalledCheckResult, installation: Installation,
                 current: dict[str, Distribution], owned: set[Path], unowned: str) -> None:
    """Every file under site-packages and in ``bin/`` is one ``owned`` holds, or one of the
    venv's own; each ``.pyc`` of an owned module goes to the bytecode check; a symbolic link
    is named, never followed.  ``unowned``: what a file outside ``owned`` is called."""
    venv = result.venv
    own = set(own_files(venv))
    bytecode = []
    roots = [*sorted({dist.site_packages for dist in current.values()}), venv / "bin"]
    for root in roots:
        if root.is_symlink() or not root.is_dir():
            continue
        for path in walk_no_links(root):
            source = pyc_source(path)
            if path in own:
                continue
            if path.is_symlink():
                result.mismatches.append(Mismatch(_relative(venv, path), f"a symbolic link (to "
                                                  f"{path.readlink()}): not followed"))
            elif source is not None and source[0] in owned:
                bytecode.append(path)
            elif path not in owned:
                result.mismatches.append(Mismatch(_relative(venv, path), unowned))
    result.mismatches += [Mismatch(file, problem) for file, problem
                          in bytecode_findings(venv, bytecode, installation.bytecode)]


def _compare_with_wheels(result: InstalledCheckResult, installation: Installation,
                         current: dict[str, Distribution], wheelhouse: Path
                         ) -> set[Path] | None:
    """The venv against the wheelhouse's wheels: the wheelhouse verified first, then every
    member of each wheel the same bytes as installed.  The files the wheels (and the
    venv's own pip, and each RECORD's scripts) put there; None when the wheelhouse could not
    be compared."""
    try:
        checked = verify_files(wheelhouse)
        error = checked.error(hint="")
    except VerifyError as exc:
        error = exc
    if error is not None:
        result.mismatches.append(Mismatch(str(wheelhouse), "the wheelhouse itself fails "
                                          f"verify: {error.what}"))
        return None
    actual = fingerprint(checked.manifest_bytes)
    if actual != installation.fingerprint:
        result.mismatches.append(Mismatch(
            str(wheelhouse / MANIFEST_NAME), f"this wheelhouse's fingerprint is {actual}, the "
            f"venv was installed from {installation.fingerprint}"))
        return None
    result.compared_with = str(wheelhouse)
    owned: set[Path] = set()
    from_wheels: set[str] = set()
    for wheel in checked.manifest["wheels"]:
        key = canonicalize_name(str(wheel.get("name", "")))
        dist = current.get(key)
        if dist is None or not same_version(dist.version, str(wheel.get("version"))):
            continue  # named by _check_manifest
        from_wheels.add(key)
        _compare_one_wheel(result, dist, wheelhouse / str(wheel["file"]), owned)
    for other, dist in current.items():
        if other not in from_wheels and other in installation.dists:  # the venv's own pip
            owned |= _record_paths(dist)
        elif other in from_wheels:  # scripts, which pip rewrites: RECORD vouches for them
            owned |= {path for path in _record_paths(dist) if path.parent == result.venv / "bin"}
    return owned


def verify_installed(venv: Path, wheelhouse: Path | None = None) -> InstalledCheckResult:
    """Check ``venv`` against what ``sparkbuild install`` recorded (see the module doc)."""
    venv = usable_path(venv, "the venv path").absolute()
    if wheelhouse is not None:
        usable_path(wheelhouse, "the wheelhouse path")
    installation = read_installation(venv)
    current = {dist.key: dist for dist in distributions(venv)}
    result = InstalledCheckResult(venv, installation.fingerprint, installation.origin,
                                  len(current))
    result.mismatches += [Mismatch(_relative(venv, path), problem)
                          for path, problem in layout_problems(venv)]
    if (venv / INSTALLING_MARK).exists():
        result.mismatches.append(Mismatch(INSTALLING_MARK, "an install into this venv did not "
                                          "finish (it was killed or failed): reinstall"))
    _check_manifest(result, installation, current)
    result.stand_ins = stand_ins_of(_recorded_manifest(installation))
    _check_sets(result, installation, current)
    _check_files(result, installation, current)
    _check_own_files(result, installation)
    owned = None
    local = wheelhouse or Path(installation.origin)
    if "://" not in installation.origin or wheelhouse is not None:
        if local.is_dir():
            owned = _compare_with_wheels(result, installation, current, local)
        else:
            result.notes.append(f"the wheelhouse {local} is not here: installed files were "
                                "checked against their RECORDs only")
    else:
        result.notes.append(f"installed from {installation.origin}: pass the wheelhouse "
                            "directory to also compare with its wheels")
    if owned is None:
        _check_added(result, installation, current, _recorded_files(installation, current),
                     "no RECORD lists this file")
    else:
        _check_added(result, installation, current, owned,
                     "no wheel of the wheelhouse has this file")
    result.mismatches = merged(result.mismatches)  # one entry per file, its problems joined
    if result.files_checked == 0:
        result.mismatches.append(Mismatch(str(venv), "no installed file was checked: no "
                                          "RECORD lists a hash"))
    return result


def _check_own_files(result: InstalledCheckResult, installation: Installation) -> None:
    """pyvenv.cfg, bin/python*, bin/activate* and the profile (sparkbuild.node.venv_files)."""
    try:
        manifest = installation.manifest()
    except VerifyError as exc:
        result.mismatches.append(Mismatch("sparkbuild-wheelhouse.json", exc.what))
        manifest = {}
    if installation.own_files is None:
        result.notes.append("the install recorded no digest of pyvenv.cfg, bin/ or the "
                            "profile (an older sparkbuild): they were checked for what they "
                            "must be, not against the install")
    result.mismatches += [Mismatch(file, problem) for file, problem in own_file_findings(
        result.venv, installation.own_files, installation.profile, manifest)]
