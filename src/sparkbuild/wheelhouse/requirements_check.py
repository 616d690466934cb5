"""Does the wheelhouse meet its own wheels' requirements, on the target?

For every wheel, every ``Requires-Dist`` that holds on the target (markers evaluated for
the manifest's platform and Python, e.g. ``manylinux_2_39_aarch64`` -> ``platform_machine
aarch64``, ``sys_platform linux``, ``python_version 3.12``; extras followed where another
wheel asks for them) must be met by the version the lock holds.  A requirement a recorded
override replaced is listed, not failed.  And the torch shipped must be the torch the built
wheels were compiled against (the manifest's ``toolchain.torch``): a C++ extension built
against one torch crashes with another.

``wheel`` runs the same check on the files it stages (:func:`settle_wheelhouse`), so a pin
that contradicts a requirement anywhere in the closure is refused there, naming both.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from email.parser import HeaderParser
from typing import TYPE_CHECKING, Any, ClassVar

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from sparkbuild.errors import VerifyError
from sparkbuild.records import Record, as_json
from sparkbuild.store.wheel_members import read_text_member
from sparkbuild.wheelhouse.overrides import (
    Demand,
    Override,
    allows,
    applies,
    settle,
    target_environment,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from sparkbuild.recipe import Pin


@dataclass(frozen=True)
class Dist:
    """One wheel's name, version and every ``Requires-Dist`` line (markers kept)."""

    file: str
    name: str
    version: str
    requires: tuple[str, ...]

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)


def read_dist(path: Path) -> Dist:
    """The metadata of the wheel at ``path`` (its ``*.dist-info/METADATA``)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist()
                     if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if not names:
                raise VerifyError("the wheel has no .dist-info/METADATA", where=str(path))
            text = read_text_member(archive, names[0], str(path))
    except (OSError, zipfile.BadZipFile) as exc:
        raise VerifyError(f"cannot read the wheel's metadata: {exc}", where=str(path)) from exc
    headers = HeaderParser().parsestr(text)
    return Dist(path.name, str(headers.get("Name", "")), str(headers.get("Version", "")),
                tuple(str(v) for v in headers.get_all("Requires-Dist") or []))


@dataclass(frozen=True)
class Unmet(Record):
    """A requirement of a shipped wheel that the shipped set does not meet."""

    json_order: ClassVar[tuple[str, ...]] = ("...", "file", "found")

    file: str
    demand: Demand = field(metadata=as_json(flatten=True))
    found: str | None
    """The version the wheelhouse holds of the required project; None: it has none."""

    @property
    def project(self) -> str:
        return canonicalize_name(Requirement(self.demand.requirement).name)

    def describe(self) -> str:
        name = Requirement(self.demand.requirement).name
        has = f"{name} {self.found}" if self.found else f"no {name}"
        return f"{self.demand.describe()}, but the wheelhouse has {has}"


def _parsed(dist: Dist) -> list[Requirement]:
    found = []
    for line in dist.requires:
        try:
            found.append(Requirement(line))
        except InvalidRequirement as exc:
            raise VerifyError(f"{dist.file} has a Requires-Dist that is not a requirement: "
                              f"{line!r} ({exc})", where=dist.file) from exc
    return found


def wheel_demands(dist: Dist) -> list[Demand]:
    """The wheel's requirements as demands (who asks, what for), extras included."""
    return [Demand(f"{dist.name} {dist.version}", str(r), dist.key) for r in _parsed(dist)]


def unmet_requirements(dists: Sequence[Dist], versions: Mapping[str, str],
                       env: dict[str, str]) -> list[Unmet]:
    """Every requirement of ``dists`` that holds on ``env`` and ``versions`` does not meet.

    ``versions``: canonical project name -> the version shipped.  A wheel's extra counts
    when another shipped wheel asks for it (``nvidia-cutlass-dsl[cu13]``).
    """
    parsed = {dist.key: (dist, _parsed(dist)) for dist in dists}
    extras: dict[str, set[str]] = {key: {""} for key in parsed}
    changed = True
    while changed:  # follow extras until no wheel is asked for a new one
        changed = False
        for key, (_dist, requirements) in parsed.items():
            for requirement in requirements:
                wanted = extras.setdefault(canonicalize_name(requirement.name), {""})
                if applies(requirement, env, extras[key]) and not requirement.extras <= wanted:
                    wanted |= requirement.extras
                    changed = True
    unmet = []
    for key, (dist, requirements) in parsed.items():
        for requirement in requirements:
            if not applies(requirement, env, extras[key]):
                continue
            found = versions.get(canonicalize_name(requirement.name))
            if found is None or not allows(requirement, found):
                demand = Demand(f"{dist.name} {dist.version}", str(requirement), dist.key)
                unmet.append(Unmet(dist.file, demand, found))
    return unmet


def covered(unmet: Unmet, overrides: Sequence[Override]) -> Override | None:
    """The recorded override that replaced this requirement on purpose: same pinned
    version, and the asking project among those the override says it replaced."""
    if unmet.found is None:
        return None
    found = unmet.found
    return next((o for o in overrides if o.explains(unmet.project, found, unmet.demand.project)),
                None)


# -- wheel: refuse or record -----------------------------------------------------------


CLOSURE_LEFT_OUT = "left out (--no-closure)"
"""The manifest's ``closure`` of a wheelhouse written with ``--no-closure``."""


def left_to_node(item: Unmet, closure_left_out: bool) -> bool:
    """A project the wheelhouse does not ship on purpose: the node already has it."""
    return closure_left_out and item.found is None


def settle_wheelhouse(dists: Sequence[Dist], pins: Sequence[Pin], env: dict[str, str], *,
                      where: str | None, closure_left_out: bool = False) -> list[Override]:
    """``wheel``'s check of the staged files: a contradicted pin needs ``override``.

    Returns the overrides with every requirement each replaced; a requirement unmet for
    another reason (a project missing) is a :class:`VerifyError` -- unless the closure was
    left out (``--no-closure``), where a missing project is the node's to provide and only
    a version that the wheelhouse ships and contradicts counts.
    """
    versions = {dist.key: dist.version for dist in dists}
    unmet = unmet_requirements(dists, versions, env)
    pinned = {pin.key for pin in pins}
    conflicts: dict[str, list[Demand]] = {}
    for item in unmet:  # markers and extras were evaluated for the target already
        if item.project in pinned and item.demand not in conflicts.get(item.project, []):
            conflicts.setdefault(item.project, []).append(item.demand)
    overrides = settle(pins, conflicts, where=where)
    other = [item for item in unmet
             if item.project not in pinned and not left_to_node(item, closure_left_out)]
    if other:
        raise VerifyError(
            f"the wheelhouse does not meet its own requirements: {other[0].describe()}"
            + (f" (and {len(other) - 1} more)" if len(other) > 1 else ""),
            where=other[0].file,
            hint="the resolution and the wheels disagree; report this with the recipe",
        )
    return overrides


# -- verify ----------------------------------------------------------------------------


@dataclass
class TorchCheck(Record):
    built_against: str | None
    shipped: str | None
    problem: str | None = field(default=None, metadata=as_json(skip=True))
    note: str | None = field(default=None, metadata=as_json(skip=True))

    def json_extra(self) -> dict[str, Any]:
        return {"ok": self.problem is None, "note": self.note or self.problem}


def check_torch(built_against: str | None, shipped: str | None) -> TorchCheck:
    """The torch shipped must be the torch the extension was compiled against."""
    check = TorchCheck(built_against, shipped)
    if built_against is None and shipped is None:
        return check  # no torch on either side: nothing to compare
    if built_against is None:
        check.note = (f"the wheelhouse ships torch {shipped}, but the manifest does not say "
                      "which torch the build used")
    elif shipped is None:
        check.note = (f"the build used torch {built_against}; the wheelhouse ships none (no "
                      "wheel here requires it)")
    else:
        try:
            built: Version | None = Version(built_against)
            ships: Version | None = Version(shipped)
        except InvalidVersion:
            built = ships = None
        if built is None or ships is None or built.public != ships.public:
            check.problem = (f"the built wheels were compiled against torch {built_against}, "
                             f"but the wheelhouse ships torch {shipped}: a C++ extension built "
                             "against one torch crashes with another")
        elif built.local != ships.local:
            check.note = (f"torch {built_against} (build) and {shipped} (shipped) differ only "
                          "in their local label")
    return check


def _overridden(overridden: list[tuple[Unmet, Override]]) -> list[dict[str, Any]]:
    return [{**item.to_dict(), "override": o.pin, "reason": o.reason} for item, o in overridden]


def _left(not_shipped: list[Unmet]) -> list[str]:
    return sorted({item.demand.requirement for item in not_shipped})


@dataclass
class RequirementsReport(Record):
    json_order: ClassVar[tuple[str, ...]] = ("wheels_checked", "ok")

    wheels_checked: int
    unreadable: list[tuple[str, str]] = field(default_factory=list, metadata=as_json(skip=True))
    problems: list[Unmet] = field(default_factory=list)
    overridden: list[tuple[Unmet, Override]] = field(
        default_factory=list, metadata=as_json("overrides", dump=_overridden))
    torch: TorchCheck | None = None
    not_shipped: list[Unmet] = field(default_factory=list,
                                     metadata=as_json("left_to_the_node", dump=_left))
    """Requirements on projects a ``--no-closure`` wheelhouse leaves to the node."""

    def json_extra(self) -> dict[str, Any]:
        return {"ok": not self.mismatches()}

    def mismatches(self) -> list[tuple[str, str]]:
        """(file, problem) pairs for verify's list of mismatches."""
        found = [*self.unreadable, *((item.file, item.describe()) for item in self.problems)]
        if self.torch is not None and self.torch.problem:
            found.append(("torch", self.torch.problem))
        return found

    def notes(self) -> list[str]:
        found = [f"override: {item.describe()} ({o.pin}: {o.reason})"
                 for item, o in self.overridden]
        if self.torch is not None and self.torch.note:
            found.append(self.torch.note)
        if self.not_shipped:
            found.append(f"closure left out (--no-closure): {len(self.not_shipped)} "
                         "requirement(s) of projects not shipped are the node's to provide")
        return found


def check_wheelhouse_requirements(directory: Path, manifest: dict[str, Any],
                                  versions: Mapping[str, str]) -> RequirementsReport:
    """verify's check: the lock's ``versions`` against every wheel's ``Requires-Dist``."""
    target = manifest.get("target", {})
    env = target_environment(target.get("platform"), target.get("python"))
    overrides = [Override.from_dict(o) for o in manifest.get("overrides", [])
                 if isinstance(o, dict)]
    report = RequirementsReport(0)
    dists = []
    for wheel in manifest["wheels"]:
        path = directory / str(wheel["file"])
        if not path.is_file():
            continue  # named missing by the hash check
        try:
            dists.append(read_dist(path))
        except VerifyError as exc:
            report.unreadable.append((path.name, f"Requires-Dist not checked: {exc.what}"))
    report.wheels_checked = len(dists)
    closure_left_out = manifest.get("closure") == CLOSURE_LEFT_OUT
    for item in unmet_requirements(dists, versions, env):
        override = covered(item, overrides)
        if left_to_node(item, closure_left_out):
            report.not_shipped.append(item)
        elif override is None:
            report.problems.append(item)
        else:
            report.overridden.append((item, override))
    torch = manifest.get("toolchain", {}).get("torch")
    report.torch = check_torch(str(torch) if torch else None, versions.get("torch"))
    return report
