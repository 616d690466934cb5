"""sparkbuild's own requirements, checked before anything compiles.

sparkbuild imports some of its requirements only in the phase that needs them: the SBOM
library (cyclonedx-python-lib) when the wheelhouse is written, after the build.  With
sparkbuild carried as a wheel beside a hand-picked few of its requirements, a missing one
would surface only there (``No module named 'cyclonedx'``), after vLLM and flashinfer's
modules have compiled.  So doctor reads the
installed distribution's own ``Requires-Dist`` and fails at once on any requirement that
is not installed or not in range.  The cuobjdump and nvdisasm wheels are met as well by
the tools themselves found elsewhere (a CUDA toolkit), which is what
:mod:`sparkbuild.toolchain.sass` runs.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from sparkbuild.toolchain.sass import find_nvdisasm, installed_cuobjdump

if TYPE_CHECKING:
    from pathlib import Path

    from sparkbuild.compile.doctor import Check

DISTRIBUTION = "sparkbuild"


def _cuobjdump() -> Path | None:
    return installed_cuobjdump()


TOOL_WHEELS: dict[str, Callable[[], Path | None]] = {
    "nvidia-cuda-cuobjdump": _cuobjdump,
    "nvidia-cuda-nvdisasm": find_nvdisasm,
}
"""Wheels that only bring a tool: the tool found anywhere meets the requirement."""


def declared_requirements() -> list[str] | None:
    """``Requires-Dist`` of the installed sparkbuild; None when it runs from a source tree
    that is not installed (then there is nothing to read)."""
    try:
        return importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return None


def asked_for(requires: list[str]) -> tuple[list[Requirement], list[str]]:
    """The requirements that apply here with no extras asked for, and unreadable lines."""
    applying, unreadable = [], []
    for line in requires:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            unreadable.append(f"{line} (unreadable)")
            continue
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            applying.append(requirement)
    return applying, unreadable


def _named(requirement: Requirement) -> str:
    """The requirement as ``pip install`` takes it here: no marker (it applies)."""
    return f"{requirement.name}{requirement.specifier}"


def installed(requirement: Requirement) -> tuple[str | None, bool]:
    """The installed version of ``requirement``'s project (None: not installed), and
    whether it meets the requirement's range (doctor's checks of sparkbuild's own and of a
    tree's build requirements)."""
    try:
        found = importlib.metadata.version(requirement.name)
    except importlib.metadata.PackageNotFoundError:
        return None, False
    return found, requirement.specifier.contains(found, prereleases=True)


def unmet_requirements(requires: list[str]) -> list[str]:
    """Each requirement (no extras asked for) that this interpreter does not meet."""
    applying, unmet = asked_for(requires)
    for requirement in applying:
        found, met = installed(requirement)
        if found is None:
            finder = TOOL_WHEELS.get(canonicalize_name(requirement.name))
            if finder is None or finder() is None:
                unmet.append(f"{_named(requirement)} (not installed)")
        elif not met:
            unmet.append(f"{_named(requirement)} (found {found})")
    return unmet


def check_own_requirements(requires: list[str] | None = None) -> Check:
    """doctor's check: hard, since a phase after the build would fail on it."""
    from sparkbuild.compile.doctor import Check

    declared = declared_requirements() if requires is None else requires
    if declared is None:
        return Check("sparkbuild's requirements", True, "not read",
                     "sparkbuild runs from a source tree, not an installed distribution")
    unmet = unmet_requirements(declared)
    if unmet:
        names = " ".join(f"'{u.split(' (')[0]}'" for u in unmet)
        return Check("sparkbuild's requirements", False, f"{len(unmet)} unmet",
                     f"{'; '.join(unmet)}: sparkbuild imports them after the build (the "
                     f"wheelhouse's SBOM, the machine code); install them first: pip "
                     f"install {names} (offline: --no-index --find-links DIR)", hard=True)
    return Check("sparkbuild's requirements", True, f"{len(asked_for(declared)[0])} met",
                 f"{DISTRIBUTION} {importlib.metadata.version(DISTRIBUTION)}"
                 if requires is None else "as given")
