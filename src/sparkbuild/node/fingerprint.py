"""One fingerprint per fleet: the wheelhouse's identity, and what ``install`` recorded.

The fingerprint of a wheelhouse is the sha256 of what its ``manifest.json`` says (which
names every file of the wheelhouse by its own sha256), less the run's measures and the
build machine's plan (:func:`sparkbuild.wheelhouse.manifest.manifest_fingerprint`), written
``sha256:<hex>``: ``install`` prints it and ``verify --installed`` prints it again, so two
nodes compare by one line, and a wheelhouse joined from parts compares with one built in
one job.

``install`` records, in ``VENV/sparkbuild-wheelhouse.json``: the fingerprint, where the
wheelhouse came from, the manifest's exact text, each installed distribution with the
sha256 of its RECORD file as installed, the venv's own files and the bytecode of
site-packages (:mod:`sparkbuild.node.venv_files`), and the node profile as written -- what
``verify --installed`` checks against.  The record is read with a bound on its size, and a
record of the wrong shape is a named :class:`VerifyError`, never a traceback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from sparkbuild.errors import VerifyError
from sparkbuild.node.installed import distributions
from sparkbuild.node.venv_files import bytecode_digests, own_file_digests
from sparkbuild.records import Record, as_json
from sparkbuild.store.files import write_text_atomic
from sparkbuild.store.hashing import sha256_file
from sparkbuild.store.user_files import parse_json, read_user_file
from sparkbuild.wheelhouse.manifest import MANIFEST_LIMIT, manifest_fingerprint

if TYPE_CHECKING:
    from pathlib import Path

RECORD_NAME = "sparkbuild-wheelhouse.json"
RECORD_SCHEMA = 1
RECORD_LIMIT = 4 * MANIFEST_LIMIT
"""The largest install record read: the manifest's text and a line per file."""


def fingerprint(manifest: bytes) -> str:
    """``sha256:<hex>`` of a wheelhouse's manifest.json bytes, less the run's measures
    (:func:`sparkbuild.wheelhouse.manifest.manifest_fingerprint`)."""
    return manifest_fingerprint(manifest)


@dataclass(frozen=True)
class InstalledDist(Record):
    name: str
    version: str
    record: str
    """The RECORD file, relative to the venv."""
    record_sha256: str


def _sorted(dists: dict[str, InstalledDist]) -> dict[str, InstalledDist]:
    return dict(sorted(dists.items()))


@dataclass
class Installation(Record):
    """What ``install`` wrote into the venv."""

    json_order: ClassVar[tuple[str, ...]] = (
        "schema", "fingerprint", "wheelhouse", "distributions", "manifest",
    )

    fingerprint: str
    origin: str = field(metadata=as_json("wheelhouse"))
    manifest_text: str = field(metadata=as_json("manifest"))
    dists: dict[str, InstalledDist] = field(
        default_factory=dict, metadata=as_json("distributions", dump=_sorted))
    """By canonical project name."""
    own_files: dict[str, str] | None = None
    """pyvenv.cfg, bin/python*, bin/activate* and the profile files: path -> digest
    (None: a record of a sparkbuild that recorded none)."""
    bytecode: dict[str, str] | None = None
    """Every ``.pyc`` under site-packages: path -> digest."""
    profile: list[dict[str, str]] | None = None
    """The node profile as written (the entries resolved on the node)."""

    def json_extra(self) -> dict[str, Any]:
        return {"schema": RECORD_SCHEMA}

    def manifest(self) -> dict[str, Any]:
        """The recorded manifest, parsed; :class:`VerifyError` when it is not an object."""
        try:
            data = parse_json(self.manifest_text)
        except ValueError as exc:
            raise VerifyError(f"{RECORD_NAME}: its manifest is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise VerifyError(f"{RECORD_NAME}: its manifest is not a JSON object")
        return data


def snapshot(venv: Path) -> dict[str, InstalledDist]:
    """Every distribution of ``venv`` with the hash of its RECORD as it is now."""
    found = {}
    for dist in distributions(venv):
        record = dist.record
        digest = sha256_file(record, progress=False) if record.is_file() else ""
        found[dist.key] = InstalledDist(dist.name, dist.version,
                                        record.relative_to(venv).as_posix(), digest)
    return found


def record_installation(venv: Path, manifest: bytes, origin: str,
                        profile: list[dict[str, str]] | None = None) -> Installation:
    """Write ``VENV/sparkbuild-wheelhouse.json`` after an install (``profile``: the entries
    written into the venv); returns what it says."""
    installation = Installation(fingerprint(manifest), origin, manifest.decode("utf-8"),
                                snapshot(venv), own_file_digests(venv), bytecode_digests(venv),
                                profile)
    write_text_atomic(venv / RECORD_NAME, json.dumps(installation.to_dict(), indent=2) + "\n")
    return installation


def read_installation(venv: Path) -> Installation:
    """What ``install`` recorded in ``venv``; :class:`VerifyError` naming what is wrong."""
    path = venv / RECORD_NAME
    reinstall = "reinstall: `sparkbuild install WHEELHOUSE --venv VENV`"
    try:
        raw = read_user_file(path, RECORD_NAME, RECORD_LIMIT, error=VerifyError,
                             hint=reinstall)
    except VerifyError as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            raise VerifyError(f"the venv has no {RECORD_NAME}: it was not installed by "
                              "`sparkbuild install`", where=str(venv),
                              hint="install it with `sparkbuild install WHEELHOUSE --venv "
                              "VENV`") from exc
        raise
    try:
        data = parse_json(raw.decode("utf-8"))
    except ValueError as exc:
        raise VerifyError(f"{RECORD_NAME} cannot be read: {exc}", where=str(path)) from exc
    try:
        return _parsed(data)
    except (KeyError, TypeError) as exc:
        why = f"it lacks {exc}" if isinstance(exc, KeyError) else str(exc)
        raise VerifyError(f"{RECORD_NAME} is not an install record: {why}", where=str(path),
                          hint="reinstall: `sparkbuild install WHEELHOUSE --venv VENV`") from exc


def _text(data: dict[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} is {type(value).__name__}, not a string")
    return value


def _texts(data: dict[str, Any], key: str) -> dict[str, str] | None:
    value = data.get(key)
    if value is not None and not (isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
        raise TypeError(f"{key} must map paths to digests")
    return value


def _parsed(data: object) -> Installation:
    if not isinstance(data, dict):
        raise TypeError(f"a JSON {type(data).__name__}, not an object")
    listed = data["distributions"]
    if not isinstance(listed, dict) or not all(isinstance(d, dict) for d in listed.values()):
        raise TypeError("distributions must map names to objects")
    dists = {str(key): InstalledDist(*(_text(d, k) for k in ("name", "version", "record",
                                                               "record_sha256")))
             for key, d in listed.items()}
    profile = data.get("profile")
    if profile is not None and not (isinstance(profile, list) and all(
            isinstance(e, dict) and isinstance(e.get("key"), str)
            and isinstance(e.get("value"), str) for e in profile)):
        raise TypeError("profile must be a list of entries with a key and a value")
    return Installation(_text(data, "fingerprint"), _text(data, "wheelhouse"),
                        _text(data, "manifest"), dists, _texts(data, "own_files"),
                        _texts(data, "bytecode"), profile)
