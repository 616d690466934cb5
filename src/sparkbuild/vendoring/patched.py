"""The series' arch edit on every vendored source, applied when the source enters the cache.

A dependency the build compiles (vllm-flash-attn, fetched by vLLM's FetchContent) has CMake
arch lists of its own -- ``CUDA_SUPPORTED_ARCHS`` cut to ``12.0`` at 12.1a, ``FA2_ARCHS
"8.0+PTX"`` -- that the tree's series never sees.  So every ``cuda-arch-lists`` edit of the
recipe's series (:mod:`sparkbuild.patches.edits.arch_lists`) also runs on each vendored
source, the same criterion as on the tree: native 12.1 code in every list that gives the
target anything.  Nothing here knows a dependency by name.

* The edit runs on the checkout (or the unpacked archive) before it is stored in the cache;
  a source whose CMake names no CUDA arch is stored as it came.  The dependency's own
  ``cmake/utils.cmake`` is its arithmetic; one without uses the tree's (a subproject sees the
  including project's functions).
* The copy is stored under its own key: the upstream key plus ``#series:LABEL``, LABEL a
  digest of the arch edits' bytes and the recipe's targets.  A copy vendored without a
  recipe (``sparkbuild vendor --tree``) stays under the upstream key, so an unpatched copy
  is never served for a patched one, nor one patched for other targets or another series.
* The index entry records what the edit did (``patched``: per edit, the lists before and
  after, the files changed); the bundle's plan, the wheelhouse manifest and ``patch status
  --json`` (``dependencies``) report it, and the wheel's SBOM says whether each source built
  into it was patched (:func:`built_in_sources`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.console import step, warn
from sparkbuild.errors import PatchError, RecipeError
from sparkbuild.store.hashing import sha256_bytes

if TYPE_CHECKING:
    from sparkbuild.patches.edits.arch_lists import ArchListsEdit
    from sparkbuild.recipe import Recipe
    from sparkbuild.store.cache import Cache
    from sparkbuild.vendoring.plan import SourcePlan, VendorPlan

KEY_MARK = "#series:"


@dataclass(frozen=True)
class ArchPatch:
    """One ``cuda-arch-lists`` patch of the series, set up for dependencies."""

    name: str
    sha256: str
    edit: ArchListsEdit


@dataclass(frozen=True)
class DependencyEdit:
    """The series' arch edits as they apply to a vendored source."""

    label: str
    """Digest of the edits' bytes and the targets: part of a patched source's cache key."""
    patches: tuple[ArchPatch, ...]
    targets: tuple[str, ...]

    def key(self, upstream_key: str) -> str:
        return f"{upstream_key}{KEY_MARK}{self.label}"


def dependency_edit(recipe: Recipe) -> DependencyEdit | None:
    """The arch edits of ``recipe``'s series, for dependencies; None if it has none."""
    from sparkbuild.patches.edits import EditContext
    from sparkbuild.patches.edits.arch_lists import ArchListsEdit
    from sparkbuild.patches.series import EditPatch, load_series

    series = load_series(recipe.series, EditContext.for_recipe(recipe))
    patches = tuple(
        ArchPatch(p.name, p.sha256, dataclasses.replace(p.edit, root_is_optional=True))
        for p in series.patches
        if isinstance(p, EditPatch) and isinstance(p.edit, ArchListsEdit)
    )
    if not patches:
        return None
    targets = tuple(recipe.target.cuda_archs)
    label = sha256_bytes(json.dumps(
        {"patches": [[p.name, p.sha256] for p in patches], "targets": targets},
        sort_keys=True).encode())[:16]
    return DependencyEdit(label, patches, targets)


def with_dependency_edit(plan: VendorPlan, edit: DependencyEdit | None) -> VendorPlan:
    """``plan`` with each source marked for ``edit`` (its cache key says so)."""
    if edit is None:
        return plan
    sources = tuple(dataclasses.replace(s, patched=edit.label) for s in plan.sources)
    return dataclasses.replace(plan, sources=sources)


def apply_to_source(edit: DependencyEdit, root: Path, name: str, utils: Path | None
                    ) -> dict[str, Any]:
    """Run the arch edits on the source at ``root`` (in place); the record of what they did.

    A source the edit cannot judge (its CMake's arithmetic unknown to the edit) is kept as
    it came, and the record says why: ``verify`` still judges the kernels it compiles.
    """
    outcomes: list[dict[str, Any]] = []
    for patch in edit.patches:
        entry: dict[str, Any] = {"patch": patch.name, "sha256": patch.sha256}
        if not (root / patch.edit.file).is_file():
            outcomes.append({**entry, "status": "not-applicable",
                             "detail": f"no {patch.edit.file}"})
            continue
        try:
            planned = dataclasses.replace(patch.edit, utils=utils).plan(root)
        except (PatchError, RecipeError) as exc:
            warn(f"{name}: the series' {patch.name} cannot judge its arch lists: {exc.what}; "
                 "left as it came")
            outcomes.append({**entry, "status": "failed", "detail": exc.what})
            continue
        for change in planned.changes:
            (root / change.path).write_text(change.new, encoding="utf-8")
        if planned.changes:
            step(f"{name}: {patch.name}: " + "; ".join(planned.notes))
        details = planned.details or {}
        outcomes.append({
            **entry, "status": "applied" if planned.changes else "unchanged",
            "files": [change.path for change in planned.changes],
            "notes": list(planned.notes), "details": details,
        })
    return {"label": edit.label, "targets": list(edit.targets), "patches": outcomes}


def tree_utils(tree: Path) -> Path | None:
    """The including tree's helper, for dependencies without their own."""
    from sparkbuild.toolchain.archs import UTILS_CMAKE

    utils = tree / UTILS_CMAKE
    return utils if utils.is_file() else None


def dependency_records(plan: VendorPlan, cache: Cache) -> list[dict[str, Any]]:
    """Per planned source: what the arch edit did to its cached copy (``patch status``)."""
    return [source_record(source, entry) for source, entry in _cached(plan, cache)]


def built_in_sources(plan: VendorPlan, cache: Cache) -> list[dict[str, Any]]:
    """The sources built into the wheel, for its SBOM: each with the commit its ref resolved
    to and whether the series' arch edit changed it (``patched``), both from the cache's
    record (:func:`source_record`)."""
    return [{"name": source.name, "kind": source.kind, "url": source.url, "ref": source.ref,
             "commit": (entry or {}).get("commit"), "sha256": source.sha256,
             "patched": source_record(source, entry)["status"] == "applied",
             **({"stand_in": source.stand_in.to_dict()} if source.stand_in else {})}
            for source, entry in _cached(plan, cache)]


def _cached(plan: VendorPlan, cache: Cache) -> list[tuple[SourcePlan, dict[str, Any] | None]]:
    """Each planned source with the cache's index entry of it (None: not in the cache)."""
    from sparkbuild.vendoring.index import source_entry

    return [(source, source_entry(cache, source)) for source in plan.sources]


def source_record(source: SourcePlan, entry: dict[str, Any] | None) -> dict[str, Any]:
    """One dependency's line in a report: its key, and the edit's record (or why none)."""
    record: dict[str, Any] = {"name": source.name, "key": source.key, "url": source.url,
                              "ref": source.ref}
    if source.stand_in is not None:
        record["stand_in"] = source.stand_in.to_dict()
    if entry is None:
        record["patched"] = None
        record["status"] = "not in the cache"
    elif entry.get("patched") is None:
        record["patched"] = None
        record["status"] = "not patched (vendored without a recipe's series)"
    else:
        record["patched"] = entry["patched"]
        states = {p["status"] for p in entry["patched"]["patches"]}
        record["status"] = ("applied" if "applied" in states else
                            "failed" if "failed" in states else "unchanged")
    return record


def dependency_status(tree: Path, recipe: Recipe, cache_root: Path) -> list[dict[str, Any]]:
    """``patch status --cache``: the tree's vendor plan (with the recipe's choices and its
    arch edit), and for each source what its cached copy holds."""
    from sparkbuild.store.cache import Cache
    from sparkbuild.vendoring.fetch import vendor_for_recipe

    cache = Cache(cache_root.expanduser().resolve())
    vendored = vendor_for_recipe(tree, cache, recipe, offline=True, wheels=False)
    return dependency_records(vendored.plan, cache)
