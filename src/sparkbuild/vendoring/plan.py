"""`sparkbuild vendor`: find everything a build would download, and store it in the cache.

Three kinds of things break an air-gapped build of vLLM, often an hour in:

* FetchContent sources (CUTLASS, flash-attention, FlashMLA, DeepGEMM, ...).  They are
  found by running the tree's own CMake with real cmake in script mode under a few
  assumption sets (:mod:`sparkbuild.vendoring.sources`), ``cmake/external_projects``
  included, and pinned as the tree pins them.  A real configure cannot run instead: it
  needs a CUDA build of torch and nvcc, and clones every dependency as it goes.  CMake
  still has the last word at build time: every build runs with sparkbuild's dependency
  provider (``build_tools/sparkbuild_provider.cmake``), which records each dependency the
  real configure asks for; one the plan missed is vendored from that record after an
  online build, and an offline build stops at configure naming it.
* Build requirements: ``[build-system] requires`` and ``requirements/build*`` of the
  tree, as wheels (torch at the tree's pin); planned by
  :mod:`sparkbuild.vendoring.build_deps`.
* Cargo crates, where the tree has a Cargo.lock (``cargo vendor``); planned there too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from sparkbuild.errors import RecipeError, SourceError, SparkbuildError
from sparkbuild.records import EMPTY, NONE, Record, as_json
from sparkbuild.store.hashing import sha256_bytes
from sparkbuild.vendoring.build_deps import CratePlan, WheelPlan, plan_crates, plan_wheels
from sparkbuild.vendoring.placeholders import Placeholder
from sparkbuild.vendoring.sources import (
    Recorded,
    override_of,
    record_assumptions,
    relative_where,
    source_fields,
)

if TYPE_CHECKING:
    from sparkbuild.recipe import StandIn
    from sparkbuild.sources.mirrors import Mirrors
    from sparkbuild.toolchain.cmake_recorder import FetchDeclaration
    from sparkbuild.vendoring.patched import DependencyEdit


DISCOVERY = "cmake-recorder"
"""How sources are found; see the module docstring."""




ExternalKind = Literal["git", "url"]
"""How the configure fetches an external source: a git checkout, or a download."""
EXTERNAL_KINDS: tuple[ExternalKind, ...] = ("git", "url")
VendoredKind = Literal["source", "wheels", "crates"]
"""What vendoring fetches: an external source, the build requirements' wheels, or the
crates of a Cargo.lock."""
VendorStatus = Literal["cached", "fetched"]
"""Whether a vendored part was already in the cache, or was fetched now."""


@dataclass(frozen=True)
class SourcePlan(Record):
    """One external source the configure fetches."""

    json_order: ClassVar[tuple[str, ...]] = (
        "name", "url", "ref", "kind", "method", "where", "certain",
    )

    name: str
    kind: ExternalKind
    url: str
    ref: str | None = field(metadata=as_json(skip=True))
    """GIT_TAG for git sources; None for URL sources."""
    url_hash: str | None = field(default=None, metadata=as_json(omit=EMPTY))
    """``ALGO=hex`` from URL_HASH, for URL sources."""
    method: str = "declare"
    where: str = ""
    certain: bool = True
    override: str | None = field(default=None, metadata=as_json(omit=EMPTY))
    """The tree's own ``*_SRC_DIR`` variable that points the build at a local copy."""
    override_subdir: str | None = field(default=None, metadata=as_json(skip=True))
    submodules: tuple[str, ...] | None = field(default=None, metadata=as_json(omit=NONE))
    """None: all of them (FetchContent's default)."""
    mirrors: tuple[str, ...] = field(default=(), metadata=as_json(skip=True))
    patched: str | None = field(default=None, metadata=as_json(omit=EMPTY))
    """The label of the series' arch edit this source is vendored with
    (:mod:`sparkbuild.vendoring.patched`); None: as upstream has it."""
    stand_in: StandIn | None = field(default=None, metadata=as_json(omit=NONE))
    """The recipe's ``[[vendor.stand_in]]`` for this source: built from its ``used``
    commit, never silently."""
    placeholder: Placeholder | None = field(default=None, metadata=as_json(omit=NONE))
    """For a source only left-out extensions use: what the build gets instead of it
    (:mod:`sparkbuild.vendoring.placeholders`); None: an empty directory (``[vendor]
    exclude``), or, for a kept source, its copy at the pin."""

    @property
    def fetch_ref(self) -> str | None:
        """The ref fetched: the stand-in's commit, else the pin."""
        return self.stand_in.used if self.stand_in else self.ref

    @property
    def upstream_key(self) -> str:
        """Git sources by URL and ref, URL sources by URL: the pristine copy's key (a
        stand-in's by the commit it stands in with)."""
        if self.kind != "git":
            return f"url:{self.url}"
        return f"git:{self.url}@{self.ref}" + (
            f"#stand-in:{self.stand_in.used}" if self.stand_in else "")

    def commit_problem(self, commit: str | None) -> str | None:
        """Why a copy at ``commit`` is not this source (a pin or stand-in that is a commit
        names another one); None when it is, or when the ref is a tag or branch."""
        expected = (self.fetch_ref or "").lower()
        if self.kind != "git" or not re.fullmatch(r"[0-9a-f]{7,40}", expected):
            return None
        if commit and (commit.lower().startswith(expected) or expected.startswith(
                commit.lower())):
            return None
        wanted = (f"the stand-in commit {expected} (for the pin {self.ref})" if self.stand_in
                  else f"its pin {expected}")
        return f"{self.name}: the copy is at {commit or 'an unrecorded commit'}, not {wanted}"

    @property
    def key(self) -> str:
        """The cache index key: the upstream key, plus ``#series:LABEL`` when patched."""
        return self.upstream_key + (f"#series:{self.patched}" if self.patched else "")

    @property
    def sha256(self) -> str | None:
        if self.url_hash and self.url_hash.lower().startswith("sha256="):
            return self.url_hash.split("=", 1)[1].lower()
        return None

    def json_extra(self) -> dict[str, Any]:
        # A URL source's pin is its hash: "ref" carries it so every source has one.
        return {"ref": self.ref if self.kind == "git" else self.url_hash}


def source_plan_from(item: Mapping[str, Any]) -> SourcePlan:
    """A :class:`SourcePlan` from its ``dataclasses.asdict`` form read back from JSON
    (lists become tuples again); keys that are not fields are ignored."""
    fields = {f.name for f in dataclasses.fields(SourcePlan)}
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                              for k, v in item.items()
                              if k in fields and k not in ("placeholder", "stand_in")}
    return SourcePlan(**values)


@dataclass(frozen=True)
class VendorPlan(Record):
    json_order: ClassVar[tuple[str, ...]] = (
        "tree", "discovery", "sources", "wheels", "torch", "crates", "cargo", "unreached",
        "excluded", "crates_left_out",
    )

    tree: Path
    sources: tuple[SourcePlan, ...]
    unreached: tuple[SourcePlan, ...]
    wheels: tuple[WheelPlan, ...]
    crates: tuple[CratePlan, ...] = field(metadata=as_json("cargo"))
    torch: str | None
    excluded: tuple[SourcePlan, ...] = ()
    """Sources the recipe leaves out (``[vendor] exclude``): the build gets an empty
    directory in their place, and the report says so."""
    notes: tuple[str, ...] = ()
    crates_left_out: tuple[CratePlan, ...] = ()
    """Cargo crates the recipe leaves out (``[vendor] crates = false``): not vendored, and
    the build goes without the Rust extensions they serve; the report says so."""
    reused: str | None = field(default=None, compare=False, metadata=as_json(skip=True))
    """When the recorder's part was kept, if it was reused
    (:mod:`sparkbuild.vendoring.kept_plan`)."""

    @property
    def crate_count(self) -> int:
        return sum(plan.count for plan in self.crates)

    @property
    def requirements(self) -> list[str]:
        return [wheel.requirement for wheel in self.wheels]

    @property
    def wheelset_key(self) -> str:
        """The cache key of the build-requirement wheels for this Python and machine."""
        payload = json.dumps(
            {"requirements": sorted(set(self.requirements)), "python": python_tag()},
            sort_keys=True,
        )
        return sha256_bytes(payload.encode())

    def json_extra(self) -> dict[str, Any]:
        return {"discovery": DISCOVERY, "crates": self.crate_count}


def adjust_plan(plan: VendorPlan, *, submodules: Mapping[str, tuple[str, ...]] | None = None,
                exclude: tuple[str, ...] = (), crates: bool = True,
                placeholders: tuple[Placeholder, ...] = (),
                stand_ins: tuple[StandIn, ...] = ()) -> VendorPlan:
    """The recipe's ``[vendor]`` choices applied to a plan.

    ``submodules`` narrows the submodules of a git source (like CMake's GIT_SUBMODULES);
    ``exclude`` moves sources to :attr:`VendorPlan.excluded`.  Every name must be one
    the plan holds: a misspelt name is an error, never a silent no-op.  ``crates=False``
    moves the Cargo crates to :attr:`VendorPlan.crates_left_out`.  ``placeholders``
    (the extension set's) move their sources there too, each with its placeholder; a
    placeholder for a source the plan does not hold is ignored (another branch's).
    ``stand_ins`` (``[[vendor.stand_in]]``) give git sources the commit they are built from;
    each must name a git source of the plan at its pin.
    """
    submodules = dict(submodules or {})
    names = {source.name for source in plan.sources}
    unknown = sorted((set(submodules) | set(exclude)) - names)
    if unknown:
        raise RecipeError(
            f"[vendor] names {', '.join(unknown)}, which the tree does not fetch",
            hint=f"the tree fetches: {', '.join(sorted(names)) or 'nothing'}",
        )
    _refuse_unmatched_stand_ins(plan, stand_ins)
    kept: list[SourcePlan] = []
    excluded: list[SourcePlan] = []
    standing_in = {placeholder.name: placeholder for placeholder in placeholders}
    for source in plan.sources:
        if source.name in submodules:
            source = dataclasses.replace(source, submodules=tuple(submodules[source.name]))
        stand_in = next((s for s in stand_ins if s.matches(source.url, source.ref)), None)
        if source.kind == "git" and stand_in is not None:
            source = dataclasses.replace(source, stand_in=stand_in)
        if source.name in standing_in and source.name not in exclude:
            source = dataclasses.replace(source, placeholder=standing_in[source.name])
        (excluded if source.name in exclude or source.placeholder else kept).append(source)
    plan = dataclasses.replace(plan, sources=tuple(kept), excluded=tuple(excluded))
    if not crates:
        plan = dataclasses.replace(plan, crates=(), crates_left_out=plan.crates)
    return plan


def _refuse_unmatched_stand_ins(plan: VendorPlan, stand_ins: tuple[StandIn, ...]) -> None:
    """A stand-in that names no git source of the plan at its pin is an error, never a
    silent no-op (a misspelt URL, or a tree that moved its pin since the entry was written)."""
    git = [source for source in (*plan.sources, *plan.unreached) if source.kind == "git"]
    for stand_in in stand_ins:
        if any(stand_in.matches(source.url, source.ref) for source in git):
            continue
        same_url = [source for source in git if stand_in.same_url(source.url)]
        if same_url:
            pins = ", ".join(f"{source.name} @ {source.ref}" for source in same_url)
            raise RecipeError(
                f"[[vendor.stand_in]] for {stand_in.url} names the pin {stand_in.pinned}, "
                f"but the tree pins {pins}",
                hint="set pinned to the tree's pin, or drop the entry if the pin is at hand")
        fetched = ", ".join(sorted({source.url for source in git})) or "no git source"
        raise RecipeError(
            f"[[vendor.stand_in]] names {stand_in.url}, which the tree does not fetch",
            hint=f"the tree's git sources: {fetched}")


def python_tag() -> str:
    """The interpreter and machine the build requirements are for (the build's own)."""
    return f"cp{sys.version_info.major}{sys.version_info.minor}-{platform.machine()}"


# -- FetchContent sources ----------------------------------------------------------------


def _plan_of(declaration: FetchDeclaration, tree: Path, certain: bool,
             overrides: Recorded | None) -> SourcePlan | None:
    fields = source_fields(declaration)
    if fields is None:
        return None  # SOURCE_DIR only: a local copy, nothing to fetch
    override, local_has_subdir = (None, True)
    if overrides is not None:
        override, local_has_subdir = override_of(declaration.name, overrides)
    subdir = fields.pop("subdir")
    return SourcePlan(
        name=declaration.name, method=declaration.method,
        where=relative_where(declaration, tree), certain=certain, override=override,
        # A local copy declared without SOURCE_SUBDIR: the override names the subdirectory
        # itself (triton_kernels: TRITON_KERNELS_SRC_DIR is the python package).
        override_subdir=subdir if override and not local_has_subdir else None, **fields,
    )


def plan_sources_from(
    recorded: list[Recorded], tree: Path
) -> tuple[list[SourcePlan], list[SourcePlan]]:
    """(sources a CUDA build fetches, sources only other builds fetch), from the records."""
    cuda = [r for r in recorded if r.assumption.device == "cuda" and not r.assumption.overrides]
    overrides = next((r for r in recorded if r.assumption.overrides), None)
    seen_in: dict[str, int] = {}
    for run in cuda:
        keys = set()
        for declaration in run.record.declarations:
            plan = _plan_of(declaration, tree, True, None)
            if plan is not None:
                keys.add(plan.key)
        for key in keys:
            seen_in[key] = seen_in.get(key, 0) + 1
    reached: dict[str, SourcePlan] = {}
    for run in cuda:
        for declaration in run.record.declarations:
            plan = _plan_of(declaration, tree, False, overrides)
            if plan is not None and plan.key not in reached:
                reached[plan.key] = replace(plan, certain=seen_in[plan.key] == len(cuda))
    unreached: dict[str, SourcePlan] = {}
    for run in recorded:
        if run in cuda or run is overrides:
            continue
        for declaration in run.record.declarations:
            plan = _plan_of(declaration, tree, True, None)
            if plan is not None and plan.key not in reached:
                unreached.setdefault(plan.key, plan)
    return list(reached.values()), list(unreached.values())


def recorder_notes(recorded: list[Recorded]) -> list[str]:
    """Runs a CMake error cut short: what they recorded is in the plan, what follows is not."""
    return [f"{run.assumption.name}: the tree's CMake stopped with an error in script mode; "
            "declarations after it are not in the plan" for run in recorded
            if not run.record.complete]


@dataclass(frozen=True)
class RecordedSources:
    """The part of a plan the recorder's CMake runs decide (the costly part: seconds each)."""

    sources: tuple[SourcePlan, ...]
    unreached: tuple[SourcePlan, ...]
    notes: tuple[str, ...]
    reused: str | None = field(default=None, compare=False)
    """When a kept record was made, if this one was reused."""


SourcesOf = Callable[[Path, Mapping[str, str], str | None], RecordedSources]
"""(tree, environment, torch pin) -> the recorder's part: :func:`record_sources`, or
:func:`sparkbuild.vendoring.kept_plan.reusing` in front of it."""


def record_sources(tree: Path, env: Mapping[str, str], torch: str | None) -> RecordedSources:
    """The tree's CMake recorded under every assumption set, as planned sources."""
    recorded = record_assumptions(tree, env, torch)
    sources, unreached = plan_sources_from(recorded, tree)
    return RecordedSources(tuple(sources), tuple(unreached), tuple(recorder_notes(recorded)))


# -- the plan and the stage ----------------------------------------------------------------


def plan_tree(tree: Path, *, env: Mapping[str, str] | None = None,
              sources_of: SourcesOf = record_sources) -> VendorPlan:
    """Everything the build of ``tree`` would fetch; reads files only.  ``sources_of``
    gives the recorder's part (a kept one, with :mod:`sparkbuild.vendoring.kept_plan`)."""
    tree = Path(tree).resolve()
    if not (tree / "CMakeLists.txt").is_file() and not (tree / "pyproject.toml").is_file():
        raise SourceError(
            "not a source tree: no CMakeLists.txt or pyproject.toml", where=str(tree),
            hint="point --tree at a prepared tree (`sparkbuild prepare --dest DIR`)",
        )
    environment = dict(os.environ if env is None else env)
    wheels, torch = plan_wheels(tree)
    recorded = RecordedSources((), (), ())
    if (tree / "CMakeLists.txt").is_file():
        recorded = sources_of(tree, environment, torch)
    return VendorPlan(tree, recorded.sources, recorded.unreached, tuple(wheels),
                      tuple(plan_crates(tree)), torch, notes=recorded.notes,
                      reused=recorded.reused)


@dataclass
class VendorEntry(Record):
    kind: VendoredKind
    name: str
    status: VendorStatus
    detail: str = ""
    sha256: str | None = None


@dataclass
class VendorResult(Record):
    plan: VendorPlan = field(metadata=as_json(flatten=True))
    cache: Path
    plan_only: bool
    entries: list[VendorEntry] = field(default_factory=list, metadata=as_json(skip=True))

    @property
    def error(self) -> SparkbuildError | None:
        return None

    def json_extra(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.plan.reused:
            data["plan_reused_since"] = self.plan.reused
        if not self.plan_only:
            data["entries"] = self.entries
        return data

    def summary(self) -> list[str]:
        plan = self.plan
        lines = [f"tree: {plan.tree}", f"sources ({DISCOVERY}): {len(plan.sources)}"]
        for source in plan.sources:
            ref = source.ref or source.url_hash or "(no pin)"
            maybe = "" if source.certain else "  (not under every CUDA toolkit)"
            lines.append(f"  {source.name}: {source.url} @ {ref}{maybe}")
            if source.stand_in is not None:
                lines.append(f"    stand-in: built from {source.stand_in.used}, not the pin "
                             f"({source.stand_in.reason})")
        torch = plan.torch or "none in the build requirements"
        lines.append(f"wheels: {len(plan.wheels)} requirements, torch pin: {torch}")
        lines += [f"  {wheel.requirement}  ({wheel.origin})" for wheel in plan.wheels]
        lines.append(f"crates: {plan.crate_count}")
        if plan.unreached:
            names = ", ".join(sorted({source.name for source in plan.unreached}))
            lines.append(f"not fetched by a CUDA build (other branches): {names}")
        emptied = [source.name for source in plan.excluded if source.placeholder is None]
        if emptied:
            lines.append("left out by the recipe (built against an empty directory): "
                         + ", ".join(emptied))
        for source in plan.excluded:
            if source.placeholder is not None:
                lines.append(f"not fetched: {source.name} ({source.placeholder.reason}); "
                             f"a placeholder of {len(source.placeholder.files)} file(s)")
        if plan.crates_left_out:
            left = ", ".join(f"{c.count} of {c.lockfile}" for c in plan.crates_left_out)
            lines.append(f"crates left out by the recipe (no Rust extensions built): {left}")
        lines += [f"note: {note}" for note in plan.notes]
        if plan.reused:
            lines.append(f"vendor plan reused: inputs unchanged since {plan.reused}")
        if not self.plan_only:
            lines.append(f"cache: {self.cache}")
            lines += [f"  {e.status:8} {e.kind} {e.name} {e.detail}".rstrip() for e in self.entries]
        return lines


@dataclass(frozen=True, kw_only=True)
class FetchChoices:
    """How :func:`vendor_tree` fetches what it planned."""

    mirrors: Mirrors | None = None
    """URL rewrites for fetching."""
    wheels: bool = True
    """False: no build-requirement wheels (a build against the torch already installed)."""
    sparse: bool = False
    """Fetch git sources without what a build never reads (vendoring.unread)."""
    edit: DependencyEdit | None = None
    """The series' arch edit, run on each source planned with it (vendoring.patched)."""


def vendor_tree(
    tree: Path, cache: Path, *, plan_only: bool, env: Mapping[str, str] | None = None,
    adjust: Callable[[VendorPlan], VendorPlan] | None = None,
    sources_of: SourcesOf = record_sources, fetching: FetchChoices | None = None,
) -> VendorResult:
    """Plan, and unless ``plan_only`` fetch every planned item into ``cache`` as
    ``fetching`` says.

    ``adjust``: the recipe's choices; ``sources_of``: the recorder's part (see
    :func:`plan_tree`).
    """
    fetching = fetching or FetchChoices()
    plan = plan_tree(tree, env=env, sources_of=sources_of)
    if adjust is not None:
        plan = adjust(plan)
    result = VendorResult(plan, Path(cache).expanduser().resolve(), plan_only)
    if plan_only:
        return result
    from sparkbuild.sources.mirrors import NO_MIRRORS
    from sparkbuild.vendoring.fetch import fetch_plan

    patterns = None
    if fetching.sparse:
        from sparkbuild.vendoring.unread import referenced_paths, sparse_patterns

        patterns = sparse_patterns(referenced_paths(plan.tree))
    result.entries = fetch_plan(plan, result.cache, mirrors=fetching.mirrors or NO_MIRRORS,
                                wheels=fetching.wheels, sparse=patterns, edit=fetching.edit)
    return result
