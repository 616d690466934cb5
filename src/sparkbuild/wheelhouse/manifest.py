"""``manifest.json``: the one description of a wheelhouse, written and read here only.

The manifest says where every byte of a wheelhouse came from (source, patches, toolchain,
build settings), names every file it vouches for with its sha256 (the wheels, the lock and
the ``simple/`` pages), and records what was decided on the way (overrides, the machine
code of each library).  ``wheel`` writes it last; ``verify``, ``install`` and ``verify
--installed`` read it; the sha256 of its bytes is the wheelhouse's fingerprint.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sparkbuild import __version__
from sparkbuild.errors import VerifyError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from sparkbuild.recipe import Recipe

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = 1


def build_manifest(
    recipe: Recipe, *, target: Mapping[str, str], label: str, epoch: int,
    source: dict[str, Any], patches: Sequence[Mapping[str, Any]],
    toolchain: Mapping[str, str | None], build_settings: Mapping[str, Any],
    wheels: Sequence[Mapping[str, Any]], overrides: Sequence[Mapping[str, Any]],
    libraries: Sequence[Mapping[str, Any]], files: Mapping[str, str],
) -> dict[str, Any]:
    """The manifest of a wheelhouse for ``recipe``.

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
        "local_label": label,
        "source_date_epoch": epoch,
        "source": source,
        "patches": [{k: p.get(k) for k in ("name", "sha256", "status")} for p in patches],
        "toolchain": dict(toolchain),
        "build": {"archs": list(recipe.target.cuda_archs), **build_settings},
        "wheels": [dict(wheel) for wheel in wheels],
        "overrides": [dict(override) for override in overrides],
        "libraries": [dict(library) for library in libraries],
        "files": dict(files),
    }


def render_manifest(manifest: Mapping[str, Any]) -> str:
    return json.dumps(manifest, indent=2) + "\n"


def read_manifest(directory: Path) -> dict[str, Any]:
    """The manifest of the wheelhouse ``directory``; :class:`VerifyError` naming what is wrong."""
    return load_manifest(directory)[1]


def load_manifest(directory: Path) -> tuple[bytes, dict[str, Any]]:
    """The manifest's exact bytes and what they say: one read, so that what is checked and
    what is fingerprinted are the same bytes."""
    if not directory.is_dir():
        what = "is not a directory" if directory.exists() else "does not exist"
        raise VerifyError(f"the wheelhouse directory {what}", where=str(directory),
                          hint="check the path; `sparkbuild wheel --out DIR` writes a wheelhouse")
    path = directory / MANIFEST_NAME
    if path.is_symlink():
        raise VerifyError("manifest.json is a symbolic link, not a plain file of the wheelhouse",
                          where=str(path), hint="copy the wheelhouse again (cp -a, rsync -a)")
    try:
        raw = path.read_bytes()
        data = json.loads(raw.decode("utf-8"))
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


def _check_shape(data: dict[str, Any], path: Path) -> None:
    """Each wheel names its file and sha256; ``files`` (if any) maps names to sha256s."""
    for number, wheel in enumerate(data["wheels"], start=1):
        if not (isinstance(wheel, dict) and isinstance(wheel.get("file"), str)
                and isinstance(wheel.get("sha256"), str)):
            raise VerifyError(f"manifest.json: wheels entry {number} lacks its file or sha256",
                              where=str(path), hint="the manifest was edited or is damaged; "
                              "build the wheelhouse again or restore it from its source")
    files = data.get("files", {})
    if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise VerifyError(f"manifest.json: `files` must map file names to sha256s, not "
                          f"{json.dumps(files)[:60]}", where=str(path),
                          hint="the manifest was edited or is damaged; build the wheelhouse "
                          "again or restore it from its source")


def expected_hashes(manifest: Mapping[str, Any]) -> dict[str, str]:
    """Every file the manifest vouches for (relative path -> sha256)."""
    expected = {str(w["file"]): str(w["sha256"]) for w in manifest["wheels"]}
    expected.update({str(k): str(v) for k, v in manifest.get("files", {}).items()})
    return expected
