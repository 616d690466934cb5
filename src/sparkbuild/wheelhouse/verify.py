"""Check a wheelhouse before trusting it: every byte, and the GPU code inside.

A wheelhouse travels (USB stick, scp, a shared disk) before it is installed on an
air-gapped Spark.  ``verify`` re-hashes every file against ``manifest.json`` and
``requirements.lock`` and names each one that differs, is missing or was added; then it
lists the CUDA architectures whose machine code each shared library of the built wheels
carries (cuobjdump) and fails when a target architecture of the manifest is missing, the
way a 12.0 stand-in for 12.1 would be.
"""

from __future__ import annotations

import json
import re
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from sparkbuild.errors import SparkbuildError, VerifyError
from sparkbuild.store.hashing import sha256_file
from sparkbuild.wheelhouse.lock import LOCK_NAME, parse_lock

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    ArchLister = Callable[[Path], list[str]]

MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class Mismatch:
    file: str
    problem: str

    def to_dict(self) -> dict[str, str]:
        return {"file": self.file, "problem": self.problem}


@dataclass(frozen=True)
class LibraryArchs:
    wheel: str
    library: str
    archs: tuple[str, ...]
    """Machine code architectures, as cuobjdump names them (``sm_121a``)."""
    missing: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"wheel": self.wheel, "library": self.library, "archs": list(self.archs),
                "missing": list(self.missing)}


@dataclass
class VerifyResult:
    directory: Path
    checked: int
    target_archs: tuple[str, ...]
    mismatches: list[Mismatch] = field(default_factory=list)
    libraries: list[LibraryArchs] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "wheelhouse": str(self.directory),
            "files_checked": self.checked,
            "ok": self.error is None,
            "mismatches": [m.to_dict() for m in self.mismatches],
            "target_archs": list(self.target_archs),
            "libraries": [lib.to_dict() for lib in self.libraries],
            "notes": self.notes,
        }

    def summary(self) -> list[str]:
        verdict = "OK" if self.error is None else "FAILED"
        lines = [f"verify {self.directory}: {verdict} ({self.checked} files re-hashed)"]
        lines += [f"  MISMATCH {m.file}: {m.problem}" for m in self.mismatches]
        for lib in self.libraries:
            archs = ", ".join(lib.archs) or "no GPU code"
            missing = f"  MISSING {', '.join(lib.missing)}" if lib.missing else ""
            lines.append(f"  {lib.wheel}: {lib.library}: {archs}{missing}")
        lines += [f"  note: {note}" for note in self.notes]
        return lines

    @property
    def error(self) -> SparkbuildError | None:
        lacking = [lib for lib in self.libraries if lib.missing]
        if not self.mismatches and not lacking:
            return None
        named = [f"{m.file} ({m.problem})" for m in self.mismatches]
        named += [f"{lib.wheel}:{lib.library} (no machine code for "
                  f"{', '.join(lib.missing)})" for lib in lacking]
        return VerifyError(
            f"{len(named)} problem(s) in the wheelhouse: " + "; ".join(named),
            where=str(self.directory),
            hint="do not install it: copy it again, or rebuild it with `sparkbuild wheel`",
        )


# -- hashes ----------------------------------------------------------------------------


def read_manifest(directory: Path) -> dict[str, Any]:
    if not directory.is_dir():
        what = "is not a directory" if directory.exists() else "does not exist"
        raise VerifyError(f"the wheelhouse directory {what}", where=str(directory),
                          hint="check the path; `sparkbuild wheel --out DIR` writes a wheelhouse")
    path = directory / MANIFEST_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise VerifyError("not a sparkbuild wheelhouse: manifest.json is missing",
                          where=str(directory),
                          hint="a run that was killed leaves no manifest; build again") from exc
    except (OSError, ValueError) as exc:
        raise VerifyError(f"manifest.json cannot be read: {exc}", where=str(path)) from exc
    if not isinstance(data, dict) or not isinstance(data.get("wheels"), list):
        raise VerifyError("manifest.json has no `wheels` list", where=str(path))
    return data


def expected_hashes(manifest: dict[str, Any]) -> dict[str, str]:
    """Every file the manifest vouches for (relative path -> sha256)."""
    expected = {str(w["file"]): str(w["sha256"]) for w in manifest["wheels"]}
    expected.update({str(k): str(v) for k, v in manifest.get("files", {}).items()})
    return expected


def actual_hashes(directory: Path) -> dict[str, str]:
    return {
        path.relative_to(directory).as_posix(): sha256_file(path)
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != MANIFEST_NAME
    }


def compare(expected: dict[str, str], actual: dict[str, str]) -> list[Mismatch]:
    problems = []
    for name in sorted(set(expected) | set(actual)):
        if name not in actual:
            problems.append(Mismatch(name, "missing"))
        elif name not in expected:
            problems.append(Mismatch(name, "not listed in manifest.json"))
        elif expected[name] != actual[name]:
            problems.append(Mismatch(name, f"sha256 {actual[name]} differs from the "
                                           f"manifest's {expected[name]}"))
    return problems


def check_lock(directory: Path, actual: dict[str, str]) -> list[Mismatch]:
    """Each wheel's bytes must be one the lock allows, and each lock line must have a wheel."""
    lock_path = directory / LOCK_NAME
    try:
        locked = parse_lock(lock_path.read_text(encoding="utf-8"), where=str(lock_path))
    except (OSError, VerifyError) as exc:
        return [Mismatch(LOCK_NAME, f"cannot be read: {exc}")]
    by_key = {canonicalize_name(item.name): item for item in locked}
    problems, seen = [], set()
    for name, digest in actual.items():
        if "/" in name or not name.endswith(".whl"):
            continue
        project, version, _build, _tags = parse_wheel_filename(name)
        item = by_key.get(project)
        seen.add(project)
        if item is None or Version(item.version) != version or digest not in item.hashes:
            problems.append(Mismatch(name, "its sha256 is not the one requirements.lock pins"))
    problems += [Mismatch(LOCK_NAME, f"{item.name}=={item.version} has no wheel here")
                 for key, item in sorted(by_key.items()) if key not in seen]
    return problems


def merged(problems: Sequence[Mismatch]) -> list[Mismatch]:
    """One entry per file, its problems joined: a person reads each file's name once."""
    by_file: dict[str, list[str]] = {}
    for problem in problems:
        by_file.setdefault(problem.file, []).append(problem.problem)
    return [Mismatch(name, "; ".join(found)) for name, found in by_file.items()]


# -- GPU code --------------------------------------------------------------------------


def arch_digits(arch: str) -> str:
    """``12.1`` -> ``121``; ``sm_121a`` -> ``121``: one spelling for comparing."""
    return re.sub(r"[^0-9]", "", re.sub(r"[a-z]+$", "", arch.lower().removeprefix("sm_")))


def _is_shared_library(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.endswith(".so") or ".so." in base


def library_archs(wheel: Path, targets: Sequence[str], list_archs: ArchLister
                  ) -> list[LibraryArchs]:
    """cuobjdump's architectures of each shared library in ``wheel``, and what is missing."""
    wanted = {arch_digits(t): f"sm_{arch_digits(t)}" for t in targets}
    found = []
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as tmp:
        for member in sorted(n for n in archive.namelist() if _is_shared_library(n)):
            path = Path(archive.extract(member, tmp))
            archs = tuple(list_archs(path))
            have = {arch_digits(a) for a in archs}
            missing = tuple(sorted(v for k, v in wanted.items() if k not in have)) if archs else ()
            found.append(LibraryArchs(wheel.name, member, archs, missing))
            path.unlink()
    return found


def check_archs(result: VerifyResult, built: Sequence[Path], list_archs: ArchLister) -> None:
    for wheel in built:
        try:
            result.libraries += library_archs(wheel, result.target_archs, list_archs)
        except zipfile.BadZipFile:
            result.notes.append(f"{wheel.name} is not a readable zip: GPU code not listed")
    if not result.libraries:
        result.notes.append("the built wheels hold no shared library: no GPU code to check")
    elif result.target_archs and not any(lib.archs for lib in result.libraries):
        result.mismatches.append(Mismatch(
            ", ".join(sorted({lib.wheel for lib in result.libraries})),
            f"no shared library holds GPU machine code, but the target is "
            f"{', '.join(result.target_archs)}"))


def _default_lister(path: Path) -> list[str]:
    from sparkbuild.toolchain.sass import list_cuda_archs

    return list_cuda_archs(path)


def verify_wheelhouse(directory: Path, *, list_archs: ArchLister | None = None) -> VerifyResult:
    """Re-hash ``directory`` against its manifest and lock; list the built wheels' GPU code."""
    manifest = read_manifest(directory)
    actual = actual_hashes(directory)
    targets = tuple(str(a) for a in manifest.get("target", {}).get("cuda_archs", []))
    result = VerifyResult(directory, len(actual) + 1, targets)
    result.mismatches += merged(compare(expected_hashes(manifest), actual)
                                + check_lock(directory, actual))
    built = [directory / str(w["file"]) for w in manifest["wheels"] if w.get("role") == "built"]
    check_archs(result, [w for w in built if w.is_file()], list_archs or _default_lister)
    return result
