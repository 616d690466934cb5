"""The wheelhouse in the standards' words: ``pylock.toml`` and ``sbom.cdx.json``, written
beside ``requirements.lock`` and checked against the wheelhouse's files by ``verify``.

``wheel`` writes both (:func:`write_standards`) before the manifest, which vouches for
their bytes; ``verify`` re-reads both (:func:`check_standards`) and says, per file, whether
it agrees with the wheels present: the same files, names, versions and sha256, (for
``pylock.toml``) the manifest's target as its environment, and (for ``sbom.cdx.json``)
the manifest's patches, source, toolchain and purls.  A wheelhouse whose manifest
does not list them (written before sparkbuild wrote them) gets a note, not a failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from sparkbuild.records import Record, as_json
from sparkbuild.wheelhouse.overrides import target_environment
from sparkbuild.wheelhouse.pylock import PYLOCK_NAME, PylockWheel, write_pylock
from sparkbuild.wheelhouse.sbom import (
    SBOM_NAME,
    BuildFacts,
    SbomWheel,
    sbom_disagreements,
    write_wheelhouse_sbom,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from sparkbuild.wheelhouse.closure import WheelhouseFile
    from sparkbuild.wheelhouse.lock import ClosureTarget

STANDARD_FILES = (PYLOCK_NAME, SBOM_NAME)


def write_standards(staging: Path, files: Sequence[WheelhouseFile], facts: BuildFacts,
                    target: ClosureTarget) -> dict[str, str]:
    """Write ``pylock.toml`` and ``sbom.cdx.json``; their relative paths -> sha256."""
    from sparkbuild.store.hashing import sha256_file

    env = target_environment(target.platform, target.python)
    wheels = [PylockWheel(f.name, f.version, f.file, f.size, f.sha256) for f in files]
    written = [
        write_pylock(staging, wheels, env=env, python=target.key()["python"],
                     package=facts.package),
        write_wheelhouse_sbom(staging, facts, [SbomWheel(f.name, f.version, f.role, f.file,
                                                         f.sha256) for f in files]),
    ]
    return {p.name: sha256_file(p, progress=False) for p in written}


def _problems(problems: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"file": f, "problem": p} for f, p in problems]


@dataclass
class Agreement(Record):
    """Whether one standard file agrees with the wheelhouse's files."""

    json_order: ClassVar[tuple[str, ...]] = ("file", "present", "agrees")

    file: str
    present: bool
    problems: list[tuple[str, str]] = field(default_factory=list, metadata=as_json(dump=_problems))

    @property
    def ok(self) -> bool:
        return not self.problems

    def json_extra(self) -> dict[str, Any]:
        return {"agrees": self.ok}

    def line(self) -> str:
        if not self.present:
            return f"  {self.file}: not in this wheelhouse (written before sparkbuild wrote it)"
        if self.ok:
            return f"  {self.file} agrees with the wheelhouse's files"
        return f"  {self.file} DISAGREES with the wheelhouse's files ({len(self.problems)})"


def present_wheels(actual: Mapping[str, str]) -> dict[str, tuple[str, str, str]]:
    """The wheels at the top of the wheelhouse: file -> (canonical name, version, sha256)."""
    found = {}
    for name, digest in actual.items():
        if "/" in name or not name.endswith(".whl"):
            continue
        try:
            project, version, _build, _tags = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue  # check_lock names it
        found[name] = (str(canonicalize_name(project)), str(version), digest)
    return found


def check_standards(directory: Path, manifest: Mapping[str, Any],
                    actual: Mapping[str, str]) -> list[Agreement]:
    """``pylock.toml`` and ``sbom.cdx.json`` against the wheels present in ``directory``."""
    from sparkbuild.wheelhouse.pylock import pylock_disagreements

    wheels = present_wheels(actual)
    listed = manifest.get("files", {})
    target = manifest.get("target", {})
    env = target_environment(target.get("platform"), target.get("python")) if target else None
    found = []
    for name in STANDARD_FILES:
        if name not in listed and not (directory / name).exists():
            found.append(Agreement(name, present=False))
            continue
        problems = (pylock_disagreements(directory, wheels, env) if name == PYLOCK_NAME
                    else sbom_disagreements(directory, wheels, manifest))
        found.append(Agreement(name, True, problems))
    return found
