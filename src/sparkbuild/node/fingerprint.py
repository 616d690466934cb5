"""One fingerprint per fleet: the wheelhouse's identity, and what ``install`` recorded.

The fingerprint of a wheelhouse is the sha256 of its ``manifest.json`` (which names every
file of the wheelhouse by its own sha256), written ``sha256:<hex>``: ``install`` prints it
and ``verify --installed`` prints it again, so two nodes compare by one line.

``install`` records, in ``VENV/sparkbuild-wheelhouse.json``: the fingerprint, where the
wheelhouse came from, the manifest's exact text, and each installed distribution with the
sha256 of its RECORD file as installed -- what ``verify --installed`` checks against.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkbuild.errors import VerifyError
from sparkbuild.node.installed import distributions
from sparkbuild.store.files import write_text_atomic
from sparkbuild.store.hashing import sha256_file

if TYPE_CHECKING:
    from pathlib import Path

RECORD_NAME = "sparkbuild-wheelhouse.json"
RECORD_SCHEMA = 1


def fingerprint(manifest: bytes) -> str:
    """``sha256:<hex>`` of a wheelhouse's manifest.json bytes."""
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


@dataclass(frozen=True)
class InstalledDist:
    name: str
    version: str
    record: str
    """The RECORD file, relative to the venv."""
    record_sha256: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version, "record": self.record,
                "record_sha256": self.record_sha256}


@dataclass
class Installation:
    """What ``install`` wrote into the venv."""

    fingerprint: str
    origin: str
    manifest_text: str
    dists: dict[str, InstalledDist] = field(default_factory=dict)
    """By canonical project name."""

    def to_dict(self) -> dict[str, Any]:
        return {"schema": RECORD_SCHEMA, "fingerprint": self.fingerprint,
                "wheelhouse": self.origin,
                "distributions": {k: d.to_dict() for k, d in sorted(self.dists.items())},
                "manifest": self.manifest_text}


def snapshot(venv: Path) -> dict[str, InstalledDist]:
    """Every distribution of ``venv`` with the hash of its RECORD as it is now."""
    found = {}
    for dist in distributions(venv):
        record = dist.record
        digest = sha256_file(record, progress=False) if record.is_file() else ""
        found[dist.key] = InstalledDist(dist.name, dist.version,
                                        record.relative_to(venv).as_posix(), digest)
    return found


def record_installation(venv: Path, manifest: bytes, origin: str) -> Installation:
    """Write ``VENV/sparkbuild-wheelhouse.json`` after an install; returns what it says."""
    installation = Installation(fingerprint(manifest), origin, manifest.decode("utf-8"),
                                snapshot(venv))
    write_text_atomic(venv / RECORD_NAME, json.dumps(installation.to_dict(), indent=2) + "\n")
    return installation


def read_installation(venv: Path) -> Installation:
    path = venv / RECORD_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise VerifyError(f"the venv has no {RECORD_NAME}: it was not installed by "
                          "`sparkbuild install`", where=str(venv),
                          hint="install it with `sparkbuild install WHEELHOUSE --venv VENV`"
                          ) from exc
    except (OSError, ValueError) as exc:
        raise VerifyError(f"{RECORD_NAME} cannot be read: {exc}", where=str(path)) from exc
    try:
        dists = {key: InstalledDist(str(d["name"]), str(d["version"]), str(d["record"]),
                                    str(d["record_sha256"]))
                 for key, d in data["distributions"].items()}
        return Installation(str(data["fingerprint"]), str(data["wheelhouse"]),
                            str(data["manifest"]), dists)
    except (KeyError, TypeError, AttributeError) as exc:
        raise VerifyError(f"{RECORD_NAME} lacks {exc}", where=str(path)) from exc
