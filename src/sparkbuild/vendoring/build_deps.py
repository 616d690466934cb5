"""What a build needs besides its FetchContent sources: build requirements and crates.

* Build requirements: ``[build-system] requires`` and ``requirements/build*`` of the tree,
  read for this build's interpreter and machine (markers evaluated, then dropped), as
  :class:`WheelPlan` lines; the torch pin among them is the tree's.  Requirement files for
  other devices (``requirements/build/rocm.txt``, ...) are not a CUDA build's.
* Cargo crates, one :class:`CratePlan` per ``Cargo.lock`` (outside build and test
  directories), counted from the lock, with the Rust toolchain the tree names.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement

from sparkbuild.errors import RecipeError
from sparkbuild.records import Record, as_json
from sparkbuild.sources.requirements import exact_pin, read_requirements
from sparkbuild.store.hashing import sha256_file
from sparkbuild.store.user_files import parse_toml

OTHER_DEVICES = frozenset({"cpu", "rocm", "rock", "tpu", "xpu", "hpu", "neuron", "openvino"})
"""requirements/build files for these targets are not a CUDA build's."""


@dataclass(frozen=True)
class WheelPlan(Record):
    requirement: str
    origin: str = field(metadata=as_json("from"))


@dataclass(frozen=True)
class CratePlan(Record):
    lockfile: str
    """Relative to the tree."""
    sha256: str = field(metadata=as_json(skip=True))
    count: int = field(metadata=as_json("crates"))
    toolchain: str | None = None


# -- build requirements ------------------------------------------------------------------


def _requirement_files(tree: Path) -> list[Path]:
    candidates = sorted(tree.glob("requirements/build*.txt")) + sorted(
        tree.glob("requirements/build/*.txt")
    )
    chosen = []
    for path in candidates:
        words = set(re.split(r"[-_.]", path.stem.lower()))
        if not words & OTHER_DEVICES:
            chosen.append(path)
    return chosen


def _normalized(line: str, origin: str) -> str | None:
    """The requirement without its marker, or None when the marker excludes this build."""
    try:
        requirement = Requirement(line)
    except InvalidRequirement as exc:
        raise RecipeError(
            f"cannot read build requirement {line!r}: {exc}", where=origin,
            hint="fix the line, or report the tree's requirement syntax to sparkbuild",
        ) from exc
    environment: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    if requirement.marker is not None and not requirement.marker.evaluate(environment):
        return None
    requirement.marker = None
    return str(requirement)


def plan_wheels(tree: Path) -> tuple[list[WheelPlan], str | None]:
    """Build requirements of a CUDA build of the tree, and its torch pin."""
    found: list[tuple[str, str]] = []
    pyproject = tree / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = parse_toml(pyproject.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise RecipeError(
                f"pyproject.toml is not valid TOML: {exc}", where=str(pyproject)
            ) from exc
        requires = data.get("build-system", {}).get("requires", [])
        found += [(str(line), "pyproject.toml") for line in requires]
    seen: set[Path] = set()
    for path in _requirement_files(tree):
        origin = str(path.relative_to(tree))
        found += [(line.text, origin) for line in read_requirements(path, _seen=seen)]
    wheels: dict[str, WheelPlan] = {}
    for line, origin in found:
        requirement = _normalized(line, origin)
        if requirement is not None and requirement not in wheels:
            wheels[requirement] = WheelPlan(requirement, origin)
    torch = exact_pin(wheels, "torch")
    return list(wheels.values()), str(torch) if torch else None


# -- cargo ---------------------------------------------------------------------------------


def plan_crates(tree: Path) -> list[CratePlan]:
    plans = []
    for lock in sorted(tree.rglob("Cargo.lock")):
        relative = lock.relative_to(tree)
        if any(part in ("target", "build", ".git", "tests") for part in relative.parts[:-1]):
            continue
        try:
            data = parse_toml(lock.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise RecipeError(f"Cargo.lock is not valid TOML: {exc}", where=str(lock)) from exc
        count = sum(
            1 for package in data.get("package", [])
            if str(package.get("source", "")).startswith(("registry+", "git+", "sparse+"))
        )
        plans.append(
            CratePlan(str(relative), sha256_file(lock), count,
                      _rust_toolchain(tree, lock.parent))
        )
    return plans


def _rust_toolchain(tree: Path, start: Path) -> str | None:
    """The channel of the nearest rust-toolchain(.toml) at or above ``start``."""
    directory = start
    while directory.is_relative_to(tree):
        for name in ("rust-toolchain.toml", "rust-toolchain"):
            path = directory / name
            if path.is_file():
                text = path.read_text(encoding="utf-8")
                match = re.search(r'channel\s*=\s*"([^"]+)"', text)
                return match.group(1) if match else text.strip() or None
        if directory == tree:
            break
        directory = directory.parent
    return None
