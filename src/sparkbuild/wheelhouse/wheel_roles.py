"""Which wheels of a wheelhouse this build made, and the archs they were built for: read
from the files, never taken on the manifest's word alone.

``verify`` judges the machine code of the built wheels at the target archs.  Were the
manifest to decide both, one edit of it (a built wheel's ``role`` set to ``pin``, or the
target emptied) would hide a library of trap-only kernels.  A wheel is judged as built
when any of these holds, and each one that holds of a wheel the manifest calls a pin or a
closure wheel is a named problem (the wheel is judged all the same):

* the manifest says ``role`` built;
* its version carries sparkbuild's label (``+sm121a.<series hash>``, as
  :func:`sparkbuild.wheelhouse.wheel_rewrite.local_label` writes it; the manifest's
  ``local_label`` or one of that shape): a package index serves no such version;
* it holds sparkbuild's own SBOM (``NAME.dist-info/sboms/sbom.cdx.json`` with sparkbuild
  among its tools), which the build's rewrite adds to every wheel it built;
* the manifest's ``libraries`` (the machine code ``wheel`` read of its built wheels) name it;
* it is the recipe's package (``recipe.package``).

A role that is none of built, pin and closure is named too.  The archs judged are the
target's (``target.cuda_archs``), the build record's (``build.archs``, the recipe's as the
build ran) and those the built wheels' labels name, together: a target that is missing,
names no arch, or differs from the build record or the labels is a named problem, and the
built wheels are still judged at every arch any of them names.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from sparkbuild.errors import VerifyError
from sparkbuild.store.user_files import parse_json
from sparkbuild.store.wheel_members import READ_ERRORS, read_text_member
from sparkbuild.wheelhouse.manifest import WHEEL_ROLES, manifest_target
from sparkbuild.wheelhouse.sbom import WHEEL_SBOM

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence
    from pathlib import Path

ROLES = WHEEL_ROLES
LABEL = re.compile(r"(?:^|\.)((?:sm\d+[a-z]?\.)+)[0-9a-f]{8}$")
"""sparkbuild's local label at the end of a version's local part: the target archs
(``sm121a.``), then the series hash."""


@dataclass(frozen=True)
class BuiltWheels:
    """The wheels ``verify`` judges as built, the archs it judges them at, and the problems
    found on the way: (file, problem)."""

    files: tuple[str, ...]
    targets: tuple[str, ...]
    problems: tuple[tuple[str, str], ...]


def label_form(arch: str) -> str:
    """``12.1a`` -> ``sm121a``: an arch as sparkbuild's label spells it."""
    return "sm" + arch.replace(".", "").lower()


def label_archs(version: str) -> tuple[str, ...]:
    """The archs sparkbuild's label in ``version`` names (``1.0+sm121a.0123abcd`` ->
    ``("12.1a",)``); none when it carries no such label."""
    _public, _, local = version.partition("+")
    match = LABEL.search(local)
    if match is None:
        return ()
    found = []
    for part in match.group(1).rstrip(".").split("."):
        digits = re.sub(r"[a-z]+$", "", part[2:])
        found.append(f"{digits[:-1]}.{digits[-1]}{part[2 + len(digits):]}")
    return tuple(found)


def _carries_label(version: str, label: str) -> bool:
    _public, _, local = version.partition("+")
    return bool(local) and (bool(LABEL.search(local)) or (
        bool(label) and (local == label or local.endswith("." + label))))


def _holds_own_sbom(wheel: Path) -> bool:
    """Whether ``wheel`` holds the SBOM sparkbuild's rewrite adds (sparkbuild among its
    tools); an unreadable wheel or SBOM holds none (the structure check names the wheel)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if n.count("/") == 2
                     and n.split("/", 1)[0].endswith(".dist-info")
                     and n.split("/", 1)[1] == WHEEL_SBOM]
            if not names:
                return False
            data = parse_json(read_text_member(archive, names[0], str(wheel)))
    except (*READ_ERRORS, VerifyError, ValueError):
        return False
    metadata = data.get("metadata") if isinstance(data, dict) else None
    tools = metadata.get("tools") if isinstance(metadata, dict) else None
    listed = tools.get("components") if isinstance(tools, dict) else tools
    return isinstance(listed, list) and any(
        isinstance(tool, dict) and tool.get("name") == "sparkbuild" for tool in listed)


def _facts(directory: Path, file: str, manifest: Mapping[str, Any], verified: bool
           ) -> list[str]:
    """What says that ``file`` is a wheel this build made (apart from its role)."""
    try:
        project, version, _build, _tags = parse_wheel_filename(file)
    except InvalidWheelFilename:
        return []  # the lock's check names the file name
    facts = []
    label = str(manifest.get("local_label") or "")
    if _carries_label(str(version), label):
        facts.append(f"its version {version} carries the build's label")
    if verified and _holds_own_sbom(directory / file):
        facts.append(f"it holds sparkbuild's SBOM ({WHEEL_SBOM})")
    libraries = manifest.get("libraries")
    if isinstance(libraries, list) and any(isinstance(lib, dict) and lib.get("wheel") == file
                                           for lib in libraries):
        facts.append("manifest.json's libraries list its machine code")
    recipe = manifest.get("recipe")
    package = recipe.get("package") if isinstance(recipe, dict) else None
    if isinstance(package, str) and package and canonicalize_name(package) == project:
        facts.append(f"it is the recipe's package {package}")
    return facts


def built_wheels(directory: Path, manifest: Mapping[str, Any], present: Collection[str],
                 verified: Collection[str]) -> BuiltWheels:
    """The wheels of ``manifest`` that this build made (see the module docstring), of those
    ``present`` in ``directory`` (``verified``: with the manifest's sha256, read inside), and
    the archs to judge them at."""
    files: list[str] = []
    problems: list[tuple[str, str]] = []
    for entry in manifest["wheels"]:
        file, role = str(entry["file"]), entry.get("role")
        if role not in ROLES:
            problems.append((file, f"manifest.json gives it the role {role!r}, not one of "
                                   f"{', '.join(ROLES)}: judged as built"))
        facts = _facts(directory, file, manifest, file in verified) if file in present else []
        if role in ("pin", "closure") and facts:
            problems.append((file, f"manifest.json calls it a {role} wheel, but "
                                   f"{'; '.join(facts)}: a wheel this build made, judged "
                                   "as built"))
        if (role not in ("pin", "closure") or facts) and file in present and file not in files:
            files.append(file)
    targets, target_problems = judged_targets(manifest, files)
    return BuiltWheels(tuple(files), targets, tuple(problems + target_problems))


def judged_targets(manifest: Mapping[str, Any], built: Sequence[str]
                   ) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    """The archs the built wheels are judged at (the target's, the build record's, the
    labels'), and each way the target is missing or disagrees with the others."""
    target = manifest_target(manifest)
    declared = {label_form(a) for a in target.cuda_archs}
    labelled: dict[str, tuple[str, ...]] = {}
    for file in built:
        try:
            version = str(parse_wheel_filename(file)[1])
        except InvalidWheelFilename:
            continue
        if label_archs(version):
            labelled[file] = label_archs(version)
    judged: dict[str, str] = {}
    for arch in [*target.cuda_archs, *target.build_archs,
                 *(a for archs in labelled.values() for a in archs)]:
        judged.setdefault(label_form(arch), arch)
    problems: list[tuple[str, str]] = []
    if not target.cuda_archs:
        what = "has no target" if not target.declared else "its target names no CUDA arch"
        elsewhere = [a for a in judged.values()]
        problems.append(("manifest.json", f"{what}: the built wheels' machine code would be "
                         "judged for no GPU" + (f" (judged for {', '.join(elsewhere)}, which "
                                                "the build record or the wheels' label name)"
                                                if elsewhere else "")))
    elif target.build_archs and {label_form(a) for a in target.build_archs} != declared:
        problems.append(("manifest.json", f"its target archs {', '.join(target.cuda_archs)} "
                         f"are not the build's {', '.join(target.build_archs)} (build.archs)"))
    for file, archs in labelled.items():
        if target.cuda_archs and {label_form(a) for a in archs} != declared:
            problems.append((file, f"its version's label names {', '.join(archs)}, the "
                                   f"manifest's target {', '.join(target.cuda_archs)}"))
    return tuple(judged.values()), problems
