"""What a wheelhouse takes from the package index: the recipe's pins and the runtime closure.

A pin is fetched byte-identical to the index's file (its sha256 checked); the runtime
closure (every dependency of the built wheels, for the target platform) is resolved with
the pins as requirements (uv overrides only for pins that carry ``override``), downloaded,
and checked against the hashes of the resolution.  Both pass through the content-addressed
cache: a resolution is cached under its inputs, so a second run (``--offline`` too) takes
the same files from there.
"""

from __future__ import annotations

import functools
import json
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from packaging.utils import canonicalize_name, parse_wheel_filename

from sparkbuild.errors import CacheMissError, HashMismatchError, SourceError, VerifyError
from sparkbuild.recipe import refuse_known_bad
from sparkbuild.records import Record
from sparkbuild.store.hashing import sha256_bytes, sha256_file
from sparkbuild.wheelhouse.lock import (
    ClosureTarget,
    LockedRequirement,
    apply_pins,
    restrict_to_pins,
)
from sparkbuild.wheelhouse.overrides import resolve_pinned

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from sparkbuild.recipe import Pin, Recipe
    from sparkbuild.sources.index import IndexFile
    from sparkbuild.store.cache import Cache
    from sparkbuild.wheelhouse.manifest import WheelRole


# -- the outside world, replaceable in tests ---------------------------------------------


class Outside(Protocol):
    """What the wheelhouse needs from the network and the machine."""

    def index_url(self) -> str: ...

    def list_files(self, name: str) -> list[IndexFile]: ...

    def fetch(self, cache: Cache, url: str, sha256: str | None, *, offline: bool) -> Path: ...

    def resolve(self, requirements: Sequence[str], overrides: Sequence[str],
                target: ClosureTarget, index: str) -> list[LockedRequirement]: ...

    def download(self, locked: Sequence[LockedRequirement], dest: Path,
                 target: ClosureTarget, index: str) -> list[Path]: ...

    def toolchain(self) -> dict[str, str | None]: ...


class RealOutside:
    """The package index, uv and pip, and the toolchain on PATH."""

    def index_url(self) -> str:
        from sparkbuild.sources.index import index_url

        return index_url()

    def list_files(self, name: str) -> list[IndexFile]:
        from sparkbuild.sources.index import list_files

        return list_files(self.index_url(), name) or []

    def fetch(self, cache: Cache, url: str, sha256: str | None, *, offline: bool) -> Path:
        from sparkbuild.store.download import fetch_to_cache

        return fetch_to_cache(cache, url, sha256, offline=offline)

    def resolve(self, requirements: Sequence[str], overrides: Sequence[str],
                target: ClosureTarget, index: str) -> list[LockedRequirement]:
        from sparkbuild.wheelhouse.lock import resolve_closure

        return resolve_closure(requirements, overrides, target=target, index=index)

    def download(self, locked: Sequence[LockedRequirement], dest: Path,
                 target: ClosureTarget, index: str) -> list[Path]:
        from sparkbuild.wheelhouse.lock import download_locked

        return download_locked(locked, dest, target=target, index=index)

    def toolchain(self) -> dict[str, str | None]:
        from sparkbuild.toolchain.tools import describe_toolchain

        return describe_toolchain()

# -- the files -----------------------------------------------------------------------


@dataclass(frozen=True)
class WheelhouseFile(Record):
    file: str
    name: str
    version: str
    sha256: str
    size: int
    role: WheelRole
    """``built`` (this build), ``pin`` (a recipe pin) or ``closure`` (a dependency)."""

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)


def _place(source: Path, staging: Path, filename: str, role: WheelRole) -> WheelhouseFile:
    """Copy ``source`` into the staging directory under ``filename``, and describe it."""
    target = staging / filename
    if source.resolve() != target.resolve():
        shutil.copyfile(source, target)
    name, version, _build, _tags = parse_wheel_filename(filename)
    return WheelhouseFile(filename, str(name), str(version), sha256_file(target),
                          target.stat().st_size, role)


# -- pins ------------------------------------------------------------------------------


def _pin_file(pin: Pin, outside: Outside) -> IndexFile:
    """The index's file for ``pin``: the one with the pinned sha256, when it has one."""
    from sparkbuild.sources.index import choose_file

    files = outside.list_files(pin.name)
    if pin.sha256 is None:
        chosen = choose_file(files, pin.name, pin.version, kind="wheel", filename=None)
        if chosen is None:
            raise SourceError(f"the package index has no wheel of {pin.requirement}",
                              hint="check the pin's name and version")
        return chosen
    for file in files:
        if file.sha256 == pin.sha256.lower() and file.filename.endswith(".whl"):
            return file
        if file.sha256 == pin.sha256.lower():
            raise SourceError(f"the pinned sha256 of {pin.requirement} is its sdist's",
                              where=file.filename,
                              hint="pin the sha256 of the wheel: a wheelhouse holds wheels")
    raise HashMismatchError(
        f"the package index has no file of {pin.requirement} with the pinned sha256 "
        f"{pin.sha256}",
        where=", ".join(f"{f.filename} {f.sha256}" for f in files if pin.version in f.filename)
        or None,
        hint="the release was re-uploaded or the pin is wrong; check the recipe's [[pins]]",
    )


def fetch_pin(pin: Pin, cache: Cache, staging: Path, outside: Outside, *,
              offline: bool) -> WheelhouseFile:
    """Bring one pinned wheel, byte-identical to the index's, into the staging directory."""
    refuse_known_bad(pin)
    key = f"{canonicalize_name(pin.name)}=={pin.version}"
    known = cache.lookup("pins", key)
    if known and pin.sha256 not in (None, known.get("sha256")):
        known = None
    if known is None and offline:
        raise CacheMissError(
            f"the pinned wheel {pin.requirement} is not in the cache and --offline forbids "
            "the index", where=str(cache.root), hint="run `sparkbuild wheel` once online")
    if known is None:
        found = _pin_file(pin, outside)
        known = {"url": found.url, "filename": found.filename,
                 "sha256": pin.sha256 or found.sha256}
    sha = known.get("sha256")
    path = outside.fetch(cache, str(known["url"]), sha if isinstance(sha, str) else None,
                         offline=offline)
    cache.record("pins", key, {**known, "sha256": path.name})
    return _place(path, staging, str(known["filename"]), "pin")


# -- the runtime closure ---------------------------------------------------------------


def closure_key(requirements: Sequence[str], overrides: Sequence[str],
                target: ClosureTarget, index: str) -> str:
    """The cache key of one resolution: its inputs, hashed."""
    inputs = {"requirements": sorted(requirements), "overrides": sorted(overrides),
              "index": index, **target.key()}
    return sha256_bytes(json.dumps(inputs, sort_keys=True).encode())


def _cached_closure(cache: Cache, key: str, staging: Path) -> list[WheelhouseFile] | None:
    record = cache.lookup("closures", key)
    if record is None:
        return None
    placed = []
    for entry in record.get("files", []):
        try:
            path = cache.path_of(str(entry["sha256"]))
        except (CacheMissError, VerifyError) as exc:
            raise CacheMissError(f"the cache lost {entry['file']} of the runtime closure",
                                 where=str(cache.root),
                                 hint="run `sparkbuild wheel` once online to fetch it again",
                                 ) from exc
        placed.append(_place(path, staging, str(entry["file"]), "closure"))
    return placed


def _download_closure(locked: Sequence[LockedRequirement], cache: Cache, staging: Path,
                      target: ClosureTarget, index: str, outside: Outside
                      ) -> list[WheelhouseFile]:
    incoming = staging / ".incoming"
    placed = []
    for path in outside.download(locked, incoming, target, index):
        cache.put_file(path, name=path.name)
        placed.append(_place(path, staging, path.name, "closure"))
        path.unlink()
    shutil.rmtree(incoming, ignore_errors=True)
    allowed = {digest for item in locked for digest in item.hashes}
    for item in placed:
        if item.sha256 not in allowed:
            raise HashMismatchError(f"{item.file} is not a file the lock allows",
                                    where=str(staging / item.file))
    missing = {r.key for r in locked} - {f.key for f in placed}
    if missing:
        raise CacheMissError(f"no wheel was downloaded for: {', '.join(sorted(missing))}",
                             hint="the index lacks a wheel for the target platform")
    return placed


@dataclass(frozen=True)
class Fetching:
    """Where a closure's wheels come from and go: the cache, the directory they are placed
    in, the index and machine (``outside``), and whether the network may be used."""

    cache: Cache
    staging: Path
    outside: Outside
    offline: bool


def fetch_closure(requirements: Sequence[str], pins: Sequence[Pin], skip: set[str],
                  target: ClosureTarget, fetching: Fetching, *,
                  bundled: Sequence[dict[str, Any]] | None = None) -> list[WheelhouseFile]:
    """The runtime closure's wheels, except the projects in ``skip`` (built and pinned).

    A resolution is cached under its inputs and reused, online too: the same inputs give
    the same wheelhouse until the recipe or the built wheels' requirements change.
    ``bundled``: the closure a bundle carried (:func:`place_bundled`), taken offline when
    the cache holds no resolution of these inputs.
    """
    cache, staging, outside, offline = (fetching.cache, fetching.staging, fetching.outside,
                                        fetching.offline)
    merged = apply_pins(requirements, pins)
    if not merged:
        return []
    overrides = [pin.requirement for pin in pins if pin.override]
    index = outside.index_url()
    key = closure_key(merged, overrides, target, index)
    cached = _cached_closure(cache, key, staging)
    if cached is not None:
        return cached
    if offline and bundled is not None:
        return place_bundled(bundled, merged, skip, cache, staging, target)
    if offline:
        raise CacheMissError(
            f"the runtime closure for {target.describe()} is not in the cache "
            f"({len(merged)} requirements: {', '.join(sorted(merged))})",
            where=str(cache.root),
            hint="run `sparkbuild wheel` once online with the same recipe and --platform")

    def resolve(reqs: Sequence[str], forced: Sequence[str]) -> list[LockedRequirement]:
        return outside.resolve(reqs, forced, target, index)

    locked = restrict_to_pins(resolve_pinned(resolve, merged, pins), pins)
    wanted = [item for item in locked if item.key not in skip]
    placed = _download_closure(wanted, cache, staging, target, index, outside)
    cache.record("closures", key, {"target": target.key(), "requirements": sorted(merged),
                                   "files": [f.to_dict() for f in placed]})
    return placed


# -- what a bundle carries -------------------------------------------------------------


def bundle_target(recipe: Recipe) -> ClosureTarget:
    """The closure a bundle carries: for the recipe's platform and Python (the node's)."""
    return ClosureTarget(recipe.target.platform or None,
                         recipe.target.python if recipe.target.platform else None)


def declared_texts(tree: Path, not_in_wheel: Sequence[str] = ()) -> list[str]:
    from sparkbuild.sources.declared import find_declared

    # a tree without requirement files: only the pins
    return [line.text for line in find_declared(tree, not_in_wheel) or []]


def bundle_runtime(recipe: Recipe, tree: Path, cache: Cache, dest: Path, *, closure: bool,
                   offline: bool, outside: Outside | None = None) -> dict[str, Any]:
    """The recipe's pins and, unless ``closure`` is False, the runtime closure of the tree's
    declared requirements for the recipe's platform and Python, written into ``dest``; the
    record the bundle keeps of them (``plan.json``'s ``runtime``)."""
    from sparkbuild.wheelhouse.requirements_check import CLOSURE_LEFT_OUT

    outside = outside or RealOutside()
    target = bundle_target(recipe)
    dest.mkdir(parents=True, exist_ok=True)
    requirements = declared_texts(tree, recipe.source.not_in_wheel)
    with cache.locked():
        pins = [fetch_pin(p, cache, dest, outside, offline=offline) for p in recipe.pins]
        skip = {canonicalize_name(recipe.package), *(f.key for f in pins)}
        files = fetch_closure(requirements, recipe.pins, skip, target,
                              Fetching(cache, dest, outside, offline)) if closure else []
    urls: dict[str, Any] = {}
    for pin in recipe.pins:
        known = cache.lookup("pins", f"{canonicalize_name(pin.name)}=={pin.version}") or {}
        urls[canonicalize_name(pin.name)] = known.get("url")
    return {
        "target": target.key(), "platform": target.platform, "python": target.python,
        "closure": "included" if closure else CLOSURE_LEFT_OUT,
        "requirements": sorted(apply_pins(requirements, recipe.pins)),
        "pins": [{**f.to_dict(), "url": urls.get(f.key)} for f in pins],
        "files": [f.to_dict() for f in files],
    }


def bundle_runtime_for(recipe: Recipe, *, closure: bool, offline: bool
                       ) -> Callable[[Path, Cache, Path], dict[str, Any]]:
    """:func:`bundle_runtime` for ``recipe`` as ``bundle`` calls it
    (:func:`sparkbuild.bundle.write.assemble`, a room below this one, takes it as given)."""
    return functools.partial(bundle_runtime, recipe, closure=closure, offline=offline)


def bundle_lacks(requirements: Sequence[str], have: set[str], target: ClosureTarget
                 ) -> list[str]:
    """The requirements (live at ``target``) whose project is not in ``have``."""
    from packaging.requirements import InvalidRequirement, Requirement

    from sparkbuild.wheelhouse.overrides import target_environment

    env = target_environment(target.platform, target.python)
    lacking = []
    for text in requirements:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate(
                {**env, "extra": ""}):
            continue
        if canonicalize_name(requirement.name) not in have:
            lacking.append(text)
    return sorted(set(lacking))


def runtime_gaps(pins: Sequence[Pin], cache: Cache, runtime: dict[str, Any] | None,
                 requirements: Sequence[str], *, closure: bool, skip: set[str]) -> list[str]:
    """What an offline wheelhouse will lack, named before anything compiles: each pin the
    cache does not hold, and (with a bundle's closure) each live requirement of the tree
    whose project the bundle does not carry."""
    gaps = []
    for pin in pins:
        known = cache.lookup("pins", f"{canonicalize_name(pin.name)}=={pin.version}")
        sha = known.get("sha256") if known else None
        if not isinstance(sha, str) or not cache.has(sha) or pin.sha256 not in (None, sha):
            gaps.append(f"pin {pin.requirement}: not in the cache"
                        + (" nor in the bundle" if runtime is not None else ""))
    if closure and runtime is not None and runtime.get("closure") == "included":
        target = ClosureTarget(runtime.get("platform"), runtime.get("python"))
        have = skip | {canonicalize_name(str(f["name"])) for f in runtime.get("files", [])}
        have |= {canonicalize_name(p.name) for p in pins}
        gaps += [f"closure {text}: the bundle carries no wheel of it"
                 for text in bundle_lacks(apply_pins(list(requirements), pins), have, target)]
        for item in runtime.get("files", []):
            if not cache.has(str(item["sha256"])):
                gaps.append(f"closure {item['file']}: not in the cache")
    return gaps



def refuse_runtime_gaps(recipe: Recipe, cache: Cache, runtime: dict[str, Any] | None,
                        tree: Path, *, closure: bool, bundle: Path | None,
                        also: Sequence[str] = ()) -> None:
    """For an offline build, before anything compiles: every pin, and a bundle's closure
    for the tree's requirements, must be there (:func:`runtime_gaps`), with ``also`` (the
    wheels flashinfer's builder needs); each one missing is named."""
    gaps = runtime_gaps(recipe.pins, cache, runtime,
                        declared_texts(tree, recipe.source.not_in_wheel), closure=closure,
                        skip={canonicalize_name(recipe.package)}) + list(also)
    if gaps:
        where = f"the bundle {bundle}" if bundle else "the cache"
        raise CacheMissError(
            f"{where} lacks {len(gaps)} wheel(s) the wheelhouse needs:\n  " + "\n  ".join(gaps),
            where=str(bundle or cache.root),
            hint="write the bundle again with this sparkbuild (`sparkbuild bundle` carries the "
            "pins, the closure and flashinfer's builder wheels), or run `sparkbuild wheel` once "
            "online with this cache; nothing was built")

def place_bundled(bundled: Sequence[dict[str, Any]], requirements: Sequence[str],
                  skip: set[str], cache: Cache, staging: Path, target: ClosureTarget
                  ) -> list[WheelhouseFile]:
    """The closure a bundle carried, for an offline wheelhouse whose resolution is not in
    the cache: every requirement of the built wheels must be among its projects."""
    have = skip | {canonicalize_name(str(f["name"])) for f in bundled}
    lacking = bundle_lacks(requirements, have, target)
    if lacking:
        raise CacheMissError(
            f"the bundle's runtime closure lacks {', '.join(lacking)}",
            where=str(cache.root),
            hint="the built wheels require more than the tree declared when it was bundled; "
            "write the bundle again, or pass --no-closure to leave the closure to the node")
    placed = []
    for entry in bundled:
        if canonicalize_name(str(entry["name"])) in skip:
            continue
        try:
            path = cache.path_of(str(entry["sha256"]))
        except (CacheMissError, VerifyError) as exc:
            raise CacheMissError(f"the cache lost {entry['file']} of the bundle's closure",
                                 where=str(cache.root)) from exc
        placed.append(_place(path, staging, str(entry["file"]), "closure"))
    return placed
