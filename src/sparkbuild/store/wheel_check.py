"""A wheel's inner structure, checked before anything trusts it: one check for ``verify``,
``install`` and ``wheel`` alike (through :func:`sparkbuild.wheelhouse.verify.verify_files`),
and for a prebuilt flashinfer jit-cache before anything compiles
(:mod:`sparkbuild.flashinfer.jit_cache`, which holds it to a built wheel's rules).

The wheelhouse's hashes say that a wheel is the file the manifest vouches for, not what is
inside it.  pip reads the zip directory, not RECORD: it installs the last of two entries
of one name, runs a ``.pth`` member at every start of the venv's interpreter, and puts a
console script named ``python3`` over the venv's interpreter.  Each wheel the manifest
lists is read here (the zip directory, RECORD, METADATA and ``entry_points.txt``; nothing is
extracted), and each of these is a named problem:

* two zip entries of one name;
* a member name that is absolute, climbs with ``..``, holds a backslash or an empty or
  ``.`` part, or a control or bidirectional character (a newline, U+202E);
* a symbolic link member;
* a member nothing can read: encrypted, or compressed by a method no installer has
  (:func:`sparkbuild.store.wheel_members.unreadable`);
* not exactly one ``.dist-info`` directory, or one, or METADATA's Name and Version, that
  is not the file name's project and version;
* a RECORD that omits a member, lists one the wheel lacks or lists one twice, or gives a
  member no sha256;
* a ``sitecustomize`` or ``usercustomize`` module (the interpreter runs it at every start);
* a script (``.data/scripts``) or a ``console_scripts``/``gui_scripts`` entry point whose
  name is not a plain file name or would replace the venv's interpreter, its ``activate``
  scripts or pip (``python``, ``python3``, ``python3.12``, ``activate``, ``pip``...; pip's
  own wheel may have pip);
* a ``.data`` directory of an unknown scheme, or a ``.data/data`` member that would land
  on the venv's interpreter or activate scripts, ``pyvenv.cfg``, site-packages or
  sparkbuild's own files.

A built wheel (the wheel sparkbuild wrote, as ``verify`` decides it from the files) is
held to more: every member's bytes are hashed (in chunks) against its RECORD row, and a
``.pth`` member is refused.  A pin or closure wheel is the package index's file byte for
byte (its sha256 pinned in the lock); setuptools' own ``distutils-precedence.pth`` is such
a file, so there a ``.pth`` is allowed, and ``verify --installed`` checks it against its
RECORD.

Also the manifest's ``wheels`` entries against the files (:func:`manifest_wheel_problems`):
a file listed twice, a project at two versions, a name or version the file name does not
carry.  Versions compare as PEP 440 normalizes them and names as PEP 503 does, here, in
``verify --installed`` and everywhere (:func:`same_version`).
"""

from __future__ import annotations

import configparser
import csv
import io
import re
import stat
import zipfile
from collections import Counter
from email.parser import HeaderParser
from typing import TYPE_CHECKING, Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from sparkbuild.console import shown, unsafe_characters
from sparkbuild.errors import VerifyError
from sparkbuild.store.hashing import record_form
from sparkbuild.store.wheel_members import (
    READ_ERRORS,
    member_hash,
    read_text_member,
    unreadable,
)

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping
    from pathlib import Path

SIGNATURES = ("RECORD.jws", "RECORD.p7s")
"""Files of a ``.dist-info`` that RECORD does not list (RECORD itself aside)."""
SCHEMES = frozenset({"purelib", "platlib", "headers", "scripts", "data"})
"""The install schemes a wheel's ``.data`` directory may hold (the wheel spec)."""
STARTUP_MODULES = frozenset({"sitecustomize", "usercustomize"})
"""Modules the interpreter imports at every start (:mod:`site`)."""
RESERVED_SCRIPTS = {
    re.compile(r"python[0-9.]*|pythonw"): None,
    re.compile(r"activate|activate\..+|Activate\.ps1|deactivate"): None,
    re.compile(r"pip[0-9.]*"): "pip",
}
"""Names in the venv's ``bin/`` a wheel's script may not take, and the one project that
may (None: none)."""
RESERVED_DATA = re.compile(r"(bin/(python[0-9.]*|activate.*|pip[0-9.]*)|pyvenv\.cfg"
                           r"|lib[0-9]*/python[^/]*/site-packages/.*|sparkbuild(/.*)?"
                           r"|sparkbuild-wheelhouse\.json)")
"""Where a ``.data/data`` member would replace the venv itself (paths from the venv)."""


# -- one comparison of names and versions ----------------------------------------------


def normal_version(version: str) -> str:
    """``version`` as PEP 440 normalizes it (as a wheel's file name spells it)."""
    try:
        return str(Version(version))
    except InvalidVersion:
        return version


def same_version(one: str | Version, other: str | Version) -> bool:
    """Whether two versions are one under PEP 440 (``1.0`` and ``1.0.0``, ``1.0+Local`` and
    ``1.0+local``); a spelling that is no version equals only itself."""
    try:
        return Version(str(one)) == Version(str(other))
    except InvalidVersion:
        return str(one) == str(other)


def same_project(one: str, other: str) -> bool:
    """Whether two project names are one under PEP 503 (``Foo_Bar`` and ``foo-bar``)."""
    return canonicalize_name(one) == canonicalize_name(other)


# -- member names -----------------------------------------------------------------------


def member_name_problem(name: str) -> str | None:
    """Why a wheel's member may not have this name; None when it may."""
    unsafe = unsafe_characters(name)
    if unsafe:
        return f"its name holds {', '.join(unsafe)} (a control or bidirectional character)"
    if name.startswith("/") or re.match(r"[A-Za-z]:", name):
        return "an absolute name: an installer would write outside the venv"
    if "\\" in name:
        return "a backslash in its name"
    parts = name.rstrip("/").split("/")
    if ".." in parts:
        return "its name climbs out with ..: an installer would write outside the venv"
    if any(part in ("", ".") for part in parts):
        return "an empty or . part in its name"
    return None


def script_name_problem(name: str, project: str) -> str | None:
    """Why ``project`` may not install a script of this name into ``bin/``."""
    problem = member_name_problem(name)
    if problem is not None or "/" in name or name.startswith("."):
        return "not a plain file name for bin/"
    for pattern, owner in RESERVED_SCRIPTS.items():
        if pattern.fullmatch(name) and (owner is None or not same_project(owner, project)):
            return "it would replace the venv's own bin/" + name
    return None


def _site_root_problem(inner: str, *, built: bool) -> str | None:
    """A member at the root of site-packages that runs at every interpreter start."""
    top = inner.split("/", 1)[0]
    if top.split(".", 1)[0] in STARTUP_MODULES:
        return "a module the interpreter imports at every start"
    if built and "/" not in inner and inner.endswith(".pth"):
        return "a .pth file: the interpreter runs it at every start"
    return None


def _data_problem(rest: str, project: str, *, built: bool) -> str | None:
    """A member of ``NAME.data/``: its scheme, and where it would land."""
    scheme, _, inner = rest.partition("/")
    if scheme not in SCHEMES or not inner:
        return f"an unknown .data scheme {shown(scheme)}"
    if scheme in ("purelib", "platlib"):
        return _site_root_problem(inner, built=built)
    if scheme == "scripts":
        return script_name_problem(inner, project)
    if scheme == "data" and RESERVED_DATA.fullmatch(inner):
        return f"it would replace the venv's own {shown(inner)}"
    return None


# -- the structure ------------------------------------------------------------------------


def _is_symlink(info: zipfile.ZipInfo) -> bool:
    return info.create_system == 3 and stat.S_ISLNK(info.external_attr >> 16)


def _record_rows(text: str) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """RECORD's rows by path (hash, size), and its problems (a row listed twice, a bad row)."""
    rows: dict[str, tuple[str, str]] = {}
    problems = []
    for number, fields in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not fields:
            continue
        if len(fields) != 3:
            problems.append(f"RECORD line {number} has {len(fields)} fields, not 3")
            continue
        path, digest, size = fields
        if path in rows:
            problems.append(f"RECORD lists {shown(path)} twice")
        rows[path] = (digest, size)
    return rows, problems


def _entry_points(archive: zipfile.ZipFile, name: str, where: str) -> dict[str, list[str]]:
    """The script names of ``entry_points.txt``'s console_scripts and gui_scripts."""
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # names keep their case
    parser.read_string(read_text_member(archive, name, where))
    return {section: list(parser[section]) for section in ("console_scripts", "gui_scripts")
            if parser.has_section(section)}


def _metadata_problems(archive: zipfile.ZipFile, dist_info: str, project: str,
                       version: str, where: str) -> list[str]:
    stem = dist_info.removesuffix(".dist-info")
    name_part, _, version_part = stem.partition("-")
    problems = []
    if not same_project(name_part, project) or not same_version(version_part, version):
        problems.append(f"its {shown(dist_info)} is not the file name's {project} {version}")
    try:
        headers = HeaderParser().parsestr(read_text_member(archive, f"{dist_info}/METADATA",
                                                           where))
    except KeyError:
        return [*problems, f"it has no {shown(dist_info)}/METADATA"]
    said = (str(headers.get("Name", "")), str(headers.get("Version", "")))
    if not same_project(said[0], project) or not same_version(said[1], version):
        problems.append(f"its METADATA says {shown(said[0])} {shown(said[1])}, the file name "
                        f"{project} {version}")
    return problems


def _record_problems(archive: zipfile.ZipFile, files: Mapping[str, zipfile.ZipInfo],
                     dist_info: str, where: str, *, built: bool) -> list[str]:
    """RECORD against the members, both ways; for a built wheel, each member's bytes too."""
    record = f"{dist_info}/RECORD"
    if record not in files:
        return [f"it has no {shown(record)}"]
    rows, problems = _record_rows(read_text_member(archive, record, where))
    unlisted = {record, *(f"{dist_info}/{name}" for name in SIGNATURES)}
    problems += [f"{shown(name)} is not listed in RECORD" for name in files
                 if name not in rows and name not in unlisted]
    problems += [f"RECORD lists {shown(path)}, which the wheel does not hold" for path in rows
                 if path not in files]
    for path, (digest, size) in rows.items():
        if path in unlisted or path not in files:
            continue
        if not digest.startswith("sha256="):
            problems.append(f"RECORD gives {shown(path)} no sha256")
        elif built and (record_form(member_hash(archive, files[path])) != digest
                        or size != str(files[path].file_size)):
            problems.append(f"{shown(path)} is not the file its RECORD row describes")
    return problems


def _member_problem(info: zipfile.ZipInfo, project: str, *, built: bool) -> str | None:
    name = info.filename
    problem = member_name_problem(name)
    if problem is None and _is_symlink(info):
        problem = "a symbolic link member"
    if problem is None:
        problem = unreadable(info)
    if problem is None and not info.is_dir():
        head, _, rest = name.partition("/")  # pip takes every top-level *.data as one
        problem = (_data_problem(rest, project, built=built) if head.endswith(".data")
                   else _site_root_problem(name, built=built))
    return problem


def wheel_problems(wheel: Path, *, built: bool, name: str | None = None) -> list[str]:
    """Every way ``wheel``'s inner structure is not one an installer may be given (see the
    module docstring); ``built``: a wheel sparkbuild built (its bytes against RECORD, no
    ``.pth``); ``name``: its file name, when ``wheel`` is a cache blob."""
    try:
        project, version, _build, _tags = parse_wheel_filename(name or wheel.name)
    except InvalidWheelFilename as exc:
        return [f"not a wheel file name: {exc}"]
    where = str(wheel)
    try:
        with zipfile.ZipFile(wheel) as archive:
            return _structure(archive, str(project), str(version), where, built=built)
    except (VerifyError, configparser.Error) as exc:
        return [f"its metadata cannot be read: {exc}"]
    except READ_ERRORS as exc:
        return [f"not a readable wheel: {exc}"]


def _structure(archive: zipfile.ZipFile, project: str, version: str, where: str, *,
               built: bool) -> list[str]:
    infos = archive.infolist()
    counts = Counter(info.filename for info in infos)
    problems = [f"{count} zip entries are named {shown(name)}: an installer takes one, a "
                "check may read another" for name, count in counts.items() if count > 1]
    problems += [f"{shown(info.filename)}: {problem}" for info in infos
                 if (problem := _member_problem(info, project, built=built)) is not None]
    files = {info.filename: info for info in infos if not info.is_dir()}
    tops = sorted({name.split("/", 1)[0] for name in files if "/" in name})
    dist_infos = [top for top in tops if top.endswith(".dist-info")]
    if len(dist_infos) != 1:
        problems.append(f"it holds {len(dist_infos)} .dist-info directories, not one")
    if problems:  # a wheel whose names are not safe is not read on
        return problems
    dist_info = dist_infos[0]
    problems += _metadata_problems(archive, dist_info, project, version, where)
    problems += _record_problems(archive, files, dist_info, where, built=built)
    points = f"{dist_info}/entry_points.txt"
    if points in files:
        for section, names in _entry_points(archive, points, where).items():
            problems += [f"{section} entry point {shown(name)}: {problem}" for name in names
                         if (problem := script_name_problem(name, project)) is not None]
    return problems


# -- the manifest's wheels against the files ----------------------------------------------


def manifest_wheel_problems(directory: Path, manifest: Mapping[str, Any],
                            verified: Collection[str], built: Collection[str] | None = None
                            ) -> list[tuple[str, str]]:
    """(file, problem) for each ``wheels`` entry of the manifest that its file belies, and
    each structure problem of the wheels in ``verified`` (present, with the manifest's
    sha256); ``built``: the wheels held to a built wheel's rules, as the files decide them
    (:mod:`sparkbuild.wheelhouse.wheel_roles`; None: those the manifest calls built)."""
    entries = [w for w in manifest["wheels"] if isinstance(w, dict)]
    listed = Counter(str(w["file"]) for w in entries)
    problems = [(file, f"listed {count} times in manifest.json's wheels")
                for file, count in listed.items() if count > 1]
    versions: dict[str, set[str]] = {}
    for entry in entries:
        file = str(entry["file"])
        try:
            project, version, _build, _tags = parse_wheel_filename(file)
        except InvalidWheelFilename:
            continue  # check_lock names it
        versions.setdefault(str(project), set()).add(str(version))
        name, said = entry.get("name"), entry.get("version")
        if name is not None and not same_project(str(name), project):
            problems.append((file, f"manifest.json names it {shown(str(name))}, the file is "
                                   f"{project}"))
        if said is not None and not same_version(str(said), version):
            problems.append((file, f"manifest.json says version {shown(str(said))}, the file "
                                   f"is version {version}"))
    problems += [("manifest.json", f"lists {project} at {len(found)} versions: "
                                   f"{', '.join(sorted(found))}")
                 for project, found in sorted(versions.items()) if len(found) > 1]
    for file in sorted(set(listed) & set(verified)):
        strict = (file in built if built is not None else
                  any(w.get("role") == "built" for w in entries if str(w["file"]) == file))
        problems += [(file, problem) for problem in wheel_problems(directory / file,
                                                                   built=strict)]
    return problems

