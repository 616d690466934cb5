"""Reading a bundle on the build host: verify every member, then feed the offline build.

:func:`unpack_bundle` reads a bundle's manifest (written by :mod:`sparkbuild.bundle.write`)
first, then extracts the bundle safely, refusing each member the manifest does not list, or
lists with another size or link, before a byte of it is written; once extracted, every
member is hashed against the manifest: a missing, changed or unlisted member is a
:class:`VerifyError` that names it, and nothing is built.  An unsafe member keeps its own
error (:class:`UnsafeArchiveError`), and a full disk its own (:class:`DiskFullError`).
Unpacking holds the lock of the bundles' directory, and every path the bundle's plan names
must lie inside the bundle.
The files the recipe names besides its series (``[model] config``, a ``[flashinfer]
jit_cache`` path) travel in the bundle too: :func:`bundled_recipe` gives the recipe that
reads the bundle's copies, each checked against the sha256 the bundle recorded for it.
:func:`open_bundle` is the one read (and hash) of a bundle's bytes a run makes: its recipe,
tree, cache entries and runtime are all read from what it gives.
The verified copy is kept under the work directory, keyed by the bundle's sha256, so a
second run with the same bundle skips the verification.  :func:`import_bundle` puts the
sources and wheels into the cache under their upstream keys; :func:`prepared_from_bundle`
copies the tree to the recipe's build path and gives the prepare result the wheelhouse
manifest needs, after checking that the tree still carries the series.

The build runs in that copy, never in the verified one: the build writes into its tree, and
its path must not depend on the bundle's hash, or a shared compile cache would miss every
CUDA unit of the next bundle (nvcc's device steps hash the source's absolute path).  A run
with the same bundle finds its copy and build directory again and resumes.
"""

from __future__ import annotations

import lzma
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import canonicalize_name

from sparkbuild.bundle.archive import MANIFEST, TOP, members_of
from sparkbuild.bundle.write import PLAN, RUNTIME_DIR, VERIFIED_MARKER
from sparkbuild.console import count_progress, info, step
from sparkbuild.errors import SourceError, UnsafeArchiveError, UsageError, VerifyError
from sparkbuild.sources.archive import (
    ArchiveMember,
    MemberCheck,
    clean_member_name,
    extract_archive,
    read_tar_member,
)
from sparkbuild.store.hashing import sha256_file
from sparkbuild.store.lock import CacheLock
from sparkbuild.store.phases import phase
from sparkbuild.store.tree_sync import sync_tree
from sparkbuild.store.user_files import parse_json
from sparkbuild.vendoring.fetch import store_tree_tarball
from sparkbuild.vendoring.index import (
    FLASHINFER_AOT_WHEELS,
    record_source,
    record_wheelset,
    source_entry_by_key,
)

if TYPE_CHECKING:
    from sparkbuild.patches.prepare import PrepareResult
    from sparkbuild.recipe import Recipe
    from sparkbuild.store.cache import Cache

IN_PLACE = ("applied", "already-applied")
MANIFEST_LIMIT = 256 << 20
"""The most a bundle's manifest may take (a vLLM bundle's lists some 10,000 members in
about 2 MB)."""
REWRITE_HINT = ("the bundle was changed or damaged after it was written; nothing was built; "
                "copy it again or write a new one with `sparkbuild bundle`")


@dataclass(frozen=True)
class UnpackedBundle:
    root: Path
    sha256: str
    manifest: dict[str, Any]
    plan: dict[str, Any]

    @property
    def tree(self) -> Path:
        return self.root / "tree"

    @property
    def recipe_path(self) -> Path:
        name = self.plan.get("recipe_file")
        return self.inside(f"recipe/{name}", file_name=name)

    def inside(self, relative: object, *, file_name: object = None) -> Path:
        """The path the plan names (``relative`` to the bundle's root), refused unless it
        is a clean relative path that stays inside the bundle (``file_name``: a part that
        must be a file's name alone)."""
        text = str(relative)
        try:
            clean = clean_member_name(text, "the bundle's plan")
        except UnsafeArchiveError:
            clean = ""
        path = self.root / clean
        named = file_name is None or (isinstance(file_name, str) and "/" not in file_name
                                      and file_name not in ("", ".", ".."))
        if not clean or not named or not path.resolve().is_relative_to(self.root.resolve()):
            raise VerifyError(f"the bundle's {PLAN} names a path outside the bundle: {text!r}",
                              where=str(self.root), hint=REWRITE_HINT)
        return path


def _mismatches(problems: list[str], bundle: Path) -> VerifyError:
    shown = "\n  ".join(problems[:12]) + (
        f"\n  ... and {len(problems) - 12} more" if len(problems) > 12 else "")
    return VerifyError(f"{len(problems)} bundle member(s) do not match its manifest:\n  {shown}",
                       where=str(bundle), hint=REWRITE_HINT)


def _problems(root: Path, manifest: dict[str, Any]) -> list[str]:
    expected: dict[str, dict[str, Any]] = manifest["members"]
    present = set(members_of(root)) - {MANIFEST}
    problems = []
    with count_progress(f"checking the bundle's {len(expected)} members") as checked:
        for count, (name, meta) in enumerate(sorted(expected.items()), 1):
            checked(count, len(expected))
            problems += _member_problem(root, name, meta, present)
    problems += [f"{name}: not in the manifest" for name in sorted(present - set(expected))]
    return problems


def _member_problem(root: Path, name: str, meta: dict[str, Any], present: set[str]
                    ) -> list[str]:
    """What makes the extracted member ``name`` other than its manifest entry (or [])."""
    path = root / name
    if name not in present:
        return [f"{name}: missing"]
    if "link" in meta:
        if not path.is_symlink() or str(path.readlink()) != meta["link"]:
            return [f"{name}: not the link the manifest names"]
        return []
    if (path.stat().st_size != meta.get("size")
            or sha256_file(path, progress=False) != meta.get("sha256")):
        return [f"{name}: changed (its sha256 differs from the manifest's)"]
    return []


class _ListedTwice(Exception):
    """A key of a JSON object given twice (json keeps the last one without a word)."""


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _ListedTwice(key)
        found[key] = value
    return found


def _entry_ok(meta: object) -> bool:
    if not isinstance(meta, dict):
        return False
    if "link" in meta:
        return isinstance(meta["link"], str)
    size = meta.get("size")
    return (isinstance(meta.get("sha256"), str) and isinstance(size, int)
            and not isinstance(size, bool) and size >= 0)


def read_manifest(bundle: Path) -> dict[str, Any]:
    """The bundle's manifest, read before anything of the bundle is extracted (the manifest
    comes first in the archive); each member's entry checked for its form."""
    try:
        raw = read_tar_member(bundle, f"{TOP}/{MANIFEST}", limit=MANIFEST_LIMIT)
    except SourceError as exc:
        raise VerifyError(f"the bundle cannot be read: {exc.what}", where=str(bundle),
                          hint="copy it again; its sha256 is printed by `bundle`") from exc
    if raw is None:
        raise VerifyError(f"the bundle has no {MANIFEST}", where=str(bundle),
                          hint="it was not written by `sparkbuild bundle`")
    try:
        manifest = parse_json(raw.decode("utf-8"), object_pairs_hook=_once_each)
    except _ListedTwice as exc:
        raise VerifyError(f"the bundle's {MANIFEST} lists {exc.args[0]} twice",
                          where=str(bundle), hint="the bundle was changed after it was "
                          "written; nothing was built; write a new one with "
                          "`sparkbuild bundle`") from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise VerifyError(f"the bundle has no readable {MANIFEST}: {exc}", where=str(bundle),
                          hint="it was not written by `sparkbuild bundle`") from exc
    members = manifest.get("members") if isinstance(manifest, dict) else None
    if not isinstance(members, dict) or not all(_entry_ok(m) for m in members.values()):
        raise VerifyError(f"the bundle's {MANIFEST} does not map each member to its sha256 "
                          "and size, or its link", where=str(bundle), hint=REWRITE_HINT)
    return dict(manifest)


def admit_listed(manifest: dict[str, Any], bundle: Path) -> MemberCheck:
    """The test each member passes before it is written: listed in the manifest, as the
    kind, size and link the manifest gives, and present once."""
    members: dict[str, dict[str, Any]] = manifest["members"]
    directories = {TOP} | {f"{TOP}/{parent}" for name in members
                           for parent in _parents(name)}
    seen: set[str] = set()

    def admit(member: ArchiveMember) -> None:
        if member.kind == "dir" and member.name in directories:
            return
        relative = member.name.removeprefix(f"{TOP}/")
        if member.name in seen:
            problem = f"{relative}: in the bundle twice"
        elif relative == MANIFEST and member.name == f"{TOP}/{MANIFEST}":
            problem = ""
        elif relative not in members or member.name == relative:
            problem = f"{relative}: not in the manifest"
        else:
            problem = _unlike(members[relative], member, relative)
        seen.add(member.name)
        if problem:
            raise _mismatches([problem], bundle)

    return admit


def _parents(name: str) -> list[str]:
    parts = name.split("/")[:-1]
    return ["/".join(parts[:end]) for end in range(1, len(parts) + 1)]


def _unlike(meta: dict[str, Any], member: ArchiveMember, relative: str) -> str:
    """What makes ``member`` other than the manifest's entry; empty when it matches."""
    if "link" in meta:
        return "" if member.kind == "symlink" and member.target == meta["link"] else (
            f"{relative}: not the link the manifest names")
    if member.kind == "hardlink":  # a copy of a file stored once: hashed once extracted
        return ""
    if member.kind != "file":
        return f"{relative}: not the file the manifest names"
    if member.size != meta["size"]:
        return (f"{relative}: changed (it holds {member.size} bytes, the manifest says "
                f"{meta['size']})")
    return ""


def check_recipe(unpacked: UnpackedBundle, recipe: Recipe) -> None:
    """A bundle carries its recipe: building it under another name is refused."""
    bundled = str(unpacked.plan.get("recipe"))
    if recipe.name != bundled:
        raise UsageError(f"the bundle carries the recipe {bundled!r}, not {recipe.name!r}: a "
                         "bundle is built with its own recipe", where=str(recipe.path),
                         hint="leave out --recipe (the bundle's recipe is used), or write a "
                         f"bundle of {recipe.name!r} with `sparkbuild bundle`")


def unpack_bundle(bundle: Path, into: Path) -> UnpackedBundle:
    """Extract and verify ``bundle`` under ``into`` (reused when the same bundle was)."""
    bundle = Path(bundle)
    if not bundle.is_file():
        raise VerifyError("the bundle does not exist", where=str(bundle),
                          hint="pass the file `sparkbuild bundle --out FILE` wrote")
    with phase("bundle verify"):
        digest = sha256_file(bundle)
    dest = into / f"bundle-{digest[:16]}"
    marker = dest / VERIFIED_MARKER
    with CacheLock(into.with_name(into.name + ".lock")).held():
        if not (marker.is_file() and marker.read_text(encoding="utf-8").strip() == digest):
            _verify_into(bundle, into, dest, digest)
    root = dest / TOP
    manifest = parse_json((root / MANIFEST).read_text(encoding="utf-8"))
    try:
        plan = parse_json((root / PLAN).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise VerifyError(f"the bundle has no readable {PLAN}: {exc}", where=str(bundle),
                          hint="it was not written by `sparkbuild bundle`") from exc
    if not isinstance(plan, dict):
        raise VerifyError(f"the bundle's {PLAN} is not a JSON object", where=str(bundle),
                          hint="it was not written by `sparkbuild bundle`")
    return UnpackedBundle(root, digest, manifest, plan)


def _verify_into(bundle: Path, into: Path, dest: Path, digest: str) -> None:
    """Read the manifest, extract what it lists (nothing else is written), hash every
    member against it; the verified tree becomes ``dest``."""
    step(f"verifying the bundle {bundle}")
    manifest = read_manifest(bundle)
    staging = into / f".bundle-{digest[:16]}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with phase("bundle unpack"):
            extract_archive(bundle, staging, admit=admit_listed(manifest, bundle))
        with phase("bundle verify"):
            problems = _problems(staging / TOP, manifest)
        if problems:
            raise _mismatches(problems, bundle)
    except BaseException as exc:  # an unsafe member, a full disk keep their own errors
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, SourceError):  # the bundle's file itself cannot be read
            raise VerifyError(f"the bundle cannot be read: {exc.what}", where=str(bundle),
                              hint="copy it again; its sha256 is printed by `bundle`") from exc
        if isinstance(exc, (lzma.LZMAError, tarfile.TarError, EOFError)):
            raise VerifyError(f"the bundle cannot be read: {exc}", where=str(bundle),
                              hint="copy it again; its sha256 is printed by `bundle`") from exc
        raise
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    (dest / VERIFIED_MARKER).write_text(digest + "\n", encoding="utf-8")
    info(f"bundle verified: {len(manifest['members'])} members match the manifest")


def import_bundle(unpacked: UnpackedBundle, cache: Cache) -> list[str]:
    """Put the bundle's sources and wheels into ``cache`` under their upstream keys."""
    imported = []
    with cache.locked():
        for source in unpacked.plan["sources"]:
            if source_entry_by_key(cache, source["key"]) is not None:
                continue
            digest = store_tree_tarball(cache, unpacked.inside(source["dir"]))
            record_source(cache, source["key"], {
                "kind": source["kind"], "name": source["name"], "url": source["url"],
                "ref": source["ref"], "commit": source["commit"], "sha256": digest,
                "strip_top": False, "submodules": source["submodules"],
                "from_bundle": unpacked.sha256,
                **({"patched": source["patched"]} if source.get("patched") else {}),
            })
            imported.append(source["name"])
        wheelset = unpacked.plan.get("wheelset")
        if wheelset:
            files = {name: cache.put_file(unpacked.inside(f"wheels/{name}"), sha256=digest)
                     for name, digest in wheelset["files"].items()}
            record_wheelset(cache, wheelset["key"], {
                "requirements": wheelset["requirements"], "files": files,
                "from_bundle": unpacked.sha256,
            })
            imported.append(f"{len(files)} wheels")
        imported += _import_runtime(unpacked, cache)
        aot = unpacked.root / FLASHINFER_AOT_WHEELS
        if aot.is_dir():
            shutil.copytree(aot, cache.root / FLASHINFER_AOT_WHEELS, dirs_exist_ok=True)
            imported.append("the wheels of flashinfer's builder")
    return imported


def _import_runtime(unpacked: UnpackedBundle, cache: Cache) -> list[str]:
    """The pins (recorded as the wheelhouse looks them up) and the closure's wheels."""
    runtime = unpacked.plan.get("runtime")
    if not runtime:
        return []
    for item in [*runtime["pins"], *runtime["files"]]:
        cache.put_file(unpacked.inside(f"{RUNTIME_DIR}/{item['file']}"),
                       sha256=item["sha256"])
    for pin in runtime["pins"]:
        key = f"{canonicalize_name(pin['name'])}=={pin['version']}"
        cache.record("pins", key, {"url": pin["url"], "filename": pin["file"],
                                   "sha256": pin["sha256"], "from_bundle": unpacked.sha256})
    return [f"{len(runtime['pins'])} pins", f"{len(runtime['files'])} closure wheels"]


def bundled_runtime(unpacked: UnpackedBundle) -> dict[str, Any] | None:
    """The ``runtime`` record of a bundle (pins and closure); None for a bundle without."""
    runtime = unpacked.plan.get("runtime")
    return runtime if isinstance(runtime, dict) else None


def _bundle_marker(dest: Path) -> Path:
    return dest.with_name(dest.name + ".bundle")


def forget_bundle_tree(dest: Path) -> None:
    """``dest`` is about to hold a tree that no bundle gave (``wheel`` without
    ``--bundle``): the next bundle build must not take it for its own."""
    _bundle_marker(dest).unlink(missing_ok=True)


def _copy_tree(unpacked: UnpackedBundle, dest: Path) -> None:
    """``dest`` holds the bundle's tree: kept when it came from this bundle, else brought
    up to it file by file (:func:`sparkbuild.store.tree_sync.sync_tree`: a bundle with one
    more patch rewrites only the files that patch changed, and the build directory inside
    the tree stays for a warm rebuild)."""
    marker = _bundle_marker(dest)
    if dest.is_dir() and marker.is_file() and marker.read_text(encoding="utf-8") == unpacked.sha256:
        return
    step(f"bringing {dest} up to the bundle's tree")
    marker.unlink(missing_ok=True)
    synced = sync_tree(unpacked.tree, dest, dest.with_name(dest.name + ".files.json"))
    info(f"the bundle's tree: {synced.describe()}")
    marker.write_text(unpacked.sha256, encoding="utf-8")


def prepared_from_bundle(unpacked: UnpackedBundle, recipe: Recipe, dest: Path) -> PrepareResult:
    """The prepare result recorded in the bundle, for its tree copied to ``dest``.

    The tree is checked against the bundled series first: each patch must still be in
    place (a tree edited after bundling, or a series that does not match, is refused).
    """
    from sparkbuild.patches.engine import series_status
    from sparkbuild.patches.prepare import PrepareResult
    from sparkbuild.patches.report import PatchOutcome, SeriesReport
    from sparkbuild.sources.fetch import SourceResult

    _copy_tree(unpacked, dest)
    status = series_status(dest, recipe)
    missing = [p for p in status.patches if p.status not in IN_PLACE]
    if missing:
        raise VerifyError(
            "the bundled tree does not carry the series: " + ", ".join(
                f"{p.name} is {p.status}" for p in missing),
            where=str(dest), hint="write the bundle again from a prepared tree")
    recorded = unpacked.plan["prepared"]
    fields = ("kind", "spec", "url", "ref", "commit", "sha256")
    source_dict = recorded.get("source", {})
    source = SourceResult(**{key: source_dict.get(key) for key in fields},
                          tree=dest,
                          kept_changes=tuple(source_dict.get("kept_changes", ())))
    outcomes = [PatchOutcome(p["name"], p["status"], p["detail"], p["sha256"])
                for p in recorded.get("patches", [])] or status.patches
    uses = [(Path(u["file"]), int(u["line"])) for u in recorded.get("raw_instruction_uses", [])]
    series = SeriesReport(dest, outcomes, uses, source=source.to_dict())
    return PrepareResult(dest, source, series, 0.0)


def bundles_dir(cache_root: Path) -> Path:
    """Where verified bundles are unpacked: beside the work directories of the recipes."""
    return cache_root / "work" / "bundles"


def open_bundle(bundle: Path, cache_root: Path) -> UnpackedBundle:
    """``bundle`` verified and unpacked where the cache keeps bundles (:func:`bundles_dir`):
    the one read of its bytes a run makes; its recipe, tree, cache entries and runtime are
    all read from the result."""
    return unpack_bundle(bundle, bundles_dir(cache_root))


def bundled_recipe(unpacked: UnpackedBundle) -> Recipe:
    """The recipe a bundle carries, reading the bundle's copies of the files it names
    (:func:`with_carried_files`)."""
    from sparkbuild.recipe import load_recipe

    return with_carried_files(unpacked, load_recipe(unpacked.recipe_path))


def with_carried_files(unpacked: UnpackedBundle, recipe: Recipe) -> Recipe:
    """``recipe`` reading each file it names (:meth:`Recipe.referenced_files`) from the
    bundle's copy, checked against the sha256 ``plan.json`` records for it; a file the
    recipe names that the bundle does not carry is refused here, not when it is read."""
    carried = unpacked.plan.get("recipe_files") or {}
    if not isinstance(carried, dict):
        raise VerifyError(f"the bundle's {PLAN} does not map each recipe file to its copy",
                          where=str(unpacked.root), hint=REWRITE_HINT)
    paths = {}
    for file in recipe.referenced_files():
        entry = carried.get(file.key)
        if not isinstance(entry, dict):
            raise VerifyError(
                f"the bundle does not carry the recipe's {file.what} "
                f"({file.path.name}): its build host cannot read it",
                where=str(unpacked.root), hint="write the bundle again with this sparkbuild: "
                "`sparkbuild bundle` carries every file the recipe names")
        copy = unpacked.inside(entry.get("file"))
        if not copy.is_file() or sha256_file(copy, progress=False) != entry.get("sha256"):
            raise VerifyError(f"the bundle's copy of the recipe's {file.what} is not the file "
                              "it recorded", where=str(copy), hint=REWRITE_HINT)
        paths[file.key] = copy
    return recipe.with_files(paths)
