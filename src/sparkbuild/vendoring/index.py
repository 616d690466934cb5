"""The dependency cache's index of vendored things: one owner for each of its namespaces.

The blobs live in the content-addressed :class:`~sparkbuild.store.cache.Cache`; these
namespaces say what each blob is:

* ``sources/KEY`` (``git:URL@REF`` or ``url:URL``): a source tarball or archive, with the
  commit a ref resolved to;
* ``wheelsets/KEY``: the build-requirement wheels of one requirement set, Python and machine;
* ``crates/SHA256-OF-Cargo.lock``: a tarball of ``cargo vendor``'s output;
* ``missed-sources/RECIPE``: sources CMake fetched in an online build that the vendor plan
  did not name, so that the next plan (and bundle) of that recipe includes them.

One directory of the cache holds wheels as they are, outside the blobs:
:data:`FLASHINFER_AOT_WHEELS`, the wheels flashinfer's builder needs, which
:mod:`sparkbuild.flashinfer.builder_wheels` fills and bundles carry.

Readers return an entry only when its blobs are present: an index line whose blob was
removed is no entry at all.  :mod:`sparkbuild.vendoring.fetch` fills them,
:mod:`sparkbuild.bundle.read` imports them from a bundle, and
:mod:`sparkbuild.vendoring.materialize` reads them back.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sparkbuild.store.cache import Cache
from sparkbuild.vendoring.build_deps import CratePlan
from sparkbuild.vendoring.plan import SourcePlan, VendorPlan, source_plan_from

SOURCES = "sources"
WHEELSETS = "wheelsets"
CRATES = "crates"
MISSED_SOURCES = "missed-sources"
FLASHINFER_AOT_WHEELS = "flashinfer-aot"
"""``CACHE/flashinfer-aot/<python tag>/``: the wheels flashinfer's ahead-of-time builder needs
(:mod:`sparkbuild.flashinfer.builder_wheels`), carried by bundles as they are.  Named here,
below both the bundle that carries it and flashinfer that fills it."""


def source_entry(cache: Cache, source: SourcePlan) -> dict[str, Any] | None:
    """The index entry of a vendored source whose blob is present, else None."""
    return source_entry_by_key(cache, source.key)


def source_entry_by_key(cache: Cache, key: str) -> dict[str, Any] | None:
    return _with_blob(cache, SOURCES, key)


def _with_blob(cache: Cache, namespace: str, key: str) -> dict[str, Any] | None:
    """The entry, if the blob its ``sha256`` names is in the cache."""
    entry = cache.lookup(namespace, key)
    digest = entry.get("sha256") if entry else None
    return entry if isinstance(digest, str) and cache.has(digest) else None


def record_source(cache: Cache, key: str, entry: dict[str, Any]) -> None:
    cache.record(SOURCES, key, entry)


def wheelset_entry(cache: Cache, plan: VendorPlan) -> dict[str, Any] | None:
    """The build wheels of ``plan``'s requirement set, if every one of them is present."""
    entry = cache.lookup(WHEELSETS, plan.wheelset_key)
    files = entry.get("files") if entry else None
    if not isinstance(files, dict) or not all(cache.has(str(sha)) for sha in files.values()):
        return None
    return entry


def record_wheelset(cache: Cache, key: str, entry: dict[str, Any]) -> None:
    cache.record(WHEELSETS, key, entry)


def crates_entry(cache: Cache, crate: CratePlan) -> dict[str, Any] | None:
    return _with_blob(cache, CRATES, crate.sha256)


def record_crates(cache: Cache, crate: CratePlan, digest: str) -> None:
    cache.record(CRATES, crate.sha256, {
        "sha256": digest, "count": crate.count, "lockfile": crate.lockfile,
    })


def missed_sources(cache: Cache, recipe_name: str) -> list[SourcePlan]:
    """Sources an earlier online build of this recipe fetched that its plan had missed."""
    entry = cache.lookup(MISSED_SOURCES, recipe_name) or {}
    return [source_plan_from(item) for item in entry.get("sources", [])]


def remember_missed(cache: Cache, recipe_name: str, missed: list[SourcePlan]) -> None:
    """Add ``missed`` to the recipe's record (a source of the same name is replaced)."""
    merged = {s.name: s for s in [*missed_sources(cache, recipe_name), *missed]}
    cache.record(MISSED_SOURCES, recipe_name, {
        "sources": [dataclasses.asdict(source) for source in merged.values()],
    })


def with_missed_sources(plan: VendorPlan, cache: Cache, recipe_name: str) -> VendorPlan:
    """``plan`` plus the recipe's missed sources it does not name yet."""
    names = {source.name for source in plan.sources}
    added = tuple(s for s in missed_sources(cache, recipe_name) if s.name not in names)
    return dataclasses.replace(plan, sources=plan.sources + added) if added else plan
