"""Pins against the requirements of what they ship beside: agree, or override explicitly.

A recipe pin that contradicts a requirement of a shipped wheel (the built vLLM's
``Requires-Dist``, the source tree's requirement files, a wheel of the closure) is refused
with both sides named, unless the pin says why with ``override = "REASON"``.  Then, and only
then, uv gets it as an ``--override``, and the override (the pin, every requirement it
replaced, the reason) is written into the lock's header and the wheelhouse's manifest.

Markers are evaluated for the target (the Spark: ``manylinux_2_39_aarch64``, Python 3.12),
never for the machine that runs sparkbuild.
"""

from __future__ import annotations

import re
import sysconfig
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from sparkbuild.errors import CommandFailed, PinRefusedError, SparkbuildError, UsageError
from sparkbuild.records import Record
from sparkbuild.store.wheel_check import same_version

if TYPE_CHECKING:
    from sparkbuild.recipe import Pin, Recipe
    from sparkbuild.wheelhouse.lock import LockedRequirement

    Resolver = Callable[[Sequence[str], Sequence[str]], list[LockedRequirement]]

_LINUX = re.compile(r"(?:many|musl)linux(?:_\d+_\d+|1|2010|2014)_(\w+)|linux[-_](\w+)")


# -- the target's marker environment ---------------------------------------------------


def target_environment(platform: str | None, python: str | None) -> dict[str, str]:
    """PEP 508 marker values of the target, e.g. ``manylinux_2_39_aarch64`` with 3.12."""
    env = {key: str(value) for key, value in default_environment().items()}
    if python:
        env.update(python_version=python, python_full_version=f"{python}.0",
                   implementation_version=f"{python}.0")
    if platform and platform != sysconfig.get_platform():
        match = _LINUX.fullmatch(platform)
        if match is None:
            raise UsageError(f"cannot evaluate requirement markers for platform {platform!r}",
                             hint="give a manylinux tag such as manylinux_2_39_aarch64")
        env.update(platform_machine=match.group(1) or match.group(2), sys_platform="linux",
                   platform_system="Linux", os_name="posix", platform_release="",
                   platform_version="")
    env.update(implementation_name="cpython", platform_python_implementation="CPython")
    return env


def applies(requirement: Requirement, env: dict[str, str], extras: Iterable[str] = ("",)
            ) -> bool:
    """Whether the requirement's marker holds on the target for one of ``extras``."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**env, "extra": extra}) for extra in extras)


def allows(requirement: Requirement, version: str) -> bool:
    try:
        return requirement.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


# -- demands and overrides -------------------------------------------------------------


@dataclass(frozen=True)
class Demand(Record):
    """One requirement of something shipped: who asks, and what for."""

    required_by: str
    """``vllm 0.33.0`` (a wheel) or ``vllm (requirements/cuda.txt:13)`` (a tree's file)."""
    requirement: str
    project: str = ""
    """The canonical name of the asking project (matches pip check's lines)."""

    def describe(self) -> str:
        return f"{self.required_by} requires {self.requirement}"


@dataclass(frozen=True)
class Override(Record):
    """A pin that contradicts what it ships beside, on purpose."""

    pin: str
    reason: str
    replaced: tuple[Demand, ...]

    @property
    def key(self) -> str:
        return canonicalize_name(self.pin.partition("==")[0])

    @property
    def version(self) -> str:
        return self.pin.partition("==")[2]

    def explains(self, project: str, version: str, asker: str) -> bool:
        """Whether this override is why ``asker`` finds ``project`` at ``version``: the same
        pinned version, and ``asker`` among the projects whose requirement it replaced.
        (``verify`` asks it of an unmet Requires-Dist, ``install`` of a ``pip check`` line.)"""
        if self.key != canonicalize_name(project):
            return False
        same = same_version(self.version, version)
        askers = {d.project or canonicalize_name(d.required_by.split(" ")[0])
                  for d in self.replaced}
        return same and canonicalize_name(asker) in askers

    def describe(self) -> str:
        replaced = "; ".join(d.describe() for d in self.replaced) or "nothing found to replace"
        return f"{self.pin} overrides: {replaced} (reason: {self.reason})"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Override:
        replaced = tuple(Demand(str(d.get("required_by", "")), str(d.get("requirement", "")),
                                str(d.get("project", "")))
                         for d in data.get("replaced", []) if isinstance(d, dict))
        return cls(str(data.get("pin", "")), str(data.get("reason", "")), replaced)


def contradicts(pin: Pin, demand: Demand, env: dict[str, str]) -> bool:
    """The demand is on the pin's project, holds on the target, and excludes its version."""
    try:
        requirement = Requirement(demand.requirement)
    except InvalidRequirement:
        return False
    return (canonicalize_name(requirement.name) == pin.key and applies(requirement, env)
            and not allows(requirement, pin.version))


def pin_conflicts(pins: Sequence[Pin], demands: Iterable[Demand], env: dict[str, str]
                  ) -> dict[str, list[Demand]]:
    """Pin key -> the demands that contradict it (each demand once)."""
    found: dict[str, list[Demand]] = {}
    for demand in demands:
        for pin in pins:
            if contradicts(pin, demand, env) and demand not in found.get(pin.key, []):
                found.setdefault(pin.key, []).append(demand)
    return found


def settle(pins: Sequence[Pin], conflicts: dict[str, list[Demand]], *,
           where: str | None) -> list[Override]:
    """Refuse a contradicted pin without ``override``; record every pin that has one."""
    refused = [(pin, conflicts[pin.key]) for pin in pins
               if conflicts.get(pin.key) and not pin.override]
    if refused:
        pin, demands = refused[0]
        wanted = "; ".join(d.describe() for d in demands)
        raise PinRefusedError(
            f"the recipe pins {pin.requirement}, but {wanted}"
            + (f" (and {len(refused) - 1} more contradicted pin(s))" if len(refused) > 1 else ""),
            where=where,
            hint=f"pin a {pin.name} that {demands[0].required_by} accepts, or keep "
            f'{pin.requirement} and say why with override = "REASON" in its [[pins]] table '
            "(the override is then recorded in the lock and the manifest)",
        )
    return [Override(pin.requirement, pin.override, tuple(conflicts.get(pin.key, ())))
            for pin in pins if pin.override]


def merge_overrides(*groups: Iterable[Override]) -> list[Override]:
    """One record per pin, with every requirement it replaced (in first-seen order)."""
    merged: dict[str, Override] = {}
    for group in groups:
        for item in group:
            known = merged.get(item.pin)
            replaced = (*known.replaced, *(d for d in item.replaced if d not in known.replaced)
                        ) if known else item.replaced
            merged[item.pin] = Override(item.pin, item.reason, replaced)
    return list(merged.values())


def override_comments(overrides: Sequence[Override]) -> list[str]:
    """Lines for a lock file's header: every override, its reason, what it replaced."""
    lines = []
    for item in overrides:
        lines.append(f"override: {item.pin} (reason: {item.reason})")
        lines += [f"  replaces: {d.describe()}" for d in item.replaced]
    return lines


def recorded_demands(recipe: Recipe) -> list[Demand]:
    """What the recipe's lock file says the fetched branch requires of the pinned projects."""
    recorded = recipe.tree_requirements()
    if recorded is None:
        return []
    label = f"{recipe.package} at {recorded.commit[:12]} ({recorded.origin})"
    return [Demand(label, line, canonicalize_name(recipe.package))
            for lines in recorded.requirements.values() for line in lines]


# -- when uv finds no solution ---------------------------------------------------------


class Unsatisfiable(CommandFailed):
    """uv found no set of versions that meets every requirement; ``explanation`` is uv's."""

    def __init__(self, explanation: str, *, where: str | None = None) -> None:
        super().__init__(f"no set of versions meets every requirement:\n{explanation}",
                         where=where, hint="read uv's explanation above")
        self.explanation = explanation


def _names(text: str, pin: Pin) -> bool:
    lowered = text.lower()
    return any(re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", lowered)
               for name in {pin.name.lower(), pin.key})


def resolve_pinned(resolve: Resolver, requirements: Sequence[str], pins: Sequence[Pin]
                   ) -> list[LockedRequirement]:
    """Resolve with uv overrides for the pins that carry ``override`` only.

    A pin without one is an ordinary requirement: a wheel deep in the closure that
    contradicts it makes the resolution fail, and uv's explanation (which package wants
    what) becomes a :class:`PinRefusedError` naming the pin.
    """
    try:
        return resolve(requirements, [pin.requirement for pin in pins if pin.override])
    except Unsatisfiable as exc:
        raise refusal(exc, pins) from exc


def refusal(exc: Unsatisfiable, pins: Sequence[Pin]) -> SparkbuildError:
    named = [pin for pin in pins if not pin.override and _names(exc.explanation, pin)]
    if not named:
        return exc
    pin = named[0]
    return PinRefusedError(
        f"the recipe pins {pin.requirement}, but the closure contradicts it:\n"
        f"{exc.explanation}",
        hint=f"pin a {pin.name} the closure accepts, or keep {pin.requirement} and say why "
        'with override = "REASON" in its [[pins]] table',
    )
