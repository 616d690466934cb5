"""A main job in parts: ``wheel --part NAME`` writes one, ``join`` makes them one wheelhouse.

The default main job compiles vLLM and flashinfer's model set; on two machines (two CI
runners) each part builds alone: ``wheel --part vllm`` (vLLM's wheels, no flashinfer
builder beside the compile) and ``wheel --part flashinfer`` (the jit-cache wheel alone,
with every core).  A part directory holds its wheels as built and ``part.json``: the part's
name, the sha256 of the recipe (and of the bundle, if any) it was built from, each wheel
with its sha256 and size, the toolchain, and what the wheelhouse's writer needs of it (the
source, patches, build settings and vendored sources of vLLM's part; the ``flashinfer_aot``
record of flashinfer's).

``join PART_DIR... --out DIR`` reads every part (each wheel re-hashed), refuses parts of
another recipe or bundle, a missing part, a part given twice and parts built with
different toolchains, each by name, then writes the wheelhouse with the writer ``wheel``
uses (:func:`sparkbuild.wheelhouse.write.write_wheelhouse`: the same rewrite, lock, index,
SBOM and manifest) and runs ``verify`` on it.  Its fingerprint is the one-job wheelhouse's:
the manifest's run measures and plan are not fingerprinted
(:func:`sparkbuild.wheelhouse.manifest.manifest_fingerprint`).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild import __version__
from sparkbuild.console import step
from sparkbuild.errors import DestinationError, HashMismatchError, UsageError, VerifyError
from sparkbuild.store.files import write_text_atomic
from sparkbuild.store.hashing import sha256_file
from sparkbuild.store.user_files import parse_json, read_user_file
from sparkbuild.wheelhouse.destination import check_destination, staging_dir, swap_into_place
from sparkbuild.wheelhouse.verify import leaves_directory

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sparkbuild.errors import SparkbuildError
    from sparkbuild.recipe import Recipe
    from sparkbuild.wheelhouse.verify import VerifyResult
    from sparkbuild.wheelhouse.write import WheelhouseInputs, WheelhouseResult

PART_NAMES = ("vllm", "flashinfer")
PART_FILE = "part.json"
PART_SCHEMA = 1
PART_LIMIT = 16 << 20
"""The largest part.json read (vLLM's build settings: some 100 KiB)."""
VLLM_FACTS = ("source", "patches", "build_settings", "vendored", "offline", "closure",
              "platform")
"""What vLLM's part hands the writer."""


def recipe_parts(recipe: Recipe) -> tuple[str, ...]:
    """The parts of the recipe's main job: flashinfer's with ``[flashinfer] aot`` or a
    prebuilt ``jit_cache``, vLLM's always."""
    flashinfer = recipe.flashinfer.aot or recipe.flashinfer.jit_cache is not None
    return PART_NAMES if flashinfer else PART_NAMES[:1]


def check_part_name(part: str, recipe: Recipe) -> None:
    """``wheel --part NAME``: a part the recipe's main job has."""
    if part not in recipe_parts(recipe):
        why = ("" if part in PART_NAMES else
               f" (the parts are {', '.join(PART_NAMES)})")
        raise UsageError(f"the recipe's main job has no part {part!r}{why}",
                         where=str(recipe.path),
                         hint=f"parts of this recipe: {', '.join(recipe_parts(recipe))}; "
                         "flashinfer's needs `aot = true` under [flashinfer]")


def recipe_sha256(recipe: Recipe) -> str:
    """The sha256 of the recipe file: parts of one main job share it."""
    return sha256_file(recipe.path)


def new_part(name: str, recipe: Recipe, bundle: Path | None, toolchain: Mapping[str, Any],
             facts: dict[str, Any]) -> Part:
    """The part ``name`` of ``recipe``'s main job (its wheels are set by :func:`write_part`)."""
    return Part(Path(), name, recipe_sha256(recipe),
                sha256_file(bundle) if bundle is not None else None, [], dict(toolchain), facts)


# -- one part ------------------------------------------------------------------------------


@dataclass
class Part:
    """A part directory as written or read."""

    directory: Path
    name: str
    recipe: str
    """The recipe's sha256."""
    bundle: str | None
    wheels: list[dict[str, Any]]
    toolchain: dict[str, Any]
    facts: dict[str, Any]

    def wheel_paths(self) -> list[Path]:
        return [self.directory / str(w["file"]) for w in self.wheels]

    def to_dict(self) -> dict[str, Any]:
        return {"schema": PART_SCHEMA, "generator": f"sparkbuild {__version__}",
                "part": self.name, "recipe_sha256": self.recipe,
                "bundle_sha256": self.bundle, "wheels": self.wheels,
                "toolchain": self.toolchain, "facts": self.facts}


@dataclass
class PartResult:
    """``wheel --part NAME``: the part directory written."""

    part: Part
    built: dict[str, Any] = field(default_factory=dict)
    """What built it, for ``--json`` (flashinfer's part: the builder's record)."""
    lines: list[str] = field(default_factory=list)
    """What built it, for people."""

    def to_dict(self) -> dict[str, Any]:
        return {"part": self.part.name, "directory": str(self.part.directory),
                "recipe_sha256": self.part.recipe, "wheels": self.part.wheels,
                "built": self.built}

    def summary(self) -> list[str]:
        lines = [*self.lines, f"part {self.part.name} of the main job: {self.part.directory} "
                 f"(recipe sha256:{self.part.recipe[:16]})"]
        lines += [f"  built {w['file']}  sha256:{w['sha256']}" for w in self.part.wheels]
        lines.append("  join the parts: sparkbuild join PART_DIR... --out DIR")
        return lines

    @property
    def error(self) -> None:
        return None


def write_part(directory: Path, part: Part, wheels: Sequence[Path]) -> PartResult:
    """Copy ``wheels`` into ``directory`` (empty or absent) and write ``part.json`` last;
    ``part``'s own directory and wheels are set here."""
    check_part_destination(directory)
    with staging_dir(directory) as staging:
        step(f"writing the part {part.name} to {directory}")
        part.wheels = []
        for wheel in wheels:
            shutil.copyfile(wheel, staging / wheel.name)
            part.wheels.append({"file": wheel.name, "sha256": sha256_file(staging / wheel.name),
                                "size": (staging / wheel.name).stat().st_size})
        write_text_atomic(staging / PART_FILE, _render(part.to_dict()))
        swap_into_place(staging, directory)
    part.directory = directory
    return PartResult(part)


def vllm_part(directory: Path, inputs: WheelhouseInputs, bundle: Path | None) -> PartResult:
    """``wheel --part vllm``: the built wheels of ``inputs`` and what the wheelhouse is
    written from (its source, patches, build settings and vendored sources) as a part."""
    facts = {"source": inputs.source, "patches": inputs.patches,
             "build_settings": inputs.build_settings, "vendored": list(inputs.vendored),
             "offline": inputs.offline, "closure": inputs.closure,
             "platform": inputs.platform, "bundled_closure": inputs.bundled_closure}
    part = new_part("vllm", inputs.recipe, bundle, inputs.toolchain or {}, facts)
    return write_part(directory, part, inputs.built_wheels)


def check_part_destination(directory: Path) -> None:
    """A part is written where nothing is, or over an earlier part."""
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise DestinationError("the part's path exists and is not a directory",
                               where=str(directory), hint="choose another --out")
    if directory.is_dir() and any(directory.iterdir()) and not (directory / PART_FILE).is_file():
        raise DestinationError("refusing to replace a non-empty directory that is not a part",
                               where=str(directory), hint="choose an empty or new --out")


def _render(data: Mapping[str, Any]) -> str:
    import json

    return json.dumps(data, indent=2) + "\n"


def read_part(directory: Path) -> Part:
    """The part in ``directory``, each wheel re-hashed: :class:`VerifyError` for a
    ``part.json`` that is missing or not of this form, :class:`HashMismatchError` for a
    wheel whose bytes are not the ones recorded."""
    path = directory / PART_FILE
    hint = "pass a directory `sparkbuild wheel --part NAME --out DIR` wrote, copied whole"
    if not path.exists():
        raise VerifyError("not a part of a main job: part.json is missing", where=str(directory),
                          hint=hint)
    raw = read_user_file(path, "part.json", PART_LIMIT, error=VerifyError, hint=hint)
    try:
        data = parse_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise VerifyError(f"part.json cannot be read: {exc}", where=str(path), hint=hint) from exc
    problem = _shape_problem(data)
    if problem is not None:
        raise VerifyError(f"part.json is not a part sparkbuild wrote: {problem}",
                          where=str(path), hint=hint)
    part = Part(directory, data["part"], data["recipe_sha256"], data.get("bundle_sha256"),
                data["wheels"], data["toolchain"], data["facts"])
    for wheel, file in zip(part.wheels, part.wheel_paths(), strict=True):
        actual = sha256_file(file) if file.is_file() else "missing"
        if actual != wheel["sha256"]:
            raise HashMismatchError(f"the part's wheel {wheel['file']} is not the one built "
                                    f"(sha256 {actual}, recorded {wheel['sha256']})",
                                    where=str(file), hint="copy the part again, whole")
    return part


def _shape_problem(data: object) -> str | None:
    if not isinstance(data, dict) or data.get("schema") != PART_SCHEMA:
        return f"no schema {PART_SCHEMA} object"
    if data.get("part") not in PART_NAMES:
        return f"part is {str(data.get('part'))[:40]!r}, not one of {', '.join(PART_NAMES)}"
    if not isinstance(data.get("recipe_sha256"), str):
        return "no recipe_sha256"
    if not (isinstance(data.get("toolchain"), dict) and isinstance(data.get("facts"), dict)):
        return "no toolchain or facts object"
    wheels = data.get("wheels")
    if not isinstance(wheels, list) or not wheels:
        return "no wheels"
    for wheel in wheels:
        if not (isinstance(wheel, dict) and isinstance(wheel.get("file"), str)
                and isinstance(wheel.get("sha256"), str)) or leaves_directory(wheel["file"]) \
                or "/" in wheel["file"] or not wheel["file"].endswith(".whl"):
            return f"a wheel entry that names no wheel file of the part: {str(wheel)[:80]}"
    missing = [k for k in VLLM_FACTS if k not in data["facts"]] if data["part"] == "vllm" \
        else [k for k in ("flashinfer_aot",) if k not in data["facts"]]
    return f"facts lack {', '.join(missing)}" if missing else None


# -- the join ------------------------------------------------------------------------------


def check_parts(parts: Sequence[Part], recipe: Recipe, bundle: str | None) -> dict[str, Part]:
    """The parts by name: every part of the recipe's main job once, each made from this
    recipe (and bundle), all with one toolchain; else a :class:`UsageError` naming which."""
    digest = recipe_sha256(recipe)
    by_name: dict[str, Part] = {}
    for part in parts:
        if part.name in by_name:
            raise UsageError(f"the part {part.name} is given twice", where=str(part.directory),
                             hint=f"also at {by_name[part.name].directory}: pass each once")
        if part.recipe != digest:
            raise UsageError(f"the part {part.name} was built from another recipe (sha256 "
                             f"{part.recipe[:16]}, this one's {digest[:16]})",
                             where=str(part.directory),
                             hint=f"build every part with {recipe.path}, unchanged")
        if part.bundle != bundle:
            raise UsageError(f"the part {part.name} was built from "
                             f"{'the bundle ' + part.bundle[:16] if part.bundle else 'no bundle'}"
                             f", the join's is {bundle[:16] if bundle else 'none'}",
                             where=str(part.directory),
                             hint="build every part from the same bundle (or none)")
        by_name[part.name] = part
    missing = [name for name in recipe_parts(recipe) if name not in by_name]
    if missing:
        raise UsageError(f"the part {', '.join(missing)} is missing: the main job of "
                         f"{recipe.name} has the parts {', '.join(recipe_parts(recipe))}",
                         where=", ".join(str(p.directory) for p in parts) or "join",
                         hint=f"build it with `sparkbuild wheel --part {missing[0]}`")
    extra = [name for name in by_name if name not in recipe_parts(recipe)]
    if extra:
        raise UsageError(f"the recipe's main job has no part {extra[0]}",
                         where=str(by_name[extra[0]].directory))
    _check_toolchains(list(by_name.values()))
    return by_name


def _check_toolchains(parts: Sequence[Part]) -> None:
    first = parts[0]
    for part in parts[1:]:
        differ = sorted(k for k in set(first.toolchain) & set(part.toolchain)
                        if first.toolchain[k] != part.toolchain[k])
        if differ:
            key = differ[0]
            raise UsageError(f"the parts {first.name} and {part.name} were built with "
                             f"different toolchains: {key} {first.toolchain[key]} and "
                             f"{part.toolchain[key]}", where=str(part.directory),
                             hint="build the parts on machines of one image (one nvcc, "
                             "compiler, torch and Python)")


@dataclass(frozen=True)
class JoinOptions:
    parts: tuple[Path, ...]
    out: Path
    recipe: Recipe
    cache: Path | None = None
    offline: bool = False
    bundle: Path | None = None
    """The bundle the parts were built from (its sha256 is checked against theirs)."""


@dataclass
class JoinResult:
    parts: list[Part]
    wheelhouse: WheelhouseResult
    verify: VerifyResult
    fingerprint: str = field(default="")

    def to_dict(self) -> dict[str, Any]:
        return {"parts": [{"part": p.name, "directory": str(p.directory)} for p in self.parts],
                "fingerprint": self.fingerprint, "wheelhouse": self.wheelhouse.to_dict(),
                "verify": self.verify.to_dict()}

    def summary(self) -> list[str]:
        lines = [f"joined {', '.join(p.name for p in self.parts)} into {self.wheelhouse.out}"]
        lines += self.wheelhouse.summary()
        return lines + self.verify.summary()

    @property
    def error(self) -> SparkbuildError | None:
        return self.verify.error


def join_parts(options: JoinOptions) -> JoinResult:
    """``sparkbuild join``: see the module docstring."""
    from sparkbuild.store.context import RunContext
    from sparkbuild.toolchain.kept_sass import CodeCache
    from sparkbuild.wheelhouse.verify import verify_wheelhouse
    from sparkbuild.wheelhouse.write import WheelhouseInputs, write_wheelhouse

    check_destination(options.out, before_build=True)
    recipe = options.recipe
    parts = [read_part(directory) for directory in options.parts]
    bundle = sha256_file(options.bundle) if options.bundle is not None else None
    by_name = check_parts(parts, recipe, bundle)
    vllm = by_name["vllm"].facts
    settings = dict(vllm["build_settings"])
    if "flashinfer" in by_name:
        settings["flashinfer_aot"] = by_name["flashinfer"].facts["flashinfer_aot"]
    offline = options.offline  # the build's own setting is in its build settings
    cache = RunContext.create(options.cache, offline=offline, recipe=recipe).cache()
    wheelhouse = write_wheelhouse(options.out, WheelhouseInputs(
        recipe=recipe, source=vllm["source"], patches=vllm["patches"],
        built_wheels=[w for name in recipe_parts(recipe) for w in by_name[name].wheel_paths()],
        build_settings=settings, cache_root=cache.root, offline=offline,
        platform=vllm["platform"], toolchain=by_name["vllm"].toolchain,
        closure=bool(vllm["closure"]), vendored=vllm["vendored"],
        bundled_closure=vllm.get("bundled_closure"), kept_code=CodeCache(cache)))
    verified = verify_wheelhouse(options.out, libraries=wheelhouse.libraries, target_tags=False)
    return JoinResult(parts, wheelhouse, verified, verified.fingerprint)
