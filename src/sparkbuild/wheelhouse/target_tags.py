"""Whether a wheel installs on a target machine: its tags against the platform and Python.

``wheel`` warns of a built wheel for another machine than the closure's
(:func:`fits_platform`); ``verify`` and ``install`` name each built wheel whose tags the
manifest's declared target (``target.platform``, ``target.python``) cannot install
(:func:`target_tag_problem`), before pip or uv is given it.  A target platform is a
manylinux tag (``manylinux_2_39_aarch64``: that glibc or older, and ``linux_<arch>``, the
tag of a wheel built locally) or a machine's own (``linux-x86_64``, as ``wheel`` records
one without ``--platform``: any manylinux of that arch); the Python is ``X.Y``, CPython.
"""

from __future__ import annotations

import re

from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from sparkbuild.console import shown
from sparkbuild.errors import UsageError
from sparkbuild.wheelhouse.lock import parse_platform, pip_platforms

_LOCAL = re.compile(r"linux[-_]([a-z0-9_]+)")
"""A machine's own platform, as sysconfig (``linux-x86_64``) or a wheel tag spells it."""
_PYTHON = re.compile(r"(\d+)\.(\d+)")


def accepted_platforms(platform: str) -> set[str]:
    """The wheel platform tags a ``platform`` machine installs (``any`` included).

    A manylinux target also takes ``linux_<arch>``, the tag of a wheel built locally; a
    platform sparkbuild cannot expand (not manylinux) accepts only itself.
    """
    try:
        tags = pip_platforms(platform)
    except UsageError:
        return {"any", platform}
    return {"any", *tags, f"linux_{parse_platform(platform)[1]}"}


def fits_platform(filename: str, platform: str) -> bool:
    """True when wheel ``filename`` has a tag that a ``platform`` machine installs."""
    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return False
    accepted = accepted_platforms(platform)
    return any(tag.platform in accepted for tag in tags)


def _platform_fits(tag: str, platform: str) -> bool:
    """Whether a wheel's platform ``tag`` installs on a ``platform`` machine."""
    local = _LOCAL.fullmatch(platform)
    if local is None or platform.startswith(("manylinux", "musllinux")):
        return tag in accepted_platforms(platform)
    arch = local.group(1)
    return tag in ("any", f"linux_{arch}") or re.fullmatch(
        rf"manylinux(_\d+_\d+|1|2010|2014)_{re.escape(arch)}", tag) is not None


def _interpreters(python: str) -> set[tuple[str, str]]:
    """The (interpreter, abi) pairs of tags CPython ``X.Y`` installs."""
    match = _PYTHON.fullmatch(python)
    if match is None:
        return set()
    version = (int(match.group(1)), int(match.group(2)))
    tags = [*cpython_tags(version, platforms=["any"]),
            *compatible_tags(version, f"cp{version[0]}{version[1]}", platforms=["any"])]
    return {(tag.interpreter, tag.abi) for tag in tags}


def target_tag_problem(filename: str, platform: str | None, python: str | None
                       ) -> str | None:
    """Why wheel ``filename`` does not install on the target ``platform`` with Python
    ``python`` (either None: not compared); None when one of its tags does."""
    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return None  # the lock's check names the file name
    if python is not None and _PYTHON.fullmatch(python) is None:
        return f"the manifest's target.python {shown(python)} is not a Python version X.Y"
    pairs = _interpreters(python) if python is not None else None
    fitting = [tag for tag in tags
               if (platform is None or _platform_fits(tag.platform, platform))
               and (pairs is None or (tag.interpreter, tag.abi) in pairs)]
    if fitting:
        return None
    built = ", ".join(sorted(str(tag) for tag in tags))
    declared = " ".join(part for part in (platform, f"Python {python}" if python else None)
                        if part)
    return (f"built for {built}, which does not install on the manifest's target "
            f"{shown(declared)}: pip or uv would refuse it there")
