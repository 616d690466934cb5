"""From the dependency cache to what an offline build points at.

:func:`missing_entries` runs before anything compiles: every planned source, the
build-requirement wheels and the crates must be in the cache, and each one that is not
is named.  :func:`materialize` then unpacks the sources beside the build (once per
blob: an unpacked copy is reused only while every file is the one unpacked -- the marker
records each file's sha256, re-checked on reuse; a copy edited since is unpacked again
from the verified cache, with a warning that names what changed), links the
wheels into a find-links directory, and returns the variables that redirect the build:
``FETCHCONTENT_SOURCE_DIR_<NAME>`` for FetchContent and the tree's own ``*_SRC_DIR``
overrides (the only way to redirect vLLM's full-signature FetchContent_Populate calls).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.console import warn
from sparkbuild.errors import CacheMissError, SourceError, VerifyError
from sparkbuild.records import Record, as_json
from sparkbuild.sources.archive import extract_archive
from sparkbuild.store.files import read_kept_file
from sparkbuild.store.hashing import sha256_file
from sparkbuild.vendoring.index import crates_entry, source_entry, wheelset_entry
from sparkbuild.vendoring.placeholders import write_placeholder

if TYPE_CHECKING:
    from sparkbuild.store.cache import Cache
    from sparkbuild.vendoring.plan import SourcePlan, VendoredKind, VendorPlan

COMPLETE_MARKER = ".sparkbuild-complete"


@dataclass(frozen=True)
class Missing:
    kind: VendoredKind
    name: str
    detail: str

    def line(self) -> str:
        return f"{self.kind} {self.name}: {self.detail}"


def _source_problem(cache: Cache, source: SourcePlan) -> Missing | None:
    if source.method == "populate" and source.override is None:
        return Missing("source", source.name, (
            f"{source.where} fetches it with FetchContent_Populate's full signature and "
            "offers no *_SRC_DIR override, so no build can be pointed at a local copy"
        ))
    if source_entry(cache, source) is None:
        pin = f"@ {source.ref}" if source.kind == "git" else f"({source.url_hash or 'no hash'})"
        patched = (f" with the series' arch edit (key {source.key}; an unpatched copy does "
                   "not count)" if source.patched else "")
        return Missing("source", source.name, f"{source.url} {pin}{patched} is not in the cache")
    return None


def missing_entries(plan: VendorPlan, cache: Cache) -> list[Missing]:
    """Everything ``plan`` needs that ``cache`` does not hold (cheap: nothing re-hashed)."""
    missing = [m for m in (_source_problem(cache, s) for s in plan.sources) if m is not None]
    if plan.wheels and wheelset_entry(cache, plan) is None:
        missing.append(Missing("wheels", "build requirements", (
            f"no vendored wheels for {', '.join(plan.requirements)} (Python/machine "
            f"{plan.wheelset_key[:12]})"
        )))
    for crate in plan.crates:
        if crate.count and crates_entry(cache, crate) is None:
            missing.append(Missing("crates", crate.lockfile, f"{crate.count} crates not vendored"))
    return missing


def refuse_other_commits(plan: VendorPlan, cache: Cache) -> None:
    """A cached git source at another commit than its pin (or its stand-in's) is refused,
    before anything compiles: a source is built at its pin or named as a stand-in."""
    for source in plan.sources:
        entry = source_entry(cache, source)
        problem = source.commit_problem(str(entry.get("commit") or "")) if entry else None
        if problem is not None:
            raise SourceError(problem, where=source.where,
                              hint="name it in the recipe: [[vendor.stand_in]] url, pinned, "
                              "used and reason")


def require_complete(plan: VendorPlan, cache: Cache) -> None:
    """Raise one :class:`CacheMissError` naming every missing entry, or return; a source at
    another commit than it is planned at is refused."""
    refuse_other_commits(plan, cache)
    missing = missing_entries(plan, cache)
    if missing:
        raise CacheMissError(
            f"the cache lacks {len(missing)} thing(s) the offline build needs:\n  "
            + "\n  ".join(item.line() for item in missing),
            where=str(cache.root),
            hint="run the same command once without --offline where the network is "
            "reachable (or `sparkbuild vendor --tree TREE --cache DIR` on a tree made by "
            "`sparkbuild prepare --dest TREE`; it vendors sources without the series' arch "
            "edit, so a source marked \"with the series' arch edit\" needs the first way)",
        )


@dataclass
class Materialized(Record):
    """Where the build finds its dependencies."""

    sources: dict[str, Path] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    cmake_defines: dict[str, str] = field(default_factory=dict)
    wheel_dir: Path | None = None
    requirements: list[str] = field(default_factory=list, metadata=as_json(skip=True))
    cargo_home: Path | None = field(default=None, metadata=as_json(skip=True))


def _verified(cache: Cache, digest: str, what: str) -> Path:
    try:
        return cache.path_of(digest)
    except (CacheMissError, VerifyError) as exc:
        raise CacheMissError(
            f"the cache entry of {what} is missing or corrupted: {exc.what}",
            where=exc.where,
            hint="run once online to fetch it again",
        ) from exc


def tree_listing(root: Path) -> dict[str, str]:
    """Every file and link under ``root`` (the marker aside): its sha256, or ``link:TARGET``."""
    found = {}
    for top, subdirs, files in os.walk(root):
        base = Path(top)
        links = [d for d in subdirs if (base / d).is_symlink()]
        for name in [*files, *links]:
            path = base / name
            relative = path.relative_to(root).as_posix()
            if relative == COMPLETE_MARKER:
                continue
            found[relative] = (f"link:{path.readlink()}" if path.is_symlink()
                               else sha256_file(path, progress=False))
    return found


def _differences(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    changed = [f"{n} (changed)" for n in sorted(recorded) if n in now and now[n] != recorded[n]]
    changed += [f"{n} (removed)" for n in sorted(set(recorded) - set(now))]
    return changed + [f"{n} (added)" for n in sorted(set(now) - set(recorded))]


def _intact(dest: Path, what: str) -> str | None:
    """The root name of a complete unpacked copy whose files are still the ones unpacked;
    None (with a warning naming what changed) when it must be unpacked again."""
    raw = read_kept_file(dest / COMPLETE_MARKER, "the record of an unpacked copy", 256 << 20)
    if raw is None:
        return None  # no marker: unpack again
    try:
        record = json.loads(raw.decode("utf-8"))
        root_name, files = str(record["root"]), dict(record["files"])
    except (ValueError, KeyError, TypeError):
        return None  # no marker, or one from before the listing: unpack again
    differences = _differences(files, tree_listing(dest))
    if not differences:
        return root_name
    shown = ", ".join(differences[:5]) + (f" and {len(differences) - 5} more"
                                          if len(differences) > 5 else "")
    warn(f"the unpacked copy of {what} in {dest} differs from its cache entry ({shown}): "
         "unpacking it again from the verified cache")
    return None


def _unpack(cache: Cache, digest: str, dest: Path, what: str, *, strip_top: bool) -> Path:
    """The unpacked blob at ``dest``, reused only while every file is the one unpacked (each
    re-hashed against the listing the marker records); returns the source root."""
    root_name = _intact(dest, what)
    if root_name is None:
        blob = _verified(cache, digest, what)
        shutil.rmtree(dest, ignore_errors=True)
        staging = dest.with_name(dest.name + f".partial-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        extracted = extract_archive(blob, staging, sha256=digest)
        top = extracted.top_level
        root_name = top[0] if strip_top and len(top) == 1 and (staging / top[0]).is_dir() else ""
        record = {"root": root_name, "files": tree_listing(staging)}
        (staging / COMPLETE_MARKER).write_text(json.dumps(record) + "\n", encoding="utf-8")
        staging.rename(dest)
    return dest / root_name if root_name else dest


def _materialize_source(cache: Cache, source: SourcePlan, deps: Path, out: Materialized) -> None:
    entry = source_entry(cache, source)
    assert entry is not None, "require_complete() runs first"
    digest = str(entry["sha256"])
    root = _unpack(cache, digest, deps / f"{source.name}-{digest[:12]}", source.name,
                   strip_top=bool(entry.get("strip_top")))
    out.sources[source.name] = root
    if source.method == "declare":
        out.cmake_defines[f"FETCHCONTENT_SOURCE_DIR_{source.name.upper()}"] = str(root)
    if source.override:
        target = root / source.override_subdir if source.override_subdir else root
        out.env[source.override] = str(target)
        out.cmake_defines[source.override] = str(target)


def _materialize_excluded(source: SourcePlan, deps: Path, out: Materialized) -> None:
    """An empty directory where the recipe left a source out (``[vendor] exclude``), or the
    placeholder of a source no built extension uses."""
    root = deps / f"{source.name}-{'placeholder' if source.placeholder else 'excluded'}"
    target = root / source.override_subdir if source.override_subdir else root
    shutil.rmtree(root, ignore_errors=True)
    target.mkdir(parents=True, exist_ok=True)
    if source.placeholder is not None:
        write_placeholder(target, source.placeholder)
    out.sources[source.name] = root
    if source.method == "declare":
        out.cmake_defines[f"FETCHCONTENT_SOURCE_DIR_{source.name.upper()}"] = str(root)
    if source.override:
        out.env[source.override] = str(target)
        out.cmake_defines[source.override] = str(target)


def _link_wheels(cache: Cache, plan: VendorPlan, wheel_dir: Path) -> None:
    entry = wheelset_entry(cache, plan)
    assert entry is not None, "require_complete() runs first"
    files = entry["files"]
    assert isinstance(files, dict)
    shutil.rmtree(wheel_dir, ignore_errors=True)
    wheel_dir.mkdir(parents=True)
    for filename, digest in sorted(files.items()):
        # A symlink, not a hard link: a new link changes the blob's ctime, which the
        # cache's "verified" marker includes (the next read would re-hash the blob).
        (wheel_dir / filename).symlink_to(_verified(cache, str(digest), filename))


def _cargo_home(cache: Cache, plan: VendorPlan, work: Path) -> Path | None:
    """A CARGO_HOME whose config replaces crates.io with the vendored crates of every
    ``Cargo.lock``: cargo reads one directory source, so each crate directory that a
    lockfile's ``cargo vendor`` wrote is linked into one directory, ``vendored-crates``."""
    vendored = [crate for crate in plan.crates if crate.count]
    if not vendored:
        return None
    home = work / "cargo-home"
    home.mkdir(parents=True, exist_ok=True)
    unpacked = []
    for crate in vendored:
        entry = crates_entry(cache, crate)
        assert entry is not None, "require_complete() runs first"
        digest = str(entry["sha256"])
        unpacked.append((digest, _unpack(cache, digest, work / f"crates-{digest[:12]}",
                                         crate.lockfile, strip_top=False)))
    merged = _merged_crates(unpacked, home / "vendored-crates")
    config = [
        "[source.crates-io]", 'replace-with = "sparkbuild-vendored"', "",
        "[source.sparkbuild-vendored]", f'directory = "{merged}"', "",
        "[net]", "offline = true", "",
    ]
    (home / "config.toml").write_text("\n".join(config), encoding="utf-8")
    return home


def _merged_crates(unpacked: list[tuple[str, Path]], merged: Path) -> Path:
    """One directory holding a link to every crate directory of ``unpacked`` (each a
    ``cargo vendor`` output, with its blob's digest).  A crate vendored by two lockfiles
    (the same directory name and ``.cargo-checksum.json``) is linked once; two different
    crates under one name (``cargo vendor`` names a crate's directory without its version
    where its lockfile holds one version) both stay, the later one under its digest."""
    shutil.rmtree(merged, ignore_errors=True)
    merged.mkdir(parents=True)
    linked: dict[str, bytes] = {}
    for digest, root in unpacked:
        for crate_dir in sorted(root.iterdir()):
            if crate_dir.name.startswith(".") or not crate_dir.is_dir():
                continue
            checksum = crate_dir / ".cargo-checksum.json"
            identity = checksum.read_bytes() if checksum.is_file() else crate_dir.name.encode()
            name = crate_dir.name
            if name in linked:
                if linked[name] == identity:
                    continue
                name = f"{name}-{digest[:12]}"
            linked[name] = identity
            (merged / name).symlink_to(crate_dir, target_is_directory=True)
    return merged


def materialize(plan: VendorPlan, cache: Cache, work: Path) -> Materialized:
    """Unpack the plan's dependencies under ``work`` for the build; cache must be complete."""
    require_complete(plan, cache)
    out = Materialized(requirements=plan.requirements)
    deps = work / "deps"
    deps.mkdir(parents=True, exist_ok=True)
    for source in plan.sources:
        _materialize_source(cache, source, deps, out)
    for source in plan.excluded:
        _materialize_excluded(source, deps, out)
    if plan.wheels:
        out.wheel_dir = work / "wheels"
        _link_wheels(cache, plan, out.wheel_dir)
    out.cargo_home = _cargo_home(cache, plan, work)
    if out.cargo_home is not None:
        out.env["CARGO_HOME"] = str(out.cargo_home)
    out.env["CARGO_NET_OFFLINE"] = "true"
    return out
