"""Hashed lock files of a runtime closure, resolved for a platform other than this one.

The Spark is manylinux aarch64 with its own Python; the build machine may be x86_64 with
another.  pip cannot resolve for such a target: even with ``--platform`` and
``--python-version`` it evaluates environment markers (``platform_machine``,
``python_version``) against the machine it runs on, so a lock for Python 3.12 made on 3.11
silently drops ``six; python_version > '3.11'``.  ``uv pip compile --python-platform``
evaluates markers for the target, so it resolves; pip then downloads the exact files of
that resolution in hash-checking mode.

The recipe's pins must agree with what they ship beside: the source tree's own
requirements (and what the recipe's lock file recorded of its branch) are checked against
them, and only a pin with ``override = "REASON"`` may contradict one
(:mod:`sparkbuild.wheelhouse.overrides`); uv gets such pins, and only such pins, as
``--override``, and the lock's header names every override.  Every locked version is also
checked against ``recipes/known_bad.toml``.

Both run isolated from the local pip configuration (``--no-config``; ``--isolated`` with
``PIP_CONFIG_FILE=/dev/null``): a machine's constraint file or local find-links must not
leak into a lock meant for another machine.  The index is the one pip is configured with.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sparkbuild import __version__
from sparkbuild.errors import (
    CommandFailed,
    HashMismatchError,
    RecipeError,
    ToolchainError,
    UsageError,
    VerifyError,
)
from sparkbuild.proc import format_command, run
from sparkbuild.recipe import Pin, check_known_bad, refuse_known_bad
from sparkbuild.records import Record, as_json
from sparkbuild.sources.declared import declared_requirements, find_declared, relative_where
from sparkbuild.sources.requirements import RequirementLine, logical_lines
from sparkbuild.store.files import write_text_atomic
from sparkbuild.wheelhouse.overrides import (
    Demand,
    Override,
    Unsatisfiable,
    override_comments,
    pin_conflicts,
    recorded_demands,
    resolve_pinned,
    settle,
    target_environment,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sparkbuild.recipe import Recipe
    from sparkbuild.store.context import RunContext

LOCK_NAME = "requirements.lock"
RESOLVE_TIMEOUT = 1800.0

_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_([a-z0-9_]+)")
_LEGACY = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}
_OLDEST_GLIBC = {"x86_64": 5, "i686": 5}
"""The oldest manylinux glibc per arch; others (aarch64, ...) start at manylinux2014."""
_UV_GLIBC = (17, 28, *range(31, 41))
"""The manylinux glibc versions ``uv --python-platform`` names (uv 0.13)."""
_HASH = re.compile(r"--hash[= ]sha256:([0-9a-f]{64})")


# -- targets ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ClosureTarget:
    """Where the closure will be installed; ``platform`` None means this machine."""

    platform: str | None = None
    python: str | None = None

    def describe(self) -> str:
        platform = self.platform or sysconfig.get_platform()
        return f"{platform}, Python {self.python or host_python()}"

    def key(self) -> dict[str, str]:
        return {"platform": self.platform or sysconfig.get_platform(),
                "python": self.python or host_python()}


def host_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def parse_platform(platform: str) -> tuple[int, str]:
    """(glibc minor, arch) of a manylinux platform tag, either spelling."""
    match = _MANYLINUX.fullmatch(platform)
    if match and match.group(1) == "2":
        return int(match.group(2)), match.group(3)
    legacy, _, arch = platform.partition("_")
    if legacy in _LEGACY and arch:
        return _LEGACY[legacy], arch
    raise UsageError(
        f"unsupported platform {platform!r}",
        hint="give a manylinux tag such as manylinux_2_39_aarch64 (the Spark) or "
        "manylinux_2_28_x86_64",
    )


def pip_platforms(platform: str) -> list[str]:
    """Every tag a ``platform`` machine accepts: pip's ``--platform`` takes them one by one."""
    minor, arch = parse_platform(platform)
    oldest = _OLDEST_GLIBC.get(arch, 17)
    tags = [f"manylinux_2_{m}_{arch}" for m in range(minor, oldest - 1, -1)]
    tags += [f"{legacy}_{arch}" for legacy, m in _LEGACY.items() if oldest <= m <= minor]
    return tags


def uv_platform(platform: str) -> str:
    """The ``--python-platform`` of uv for ``platform`` (the newest it knows, not newer)."""
    minor, arch = parse_platform(platform)
    known = [m for m in _UV_GLIBC if m <= minor]
    if arch not in ("x86_64", "aarch64") or not known:
        raise UsageError(f"uv cannot resolve for platform {platform!r}",
                         hint="use a manylinux_2_17 (or newer) x86_64 or aarch64 tag")
    return f"{arch}-manylinux_2_{known[-1]}"


def check_python(python: str) -> str:
    if not re.fullmatch(r"3\.\d+", python):
        raise UsageError(f"bad Python version {python!r}", hint="give X.Y, such as 3.12")
    return python


# -- the lock format -------------------------------------------------------------------


@dataclass(frozen=True)
class LockedRequirement(Record):
    name: str
    version: str
    hashes: tuple[str, ...] = field(metadata=as_json("sha256"))

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)

    def render(self) -> str:
        lines = [f"{self.name}=={self.version}"]
        lines += [f"    --hash=sha256:{digest}" for digest in self.hashes]
        return " \\\n".join(lines) + "\n"


def render_lock(locked: Sequence[LockedRequirement], comments: Sequence[str]) -> str:
    header = "".join(f"# {line}\n" for line in comments)
    return header + "".join(r.render() for r in sorted(locked, key=lambda r: r.key))


def parse_lock(text: str, *, where: str) -> list[LockedRequirement]:
    """Read a hashed lock; a line without ``==`` or without a hash is an error."""
    locked = []
    for number, line in logical_lines(text):
        requirement = line.split("--hash")[0].strip()
        name, sep, version = requirement.partition("==")
        hashes = tuple(_HASH.findall(line))
        if not sep or not name.strip() or not version.strip() or not hashes:
            raise VerifyError(
                "a lock line needs NAME==VERSION and at least one --hash=sha256:",
                where=f"{where}:{number}",
            )
        locked.append(LockedRequirement(name.strip(), version.strip(), hashes))
    return locked


# -- what to resolve -------------------------------------------------------------------


def apply_pins(requirements: Sequence[str], pins: Sequence[Pin]) -> list[str]:
    """The requirements without those on a pinned project, then the pins.

    Whether a pin may stand where a requirement asked for another version is decided before
    (:func:`sparkbuild.wheelhouse.overrides.settle`); a known-bad pin is refused here too.
    """
    for pin in pins:
        refuse_known_bad(pin)
    pinned = {pin.key for pin in pins}
    kept = [text for text in requirements
            if canonicalize_name(Requirement(text).name) not in pinned]
    return kept + [pin.requirement for pin in pins]


def restrict_to_pins(
    locked: Sequence[LockedRequirement], pins: Sequence[Pin]
) -> list[LockedRequirement]:
    """A pin with a sha256 allows that one file only, and the index must have it."""
    by_key: dict[str, Pin] = {canonicalize_name(pin.name): pin for pin in pins if pin.sha256}
    result = []
    for item in locked:
        pin = by_key.get(item.key)
        if pin is None or pin.sha256 is None:
            result.append(item)
            continue
        if pin.sha256.lower() not in item.hashes:
            raise HashMismatchError(
                f"the index has no file of {pin.requirement} with the pinned sha256 "
                f"{pin.sha256}",
                where=f"index files: {', '.join(item.hashes)}",
                hint="the release was re-uploaded or the pin is wrong; check the recipe",
            )
        result.append(LockedRequirement(item.name, item.version, (pin.sha256.lower(),)))
    return result


# -- resolving and downloading ---------------------------------------------------------


UV_VERSION = "0.13.9"
"""The uv sparkbuild runs, pinned (``pyproject.toml`` depends on ``uv==0.13.9``): its
resolution, its reading of ``pylock.toml`` and the files it writes into a venv
(:data:`sparkbuild.node.installed.INSTALLER_FILES`) are known for this version."""


def find_uv() -> Path:
    """uv from the running environment (the ``uv`` wheel), else from PATH; at
    :data:`UV_VERSION`, else :class:`ToolchainError`."""
    beside = Path(sys.executable).parent / "uv"
    found = beside if beside.is_file() else shutil.which("uv")
    if not found:
        raise ToolchainError("uv is not installed; it resolves closures for other platforms",
                             hint=f"pip install uv=={UV_VERSION} (one of sparkbuild's "
                             "dependencies)")
    version = uv_version(Path(found))
    if version != UV_VERSION:
        raise ToolchainError(f"uv {version or '(its version unreadable)'} found, sparkbuild "
                             f"runs uv {UV_VERSION}: what it writes and reads is known for "
                             "that version", where=str(found),
                             hint=f"pip install uv=={UV_VERSION} beside sparkbuild")
    return Path(found)


@functools.cache
def uv_version(uv: Path) -> str:
    """The version ``uv --version`` prints (``uv 0.13.9 (x86_64-unknown-linux-gnu)``)."""
    output = run([uv, "--version"], timeout=60, check=False, echo=False).output
    match = re.match(r"uv (\S+)", output.strip())
    return match.group(1) if match else ""


def _uv_target_args(target: ClosureTarget) -> list[str]:
    args = ["--python", sys.executable]
    if target.python:
        args += ["--python-version", check_python(target.python)]
    if target.platform:
        args += ["--python-platform", uv_platform(target.platform)]
    return args


def resolve_closure(
    requirements: Sequence[str], overrides: Sequence[str], *, target: ClosureTarget, index: str
) -> list[LockedRequirement]:
    """Resolve ``requirements`` for ``target`` (binary wheels only), with every file's hash.

    ``overrides`` replace any requirement on the same project, also deep in the graph (the
    recipe's pins that carry ``override``).  No solution: :class:`Unsatisfiable` with uv's
    explanation.
    """
    with tempfile.TemporaryDirectory(prefix="sparkbuild-lock-") as tmp:
        work = Path(tmp)
        (work / "requirements.in").write_text("\n".join(requirements) + "\n", encoding="utf-8")
        (work / "overrides.txt").write_text("\n".join(overrides) + "\n", encoding="utf-8")
        cmd: list[str | os.PathLike[str]] = [find_uv(), "pip", "compile", work / "requirements.in",
               "--override", work / "overrides.txt", "--output-file", work / "resolved.txt",
               "--generate-hashes", "--only-binary", ":all:", "--index-url", index,
               "--no-config", "--no-header", "--no-annotate", "--quiet",
               *_uv_target_args(target)]
        result = run(cmd, env={"UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"},
                     timeout=RESOLVE_TIMEOUT, check=False)
        if result.returncode != 0:
            raise _uv_failure(result.output, cmd, result.returncode)
        resolved = work / "resolved.txt"
        return parse_lock(resolved.read_text(encoding="utf-8"), where="uv pip compile output")


def _uv_failure(output: str, cmd: Sequence[str | os.PathLike[str]], code: int) -> CommandFailed:
    """uv's "No solution found" explanation as :class:`Unsatisfiable`; else CommandFailed."""
    marker = "No solution found"
    if marker in output:
        lines = output[output.index(marker):].splitlines()[1:]
        explanation = "\n".join(
            re.sub(r"^[\s\u2570\u2500\u25b6\u00d7\u2502]*(?:cause:\s*)?", "", line)
            for line in lines if line.strip())
        return Unsatisfiable(explanation or output.strip())
    tail = "\n".join(output.strip().splitlines()[-40:])
    return CommandFailed(f"uv exited with status {code}: {format_command(cmd)}\n"
                         f"--- last lines of output ---\n{tail}",
                         hint="read the output above; fix and run again")


def _pip_target_args(target: ClosureTarget) -> list[str]:
    if not target.platform:
        return []
    args = ["--python-version", check_python(target.python or host_python()),
            "--implementation", "cp"]
    for tag in pip_platforms(target.platform):
        args += ["--platform", tag]
    return args


def download_locked(
    locked: Sequence[LockedRequirement], dest: Path, *, target: ClosureTarget, index: str
) -> list[Path]:
    """Download the one wheel of each locked requirement for ``target``, hashes checked."""
    if not locked:
        return []
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sparkbuild-dl-") as tmp:
        requirements = Path(tmp) / LOCK_NAME
        requirements.write_text(render_lock(locked, []), encoding="utf-8")
        before = set(dest.iterdir())
        run([sys.executable, "-m", "pip", "download", "--isolated", "--no-deps",
             "--require-hashes", "--only-binary", ":all:", "--index-url", index,
             "--dest", dest, "--requirement", requirements, "--progress-bar", "off",
             *_pip_target_args(target)],
            env={"PIP_CONFIG_FILE": os.devnull}, timeout=RESOLVE_TIMEOUT)
    return sorted(set(dest.iterdir()) - before)


# -- the lock stage --------------------------------------------------------------------


def _by_key(locked: list[LockedRequirement]) -> list[LockedRequirement]:
    return sorted(locked, key=lambda r: r.key)


@dataclass
class LockResult(Record):
    json_order: ClassVar[tuple[str, ...]] = (
        "lock", "platform", "python", "index", "package", "overrides",
    )

    path: Path = field(metadata=as_json("lock"))
    target: ClosureTarget = field(metadata=as_json(flatten=True))
    index: str
    package: str
    locked: list[LockedRequirement] = field(metadata=as_json("requirements", dump=_by_key))
    overrides: list[Override] = field(default_factory=list)
    """The recipe's pins that carry ``override``, and what each replaced."""

    def summary(self) -> list[str]:
        lines = [f"locked the runtime closure of {self.package} for {self.target.describe()}: "
                 f"{len(self.locked)} projects, every one hashed", f"  wrote {self.path}"]
        lines += [f"  OVERRIDE {item.describe()}" for item in self.overrides]
        return lines

    @property
    def error(self) -> None:
        return None


def _source_tree_requirements(
    recipe: Recipe, context: RunContext | None
) -> tuple[list[RequirementLine], Path]:
    from sparkbuild.sources.fetch import fetch_source

    with tempfile.TemporaryDirectory(prefix="sparkbuild-lock-src-") as tmp:
        source = fetch_source(recipe.source.spec, Path(tmp) / "tree", recipe=recipe,
                              context=context)
        return (declared_requirements(source.tree, recipe.source.not_in_wheel),
                source.tree)


def lock_comments(package: str, target: ClosureTarget, index: str) -> list[str]:
    return [
        f"written by sparkbuild {__version__}: the runtime closure of {package}",
        f"for {target.describe()}; index {index}",
        "resolved without this machine's pip configuration (no local constraint caps)",
        "install with: pip install --require-hashes -r requirements.lock",
    ]


def tree_demands(recipe: Recipe, declared: Sequence[RequirementLine], tree: Path
                 ) -> list[Demand]:
    """The tree's own requirements, and what the lock file recorded of its branch."""
    project = canonicalize_name(recipe.package)
    own = [Demand(f"{recipe.package} ({relative_where(line, tree)})", line.text, project)
           for line in declared]
    return own + recorded_demands(recipe)


def refuse_contradicted_pins(recipe: Recipe, tree: Path, platform: str | None) -> None:
    """A pin the tree's own requirements contradict (without ``override``) fails before
    the build, not hours later; the wheelhouse checks every shipped wheel again.
    ``platform``: the wheelhouse's (None: this machine's)."""
    # a tree without requirement files: the built wheel's metadata decides
    declared = find_declared(tree, recipe.source.not_in_wheel) or []
    env = target_environment(platform, recipe.target.python if platform else None)
    settle(recipe.pins, pin_conflicts(recipe.pins, tree_demands(recipe, declared, tree), env),
           where=str(recipe.path))


def require_pins_on_index(recipe: Recipe, index: str) -> None:
    """Every pin names a project the index has: asked before uv runs, whose answer for an
    unknown name reads as a contradiction of the closure."""
    from sparkbuild.recipe import pin_where
    from sparkbuild.sources.index import list_files

    for pin in recipe.pins:
        if list_files(index, pin.name) is None:
            raise RecipeError(f"pin {pin.name}: the package index has no project of that name",
                              where=pin_where(recipe.path, pin.name),
                              hint=f"check the name in the recipe's [[pins]] (index: {index})")


def lock_closure(
    recipe: Recipe, *, platform: str, python: str, out: Path, tree: Path | None = None,
    context: RunContext | None = None,
) -> LockResult:
    """Write ``out/requirements.lock``: the closure of the recipe's package, built or not.

    The requirements come from ``tree`` (a prepared tree) or else from the recipe's source
    (an sdist's requirement files, fetched through ``context``'s cache: nothing is built).
    A pin that contradicts one of them is refused unless it carries ``override``; the
    recipe's pins replace any requirement on the same project.  Nothing is installed.
    """
    from sparkbuild.sources.index import index_url

    target = ClosureTarget(platform, check_python(python))
    parse_platform(platform)
    if tree is not None:
        declared = declared_requirements(tree, recipe.source.not_in_wheel)
    else:
        declared, tree = _source_tree_requirements(recipe, context)
    env = target_environment(platform, python)
    conflicts = pin_conflicts(recipe.pins, tree_demands(recipe, declared, tree), env)
    overrides = settle(recipe.pins, conflicts, where=str(recipe.path))
    requirements = apply_pins([line.text for line in declared], recipe.pins)
    index = index_url()
    locked: list[LockedRequirement] = []
    require_pins_on_index(recipe, index)
    if requirements:  # a package without requirements and a recipe without pins: empty
        def resolve(reqs: Sequence[str], forced: Sequence[str]) -> list[LockedRequirement]:
            return resolve_closure(reqs, forced, target=target, index=index)

        locked = restrict_to_pins(resolve_pinned(resolve, requirements, recipe.pins),
                                  recipe.pins)
    for item in locked:
        check_known_bad(item.name, item.version, what="locked requirement")
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_NAME
    comments = lock_comments(recipe.package, target, index) + override_comments(overrides)
    write_text_atomic(path, render_lock(locked, comments))
    return LockResult(path, target, index, recipe.package, locked, overrides)
