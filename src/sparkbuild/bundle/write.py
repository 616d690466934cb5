"""``sparkbuild bundle``: one archive with everything an air-gapped build host needs.

A bundle (``.tar.xz``; xz is in Python's standard library) holds, under
``sparkbuild-bundle/``:

* ``tree/``: the prepared tree, the series applied (docs and CI files left out);
* ``sources/NAME/``: every source the build fetches, at its pinned commit or hash,
  without what a build never reads (:mod:`sparkbuild.bundle.strip`, by the rules of
  :mod:`sparkbuild.vendoring.unread`; listed in the plan);
* ``wheels/``: the build-requirement wheels, unless ``--without-wheels`` (a host that
  builds against the torch it already has);
* ``runtime/``: what the wheelhouse ships beside the built wheels: the recipe's pins and the
  runtime closure of the tree's declared requirements for the recipe's platform and Python
  (``plan.json``'s ``runtime`` says which file is which; ``--no-closure`` leaves the closure
  out and ``runtime`` says so).  They are fetched by a function the caller passes in
  (``BundleOptions.runtime``; ``sparkbuild.pipeline`` passes the wheelhouse's), so that this room
  stays below the wheelhouse;
* ``flashinfer-aot/``: with ``[flashinfer] aot``, the wheels flashinfer's builder needs
  (the pinned flashinfer-python and what it imports), from ``CACHE/flashinfer-aot/``;
* ``recipe/``: the recipe (its series path pointing at ``recipe/series/``), its lock, the
  series, and under ``recipe/files/KEY/`` every other file it names
  (:meth:`sparkbuild.recipe.Recipe.referenced_files`: ``[model] config``, a ``[flashinfer]
  jit_cache`` path), each hashed in ``plan.json``'s ``recipe_files``; ``wheel --bundle``
  reads these copies (:func:`sparkbuild.bundle.read.bundled_recipe`);
* ``plan.json``: the prepare report, the vendor plan, each source's cache key and commit,
  what was stripped;
* ``manifest.json``, the first member: the sha256 and size of every other member, so that a
  reader knows what the bundle holds before it extracts anything.

Its long steps show progress: a bar on a terminal, a plain line now and then in a log
(:func:`sparkbuild.console.count_progress`).

Identical files are stored once (tar hard links) and members are ordered by name, so the
copies of CUTLASS that several dependencies carry cost little after compression.

:func:`unpack_bundle` reads the manifest, extracts only what it lists and checks every
member against it before anything else happens: a missing, changed or unlisted member is a
:class:`VerifyError` naming it.  :func:`import_bundle` then puts the sources and wheels
into the cache under their upstream keys, so the ordinary offline build runs unchanged.
``bundle`` holds the recipe's work lock, as ``wheel`` does.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sparkbuild import __version__
from sparkbuild.bundle.archive import TOP, sweep_partials, write_archive
from sparkbuild.bundle.strip import StripReport, strip_tree
from sparkbuild.console import step, warn
from sparkbuild.errors import DestinationError, RecipeError, SparkbuildError, VerifyError
from sparkbuild.recipe import PATCH_LIMIT, RECIPE_LIMIT
from sparkbuild.records import Record, as_json, rounded
from sparkbuild.sources.archive import extract_archive
from sparkbuild.store.cache import Cache, default_cache_root
from sparkbuild.store.context import RunContext
from sparkbuild.store.files import writer_gone
from sparkbuild.store.hashing import sha256_file
from sparkbuild.store.lock import recipe_work_lock
from sparkbuild.store.user_files import read_user_text
from sparkbuild.vendoring.index import FLASHINFER_AOT_WHEELS, source_entry, wheelset_entry
from sparkbuild.vendoring.unread import referenced_paths

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from sparkbuild.recipe import Recipe
    from sparkbuild.vendoring.placeholders import Placeholder
    from sparkbuild.vendoring.plan import VendorPlan

BUNDLE_FORMAT = 1
PLAN = "plan.json"
RUNTIME_DIR = "runtime"
RECIPE_FILES_DIR = "recipe/files"
"""Where the files a recipe names (besides its series and lock) are carried, by key."""
VERIFIED_MARKER = ".sparkbuild-bundle-verified"
TREE_STRIPPED = frozenset({"docs", ".github", ".buildkite"})
"""Left out of the prepared tree (top level only): its own tests and sources stay."""
TREE_SKIPPED = frozenset({"build", ".deps", "dist"})
"""Build products of an earlier build of the same tree."""


@dataclass
class BundleResult(Record):
    json_order: ClassVar[tuple[str, ...]] = (
        "out", "size", "sha256", "raw_bytes", "members", "deduplicated", "sources", "stripped",
        "wheels", "excluded", "runtime", "recipe_files",
    )

    out: Path
    size: int
    sha256: str
    raw_bytes: int
    members: int
    deduplicated: int
    sources: list[dict[str, Any]]
    stripped: list[StripReport]
    wheels: list[str]
    excluded: list[str]
    seconds: float = field(metadata=as_json(dump=rounded(1)))
    error: SparkbuildError | None = field(default=None, metadata=as_json(skip=True))
    runtime: dict[str, Any] | None = None
    """plan.json's ``runtime``: the pins and closure carried; None when not asked for."""
    recipe_files: dict[str, dict[str, str]] = field(default_factory=dict)
    """plan.json's ``recipe_files``: each file the recipe names, by key (its copy, sha256)."""
    without_wheels: bool = field(default=False, metadata=as_json(skip=True))

    def summary(self) -> list[str]:
        mib = 1 << 20
        lines = [f"bundle {self.out}: {self.size / mib:.1f} MiB "
                 f"({self.raw_bytes / mib:.1f} MiB unpacked, {self.members} members, "
                 f"{self.deduplicated} stored once as links), sha256 {self.sha256}"]
        lines += [f"  source {_source_line(s)}" + _patched_note(s.get("patched"))
                  for s in self.sources]
        lines += [f"  the recipe's {entry['what']}: {entry['file']}"
                  for entry in self.recipe_files.values()]
        wheels = ", ".join(self.wheels) or (
            "none (--without-wheels)" if self.without_wheels else "none (the tree asks for none)")
        lines.append(f"  wheels: {wheels}")
        if self.runtime is not None:
            pins = ", ".join(p["file"] for p in self.runtime["pins"]) or "none"
            closure = (f"{len(self.runtime['files'])} wheels" if self.runtime["closure"]
                       == "included" else "left to the node (--no-closure)")
            lines.append(f"  runtime for {self.runtime['platform'] or 'this machine'}: pins "
                         f"{pins}; closure {closure}")
        if self.excluded:
            lines.append(f"  left out by the recipe: {', '.join(self.excluded)}")
        for report in self.stripped:
            if report.files:
                shown = ", ".join(report.paths[:6]) + (" ..." if len(report.paths) > 6 else "")
                lines.append(f"  stripped from {report.name}: {report.files} files, "
                             f"{report.bytes / mib:.1f} MiB ({shown})")
        lines.append(f"  written in {self.seconds:.0f} s")
        return lines


def _source_line(source: dict[str, Any]) -> str:
    """``NAME: URL @ REF = COMMIT`` for a git source, ``NAME: URL (URL_HASH)`` for a URL
    source (which has no commit; its hash is the cache's when the tree pins none)."""
    if source.get("kind") == "git":
        return (f"{source['name']}: {source['url']} @ {source.get('ref') or 'HEAD'} = "
                f"{source.get('commit') or 'no commit recorded'}")
    pinned = source.get("ref") or f"not pinned by the tree; sha256={source['cache_sha256']}"
    return f"{source['name']}: {source['url']} ({pinned})"


def _patched_note(patched: dict[str, Any] | None) -> str:
    """``, series arch edit: applied`` for a source vendored with the series' arch edit."""
    if not patched:
        return ""
    states = sorted({str(p["status"]) for p in patched.get("patches", []) if p.get("status")})
    return f", series arch edit: {'/'.join(states) or 'none'}"


# -- writing -------------------------------------------------------------------------------


def _copy_tree(tree: Path, dest: Path) -> StripReport:
    ignored = shutil.ignore_patterns("__pycache__", "*.pyc")

    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = set(ignored(directory, names))
        if Path(directory) == tree:
            skipped |= {name for name in names if name in TREE_SKIPPED | TREE_STRIPPED}
        return skipped

    shutil.copytree(tree, dest, symlinks=True, ignore=ignore)
    report = StripReport("tree")
    for name in sorted(TREE_STRIPPED):
        path = tree / name
        if path.exists():
            report.paths.append(name)
            for _directory, _subdirs, files in os.walk(path):
                report.files += len(files)
                report.bytes += sum((Path(_directory) / f).lstat().st_size for f in files)
    return report


def _copy_source(cache: Cache, entry: dict[str, Any], dest: Path, scratch: Path) -> None:
    digest = str(entry["sha256"])
    staging = scratch / digest[:16]
    shutil.rmtree(staging, ignore_errors=True)
    extracted = extract_archive(cache.path_of(digest), staging, sha256=digest)
    root = staging
    top = extracted.top_level
    if entry.get("strip_top") and len(top) == 1 and (staging / top[0]).is_dir():
        root = staging / top[0]
    root.rename(dest)
    shutil.rmtree(staging, ignore_errors=True)


def _bundled_recipe(recipe: Recipe, dest: Path) -> None:
    """The recipe, its lock and its series, with ``[series] path`` pointing beside it."""
    series_dir = dest / "series"
    series_dir.mkdir(parents=True)
    for path in sorted(recipe.series.parent.iterdir()):
        if path.is_file():
            shutil.copy2(path, series_dir / path.name)
    # Files a structured edit names beside the series (``header = "../csrc/e2m1.cuh"``).
    for patch in sorted(recipe.series.parent.glob("*.toml")):
        edit = read_user_text(patch, f"structured edit {patch.name}", PATCH_LIMIT)
        for value in re.findall(r'=\s*"(\.\./[^"]+)"', edit):
            source = (recipe.series.parent / value).resolve()
            if source.is_file():
                target = series_dir / value
                target.resolve().parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target.resolve())
    text = read_user_text(recipe.path, "recipe", RECIPE_LIMIT)
    table = None
    lines = []
    for line in text.splitlines():
        header = re.match(r"\s*\[\s*([A-Za-z0-9_.-]+)\s*\]", line)
        if header:
            table = header.group(1)
        elif table == "series" and re.match(r"\s*path\s*=", line):
            line = f'path = "series/{recipe.series.name}"'
        lines.append(line)
    (dest / recipe.path.name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    if recipe.lock_path.is_file():
        shutil.copy2(recipe.lock_path, dest / recipe.lock_path.name)


def check_recipe_files(recipe: Recipe) -> None:
    """Every file the recipe names can be carried: refused before any long step."""
    for file in recipe.referenced_files():
        if not file.path.is_file():
            raise RecipeError(f"the recipe's {file.what} is not a file a bundle can carry",
                              where=str(file.path),
                              hint="the bundle's build host reads it from the bundle; give "
                              "the path of the file, beside the recipe")


def _carry_recipe_files(recipe: Recipe, root: Path) -> dict[str, dict[str, str]]:
    """Copy every file the recipe names into ``RECIPE_FILES_DIR/KEY/NAME``; plan.json's
    ``recipe_files`` (key -> the copy, its sha256, the recipe's words for it)."""
    carried = {}
    for file in recipe.referenced_files():
        relative = f"{RECIPE_FILES_DIR}/{file.key}/{file.path.name}"
        copy = root / relative
        copy.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(file.path, copy)  # a link's file, under the link's name
        except OSError as exc:
            raise RecipeError(f"cannot read the recipe's {file.what}: {exc.strerror}",
                              where=str(file.path)) from exc
        carried[file.key] = {"file": relative, "sha256": sha256_file(copy), "what": file.what}
    return carried


@contextlib.contextmanager
def staging_area(cache: Cache, prefix: str) -> Iterator[Path]:
    scratch = cache.root / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    for stale in scratch.glob(f"{prefix}*"):  # PREFIX-PID-RANDOM: a killed run's goes
        pid = stale.name.removeprefix(prefix).partition("-")[0]
        if stale.is_dir() and not stale.is_symlink() and writer_gone(pid):
            shutil.rmtree(stale, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-", dir=scratch) as directory:
        yield Path(directory)


def _aot_wheels(recipe: Recipe, cache: Cache, root: Path) -> list[str]:
    """``[flashinfer] aot``: the wheels its builder needs (``CACHE/flashinfer-aot/``), as
    they are; the bundle's build host imports them into its cache."""
    source = cache.root / FLASHINFER_AOT_WHEELS
    if not recipe.flashinfer.aot:
        return []
    if not source.is_dir():
        warn(f"[flashinfer] aot is on but the cache holds no {FLASHINFER_AOT_WHEELS}/: the "
             "offline build will miss them; run `sparkbuild flashinfer-aot` online first")
        return []
    shutil.copytree(source, root / FLASHINFER_AOT_WHEELS,
                    ignore=shutil.ignore_patterns("*.log"))
    return sorted(p.relative_to(root).as_posix()
                  for p in (root / FLASHINFER_AOT_WHEELS).rglob("*") if p.is_file())


def assemble(*, recipe: Recipe, tree: Path, prepared: dict[str, Any], plan: VendorPlan,
             cache: Cache, out: Path, with_wheels: bool,
             runtime: Callable[[Path, Cache, Path], dict[str, Any]] | None = None
             ) -> BundleResult:
    """Copy the tree, sources, wheels, runtime wheels and recipe into a staging area, then
    archive it."""
    started = time.monotonic()
    out = out.absolute()
    if out.exists() and not out.is_file():
        raise DestinationError("--out exists and is not a file", where=str(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    sweep_partials(out)  # what a killed run left beside the bundle
    keep = referenced_paths(tree)
    with staging_area(cache, "bundle-") as staging:
        root = staging / TOP
        step(f"copying the prepared tree {tree}")
        stripped = [_copy_tree(tree, root / "tree")]
        sources = []
        for source in plan.sources:
            entry = source_entry(cache, source)
            assert entry is not None, "require_complete() runs first"
            pinned = source.ref if source.kind == "git" else source.url_hash
            if source.stand_in:
                pinned = f"{source.fetch_ref}, a stand-in for the pin {source.ref}"
            step(f"adding {source.name} ({source.url}{f' @ {pinned}' if pinned else ''})")
            dest = root / "sources" / source.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            _copy_source(cache, entry, dest, staging)
            stripped.append(strip_tree(dest, f"source {source.name}", keep))
            sources.append({
                "name": source.name, "key": source.key, "kind": source.kind,
                "url": source.url, "ref": source.ref if source.kind == "git" else source.url_hash,
                "commit": entry.get("commit"), "submodules": entry.get("submodules"),
                "sparse": entry.get("sparse"), "cache_sha256": entry["sha256"],
                "dir": f"sources/{source.name}", "patched": entry.get("patched"),
            })
        wheels: dict[str, str] = {}
        if with_wheels and plan.wheels:
            entry = wheelset_entry(cache, plan)
            assert entry is not None, "require_complete() runs first"
            files = entry["files"]
            assert isinstance(files, dict)
            (root / "wheels").mkdir(parents=True)
            for filename, digest in sorted(files.items()):
                shutil.copyfile(cache.path_of(str(digest)), root / "wheels" / filename)
                wheels[filename] = str(digest)
        carried = None
        if runtime is not None:
            step("adding the recipe's pins and runtime closure")
            carried = runtime(tree, cache, root / RUNTIME_DIR)
        aot = _aot_wheels(recipe, cache, root)
        recipe_files = _carry_recipe_files(recipe, root)
        _bundled_recipe(recipe, root / "recipe")
        plan_json = {
            "format": BUNDLE_FORMAT, "recipe": recipe.name, "recipe_file": recipe.path.name,
            "prepared": prepared, "plan": plan.to_dict(), "sources": sources,
            "wheelset": {"key": plan.wheelset_key, "requirements": plan.requirements,
                         "files": wheels} if wheels else None,
            "without_wheels": not wheels,
            "stripped": [report.to_dict() for report in stripped],
            **({"runtime": carried} if carried is not None else {}),
            "flashinfer_aot": aot,
            "recipe_files": recipe_files,
        }
        (root / PLAN).write_text(json.dumps(plan_json, indent=1) + "\n", encoding="utf-8")
        step(f"compressing into {out} (xz)")
        header = {"format": BUNDLE_FORMAT, "sparkbuild": __version__, "recipe": recipe.name,
                  "compression": "xz", "created": int(time.time())}
        written = write_archive(root, out, header)
    return BundleResult(
        out, out.stat().st_size, sha256_file(out), written.raw_bytes, written.members,
        written.links, sources, stripped, sorted(wheels),
        [source.name for source in plan.excluded], time.monotonic() - started,
        runtime=carried, recipe_files=recipe_files, without_wheels=not with_wheels,
    )


# -- the stage -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BundleOptions:
    recipe: Recipe
    out: Path
    tree: Path | None = None
    """An already prepared tree; None: prepare the recipe's source."""
    cache: Path | None = None
    with_wheels: bool = True
    mirrors: tuple[str, ...] = ()
    """``BASE=REPLACEMENT`` rules, before the recipe's ``[vendor] mirrors``."""
    offline: bool = False
    """Take everything from the cache; fetch nothing."""
    runtime: Callable[[Path, Cache, Path], dict[str, Any]] | None = None
    """Writes the pins and runtime closure into the bundle (``sparkbuild.pipeline`` passes
    the wheelhouse's); None: the bundle carries none (a wheelhouse needs them cached)."""
    placeholders: Callable[[Path], tuple[Placeholder, ...]] | None = None
    """The sources no extension of the build uses, for the prepared tree
    (``sparkbuild.compile.extension_set`` for a recipe with ``[model]``): not bundled."""


def _prepared_tree(options: BundleOptions, cache: Cache) -> tuple[Path, dict[str, Any]]:
    from sparkbuild.patches.engine import series_status
    from sparkbuild.patches.prepare import prepare_tree

    recipe = options.recipe
    if options.tree is not None:
        tree = options.tree.resolve()
        report = series_status(tree, recipe)
        missing = [p for p in report.patches if p.status not in ("applied", "already-applied")]
        if missing:
            raise VerifyError(
                f"{tree} does not carry the series: "
                + ", ".join(f"{p.name} is {p.status}" for p in missing),
                where=str(tree),
                hint=f"prepare it first: `sparkbuild prepare --recipe {recipe.path} --dest DIR`")
        return tree, report.to_dict()
    tree = cache.root / "work" / recipe.name / "bundle-tree"
    shutil.rmtree(tree, ignore_errors=True)
    context = RunContext.create(cache.root, offline=options.offline, recipe=recipe)
    prepared = prepare_tree(recipe.source.spec, tree, recipe, context=context)
    if prepared.error is not None:
        raise prepared.error
    return prepared.tree, prepared.to_dict()


def make_bundle(options: BundleOptions) -> BundleResult:
    """The whole ``bundle`` command; see the module docstring."""
    from sparkbuild.vendoring.fetch import vendor_for_recipe
    from sparkbuild.vendoring.materialize import require_complete

    recipe = options.recipe
    check_recipe_files(recipe)
    cache = Cache((options.cache or default_cache_root()).expanduser().resolve())
    with recipe_work_lock(cache.root, recipe.name).held():  # wheel's lock: one at a time
        tree, prepared = _prepared_tree(options, cache)
        placeholders = options.placeholders(tree) if options.placeholders else ()
        vendored = vendor_for_recipe(tree, cache, recipe, mirrors=options.mirrors,
                                     offline=options.offline, wheels=options.with_wheels,
                                     placeholders=placeholders)
        require_complete(vendored.plan, cache)
        return assemble(recipe=recipe, tree=tree, prepared=prepared, plan=vendored.plan,
                        cache=cache, out=options.out, with_wheels=options.with_wheels,
                        runtime=options.runtime)
