"""``manifest.json``: the one description of a wheelhouse, written and read here only.

The manifest says where every byte of a wheelhouse came from (source, patches, toolchain,
build settings), names every file it vouches for with its sha256 (the wheels, the lock and
the ``simple/`` pages), and records what was decided on the way (overrides, the machine
code of each library).  ``wheel`` writes it last; ``verify``, ``install`` and ``verify
--installed`` read it.  The wheelhouse's fingerprint (:func:`manifest_fingerprint`) is the
sha256 of what the manifest says less :data:`RUN_KEYS`: the run's measures (each unit's
seconds and peak, what the compile cache served, what the build servers compiled) and the
build machine's plan (MAX_JOBS, NVCC_THREADS, the launcher, the pool, the paths of the run),
which differ from run to run and machine to machine while the wheelhouse's bytes do not.
So a wheelhouse joined from parts built on two machines
(:mod:`sparkbuild.wheelhouse.parts`) has the fingerprint of the one built in one job.
"""

from __future__ import annotations

import copy
import hashlib
import json
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sparkbuild import __version__
from sparkbuild.console import unsafe_characters
from sparkbuild.errors import VerifyError
from sparkbuild.recipe import env_entry_problem
from sparkbuild.store.files import read_at_most, usable_path
from sparkbuild.store.user_files import parse_json

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from sparkbuild.recipe import Recipe
    from sparkbuild.wheelhouse.sbom import BuildFacts

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = 1
MANIFEST_LIMIT = 16 << 20
"""The largest manifest read (a vLLM wheelhouse's is some 100 KiB; one of 200 MB took
1.2 GB of memory to parse): larger is refused before it is parsed."""
WheelRole = Literal["built", "pin", "closure"]
"""Why a wheel is in the wheelhouse: this build made it, a recipe pins it, or the pins and
the built wheel depend on it."""
WHEEL_ROLES: tuple[WheelRole, ...] = ("built", "pin", "closure")


def build_manifest(
    recipe: Recipe, facts: BuildFacts, *, target: Mapping[str, str],
    build_settings: Mapping[str, Any], wheels: Sequence[Mapping[str, Any]],
    overrides: Sequence[Mapping[str, Any]], libraries: Sequence[Mapping[str, Any]],
    files: Mapping[str, str],
) -> dict[str, Any]:
    """The manifest of a wheelhouse for ``recipe``, built as ``facts`` says (its source,
    patches, toolchain, label and ``SOURCE_DATE_EPOCH``, the same the SBOMs record).

    ``wheels``: every wheel with its sha256 (and ``role``: built, pin or closure); ``files``:
    the other files it vouches for (relative path -> sha256); ``libraries``: each shared
    library of the built wheels with its block-scaled MMA count and trap-only kernels.
    """
    return {
        "schema": MANIFEST_SCHEMA,
        "generator": f"sparkbuild {__version__}",
        "recipe": {"name": recipe.name, "package": recipe.package},
        "target": {**target, "cuda_archs": list(recipe.target.cuda_archs),
                   "allow_jit": recipe.target.allow_jit},
        "local_label": facts.label,
        "source_date_epoch": facts.epoch,
        "source": facts.source,
        "patches": [{k: p.get(k) for k in ("name", "sha256", "status")} for p in facts.patches],
        "toolchain": dict(facts.toolchain),
        "build": {"archs": list(recipe.target.cuda_archs), **build_settings},
        "wheels": [dict(wheel) for wheel in wheels],
        "overrides": [dict(override) for override in overrides],
        "libraries": [dict(library) for library in libraries],
        "files": dict(files),
    }


def render_manifest(manifest: Mapping[str, Any]) -> str:
    return json.dumps(manifest, indent=2) + "\n"


RUN_KEYS: Mapping[str, tuple[str, ...]] = {
    "build": ("jobs", "nvcc_threads", "launcher", "bundle", "compile_cache", "dist", "pool",
              "units"),
    "build.environment": ("MAX_JOBS", "NVCC_THREADS"),
    "build.flashinfer_aot": ("wheel", "seconds", "log", "reused_since", "environment",
                             "units"),
}
"""What the fingerprint leaves out, by the object that holds it: the run's measures and the
build machine's plan (the module docstring)."""


def manifest_identity(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest less :data:`RUN_KEYS`: what the fingerprint covers."""
    identity = copy.deepcopy(dict(manifest))
    for where, keys in RUN_KEYS.items():
        holder: Any = identity
        for step in where.split("."):
            holder = holder.get(step) if isinstance(holder, dict) else None
        if isinstance(holder, dict):
            for key in keys:
                holder.pop(key, None)
    return identity


def manifest_fingerprint(raw: bytes) -> str:
    """``sha256:<hex>`` of a manifest's identity (:func:`manifest_identity`) as canonical
    JSON; bytes that are no JSON object are fingerprinted as they are."""
    try:
        data = parse_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        data = None
    if not isinstance(data, dict):
        return "sha256:" + hashlib.sha256(raw).hexdigest()
    canonical = json.dumps(manifest_identity(data), sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def read_manifest(directory: Path) -> dict[str, Any]:
    """The manifest of the wheelhouse ``directory``; :class:`VerifyError` naming what is wrong."""
    return load_manifest(directory)[1]


def load_manifest(directory: Path) -> tuple[bytes, dict[str, Any]]:
    """The manifest's exact bytes and what they say: one read, so that what is checked and
    what is fingerprinted are the same bytes."""
    usable_path(directory, "the wheelhouse path")
    if not directory.is_dir():
        what = "is not a directory" if directory.exists() else "does not exist"
        raise VerifyError(f"the wheelhouse directory {what}", where=str(directory),
                          hint="check the path; `sparkbuild wheel --out DIR` writes a wheelhouse")
    path = directory / MANIFEST_NAME
    try:
        mode = path.lstat().st_mode
        if not stat.S_ISREG(mode):
            what = "a symbolic link" if stat.S_ISLNK(mode) else "not a plain file"
            raise VerifyError(f"manifest.json is {what}, not a plain file of the wheelhouse",
                              where=str(path), hint="copy the wheelhouse again (cp -a, rsync -a)")
        raw = read_at_most(path, MANIFEST_LIMIT)
        if len(raw) > MANIFEST_LIMIT:
            raise VerifyError(f"manifest.json is over {MANIFEST_LIMIT >> 20} MiB: not a manifest "
                              "sparkbuild wrote, not read", where=str(path),
                              hint="the wheelhouse is damaged or hostile: build it again")
        data = parse_json(raw.decode("utf-8"))
    except FileNotFoundError as exc:
        raise VerifyError("not a sparkbuild wheelhouse: manifest.json is missing",
                          where=str(directory),
                          hint="a run that was killed leaves no manifest; build again") from exc
    except (OSError, ValueError) as exc:
        raise VerifyError(f"manifest.json cannot be read: {exc}", where=str(path)) from exc
    if not isinstance(data, dict) or not isinstance(data.get("wheels"), list):
        raise VerifyError("manifest.json has no `wheels` list", where=str(path))
    _check_shape(data, path)
    return raw, data


EDITED = ("the manifest was edited or is damaged; build the wheelhouse again or restore it "
          "from its source")


def _check_shape(data: dict[str, Any], path: Path) -> None:
    """Each wheel names its file and sha256 (its size, if any, a number of bytes); ``files``
    (if any) maps names to sha256s; the target and the build's archs have their types."""
    for number, wheel in enumerate(data["wheels"], start=1):
        if not (isinstance(wheel, dict) and isinstance(wheel.get("file"), str)
                and isinstance(wheel.get("sha256"), str)):
            raise VerifyError(f"manifest.json: wheels entry {number} lacks its file or sha256",
                              where=str(path), hint=EDITED)
        size = wheel.get("size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int)
                                 or size < 0):
            raise VerifyError(f"manifest.json: wheels entry {number} gives its size as "
                              f"{json.dumps(size)[:60]}, not a number of bytes",
                              where=str(path), hint=EDITED)
    files = data.get("files", {})
    if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise VerifyError(f"manifest.json: `files` must map file names to sha256s, not "
                          f"{json.dumps(files)[:60]}", where=str(path), hint=EDITED)
    problem = target_shape_problem(data)
    if problem is not None:
        raise VerifyError(f"manifest.json: {problem}", where=str(path), hint=EDITED)
    recorded_profile(data, str(path))


TARGET_TYPES: dict[str, tuple[type, ...]] = {"platform": (str,), "python": (str,),
                                              "allow_jit": (bool,)}
"""The target's scalar entries and their JSON types (``cuda_archs``: a list of strings)."""


def target_shape_problem(manifest: Mapping[str, Any]) -> str | None:
    """Why the manifest's ``target`` (and ``build.archs``) cannot be read as one; None when
    it can.  A target that is absent or names no arch is read, and named by ``verify``."""
    target = manifest.get("target")
    if target is None:
        return None
    if not isinstance(target, dict):
        return f"`target` must be an object, not {_json_type(target)}"
    if not _strings(target.get("cuda_archs", [])):
        return (f"target.cuda_archs must be a list of strings, not "
                f"{json.dumps(target.get('cuda_archs'))[:60]}")
    for key, types in TARGET_TYPES.items():
        value = target.get(key)
        if value is not None and not isinstance(value, types):
            return f"target.{key} must be a {types[0].__name__}, not {_json_type(value)}"
    build = manifest.get("build")
    if isinstance(build, dict) and not _strings(build.get("archs", [])):
        return f"build.archs must be a list of strings, not {json.dumps(build['archs'])[:60]}"
    return None


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class ManifestTarget:
    """What the manifest says the wheelhouse is for (read after :func:`load_manifest`
    checked its types)."""

    cuda_archs: tuple[str, ...]
    platform: str | None
    python: str | None
    allow_jit: bool
    declared: bool
    """Whether the manifest has a ``target`` at all."""
    build_archs: tuple[str, ...]
    """The build record's archs (``build.archs``: the recipe's, as the build ran)."""


def manifest_target(manifest: Mapping[str, Any]) -> ManifestTarget:
    """The manifest's target, its types as :func:`target_shape_problem` checks them."""
    target = manifest.get("target")
    declared = isinstance(target, dict)
    given: Mapping[str, Any] = target if isinstance(target, dict) else {}
    build = manifest.get("build")
    archs = build.get("archs", []) if isinstance(build, dict) else []
    return ManifestTarget(
        tuple(str(a) for a in given.get("cuda_archs", []) if isinstance(a, str)),
        given.get("platform") if isinstance(given.get("platform"), str) else None,
        given.get("python") if isinstance(given.get("python"), str) else None,
        given.get("allow_jit") is True, declared,
        tuple(str(a) for a in archs if isinstance(a, str)) if isinstance(archs, list) else ())


def recorded_profile(manifest: Mapping[str, Any], where: str) -> list[dict[str, str]] | None:
    """The node profile the manifest records (``build.node_profile``), each entry checked as
    the recipe's are (:func:`sparkbuild.recipe.env_entry_problem`), its reason and source on
    one line; None when it records none.  :class:`VerifyError` names the first bad entry:
    ``install`` writes them into ``profile.sh`` (sourced by ``bin/activate``) and
    ``node.env`` (systemd's ``EnvironmentFile=``)."""
    build = manifest.get("build")
    if build is None:
        return None
    hint = ("do not install it: the profile would run in bin/activate or add lines to "
            "node.env; build the wheelhouse again")
    if not isinstance(build, dict):
        raise VerifyError("manifest.json: `build` must be an object", where=where, hint=hint)
    entries = build.get("node_profile")
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise VerifyError("manifest.json: build.node_profile must be a list", where=where,
                          hint=hint)
    for number, entry in enumerate(entries, start=1):
        problem = profile_entry_problem(entry)
        if problem is not None:
            raise VerifyError(f"manifest.json: build.node_profile entry {number}: {problem}",
                              where=where, hint=hint)
    return entries


def profile_entry_problem(entry: object) -> str | None:
    """Why one entry of a node profile may not be written into a venv; None when it may: a
    key and a value that :func:`sparkbuild.recipe.env_entry_problem` passes, a reason and a
    source on one line."""
    if not (isinstance(entry, dict)
            and all(isinstance(entry.get(k), str) for k in ("key", "value"))
            and all(isinstance(entry.get(k, ""), str) for k in ("reason", "source"))):
        return "it lacks a string key and value"
    unsafe = unsafe_characters(entry.get("reason", "") + entry.get("source", ""))
    return env_entry_problem(entry["key"], entry["value"]) or (
        f"the reason or source of {entry['key']} holds {', '.join(unsafe)}" if unsafe else None)


def expected_hashes(manifest: Mapping[str, Any]) -> dict[str, str]:
    """Every file the manifest vouches for (relative path -> sha256)."""
    expected = {str(w["file"]): str(w["sha256"]) for w in manifest["wheels"]}
    expected.update({str(k): str(v) for k, v in manifest.get("files", {}).items()})
    return expected


def stand_ins_of(manifest: Mapping[str, Any]) -> list[dict[str, str]]:
    """The sources a wheelhouse's build took from another commit than the tree's pin
    (``build.dependencies[].stand_in``: the manifest holds the build's settings under
    ``build``), each with its name and URL."""
    settings = manifest.get("build")
    records = settings.get("dependencies") if isinstance(settings, Mapping) else None
    found: list[dict[str, str]] = []
    for record in records if isinstance(records, list) else []:
        stand_in = record.get("stand_in") if isinstance(record, Mapping) else None
        if isinstance(stand_in, Mapping):
            found.append({"name": str(record.get("name", "")),
                          **{key: str(stand_in.get(key, ""))
                             for key in ("url", "pinned", "used", "reason")}})
    return found


def stand_in_line(stand_in: Mapping[str, str]) -> str:
    """One stand-in as every command prints it (the caller escapes it)."""
    return (f"stand-in: {stand_in.get('name')} built from {stand_in.get('used')}, not the "
            f"tree's pin {stand_in.get('pinned')} ({stand_in.get('reason')})")
