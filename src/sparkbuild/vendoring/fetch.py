"""Fetch what a :class:`~sparkbuild.vendoring.plan.VendorPlan` names into the dependency cache.

Everything lands in the content-addressed :class:`~sparkbuild.store.cache.Cache` as one blob,
with an index entry (:mod:`sparkbuild.vendoring.index`) that says what the blob is:

* a git source: a deterministic ``.tar.gz`` of the checkout at REF with its submodules
  (sorted entries, zero timestamps and owners, no ``.git``), plus the commit REF resolved
  to.  A tarball rather than a bare mirror: a mirror does not hold the submodules, which
  live in other repositories, and the build needs a plain tree.
* a URL source: the downloaded archive itself, verified against URL_HASH.
* the build-requirement wheels (``pip wheel``, which copies wheels and builds the odd
  sdist) for one requirement set, Python and machine.
* crates: a tarball of ``cargo vendor``'s output.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import os
import re
import shutil
import stat
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.console import step
from sparkbuild.errors import (
    CommandFailed,
    HashMismatchError,
    NetworkError,
    SourceError,
)
from sparkbuild.proc import run
from sparkbuild.sources.git import (
    UNREACHABLE_GIT_HINT,
    git_message,
    network_trouble,
    run_git,
)
from sparkbuild.sources.mirrors import NO_MIRRORS, Mirrors
from sparkbuild.store.cache import Cache
from sparkbuild.store.download import fetch_to_cache
from sparkbuild.store.hashing import sha256_file
from sparkbuild.vendoring.build_deps import CratePlan
from sparkbuild.vendoring.index import (
    crates_entry,
    record_crates,
    record_source,
    record_wheelset,
    source_entry,
    wheelset_entry,
    with_missed_sources,
)
from sparkbuild.vendoring.plan import SourcePlan, VendorEntry, VendorPlan, VendorResult

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from sparkbuild.recipe import Recipe
    from sparkbuild.vendoring.patched import DependencyEdit
    from sparkbuild.vendoring.placeholders import Placeholder


# -- deterministic tarballs ----------------------------------------------------------------


def _walk(root: Path) -> Iterator[Path]:
    """Every path under ``root`` in sorted order, without .git directories or files; a link
    to a directory is a path of its own (os.walk lists it among the directories)."""
    for directory, dirnames, filenames in os.walk(root):
        base = Path(directory)
        links = [d for d in dirnames if (base / d).is_symlink()]
        dirnames[:] = sorted(d for d in dirnames if d != ".git" and d not in links)
        if base != root:
            yield base
        for name in sorted([*filenames, *links]):
            if name != ".git":
                yield base / name


def _tar_info(path: Path, root: Path) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path.relative_to(root).as_posix())
    mode = path.lstat().st_mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if stat.S_ISLNK(mode):
        info.type = tarfile.SYMTYPE
        info.linkname = str(path.readlink())
        info.mode = 0o777
    elif stat.S_ISDIR(mode):
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    else:
        info.size = path.stat().st_size
        info.mode = 0o755 if mode & 0o111 else 0o644
    return info


def write_tree_tarball(root: Path, out: Path) -> None:
    """A .tar.gz of ``root`` whose bytes depend only on the files' names, modes and data."""
    with out.open("wb") as raw, gzip.GzipFile(
        filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6
    ) as gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _walk(root):
            info = _tar_info(path, root)
            if info.isreg():
                with path.open("rb") as data:
                    tar.addfile(info, data)
            else:
                tar.addfile(info)


def store_tree_tarball(cache: Cache, root: Path) -> str:
    """``root`` as a deterministic tarball in the cache; its sha256."""
    partial = cache.new_partial_path()
    try:
        write_tree_tarball(root, partial)
        return cache.adopt_file(partial, sha256=sha256_file(partial))
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()


# -- git ----------------------------------------------------------------------------------


def _git(args: list[str], cwd: Path, *, check: bool = True, mirrors: Mirrors = NO_MIRRORS
         ) -> str:
    result = run_git([*mirrors.git_config_args(), *args], cwd, check=False)
    if check and result.returncode != 0:
        raise CommandFailed(
            f"git {' '.join(args)} failed:\n{result.output.strip()[-2000:]}", where=str(cwd)
        )
    return result.output if result.returncode == 0 else ""


def _fetch_ref(repo: Path, source: SourcePlan, mirrors: Mirrors = NO_MIRRORS) -> str:
    """Fetch ``source.ref`` (tag, branch or commit) into ``repo``; returns its commit.

    The remote is the upstream URL; ``mirrors`` rewrite it (git's insteadOf) on fetch.
    """
    ref = source.fetch_ref or "HEAD"
    origin = mirrors.rewrite(source.url)
    through = f" (through the mirror {origin})" if origin != source.url else ""
    shallow = run_git([*mirrors.git_config_args(), "fetch", "-q", "--depth", "1", "origin", ref],
                      repo, check=False)
    if shallow.returncode == 0:
        return _git(["rev-parse", "FETCH_HEAD^{commit}"], repo).strip()
    if network_trouble(shallow.output, origin):
        raise NetworkError(
            f"cannot reach the git remote of {source.name}{through}: "
            f"{git_message(shallow.output)}", where=source.url,
            hint=UNREACHABLE_GIT_HINT,
        )
    # Servers that refuse a shallow fetch of a commit: fetch everything, then resolve.
    _git(["fetch", "-q", "--tags", "origin", "+refs/heads/*:refs/remotes/origin/*"], repo,
         mirrors=mirrors)
    for candidate in (ref, f"origin/{ref}", f"refs/tags/{ref}"):
        commit = _git(["rev-parse", "--verify", "-q", f"{candidate}^{{commit}}"], repo,
                      check=False).strip()
        if commit:
            return commit
    raise SourceError(
        f"{source.name}: ref {ref!r} does not exist in {source.url}{through}",
        where=source.where, hint="the tree pins a ref its upstream (or mirror) does not have",
    )


def checkout_git(source: SourcePlan, dest: Path, mirrors: Mirrors = NO_MIRRORS) -> str:
    """A working tree of ``source`` at its ref, with its submodules, in ``dest``."""
    dest.mkdir(parents=True)
    _git(["init", "-q"], dest)
    _git(["remote", "add", "origin", source.url], dest)
    commit = _fetch_ref(dest, source, mirrors)
    _git(["-c", "advice.detachedHead=false", "checkout", "-q", "--detach", commit], dest)
    if (dest / ".gitmodules").is_file() and source.submodules != ():
        paths = list(source.submodules or ())
        _git(["submodule", "update", "--init", "--recursive", "--", *paths], dest,
             mirrors=mirrors)
    return commit


def _patch_checkout(source: SourcePlan, root: Path, edit: DependencyEdit | None,
                    utils: Path | None) -> dict[str, Any]:
    """The series' arch edit on a fresh checkout (:mod:`sparkbuild.vendoring.patched`)."""
    if edit is None or source.patched is None:
        return {}
    from sparkbuild.vendoring.patched import apply_to_source

    return {"patched": apply_to_source(edit, root, source.name, utils)}


def _fetch_git(cache: Cache, source: SourcePlan, scratch: Path, mirrors: Mirrors,
               sparse: list[str] | None, edit: DependencyEdit | None = None,
               utils: Path | None = None) -> VendorEntry:
    origin = mirrors.rewrite(source.url)
    through = f" (from the mirror {origin})" if origin != source.url else ""
    how = ", sparse" if sparse else ""
    standing = (f" (stand-in for the pin {source.ref}: {source.stand_in.reason})"
                if source.stand_in else "")
    step(f"vendoring {source.name}: {source.url} @ {source.fetch_ref}{standing}{through}{how}")
    checkout = scratch / source.name
    if sparse:
        from sparkbuild.vendoring.sparse import checkout_sparse

        commit = checkout_sparse(source, checkout, mirrors, sparse)
    else:
        commit = checkout_git(source, checkout, mirrors)
    problem = source.commit_problem(commit)
    if problem is not None:
        shutil.rmtree(checkout, ignore_errors=True)
        raise SourceError(problem, where=source.where,
                          hint="name it in the recipe: [[vendor.stand_in]] url, pinned, used "
                          "and reason, or give a mirror that holds the pin")
    patched = _patch_checkout(source, checkout, edit, utils)
    digest = store_tree_tarball(cache, checkout)
    shutil.rmtree(checkout, ignore_errors=True)
    record_source(cache, source.key, {
        "kind": "git", "name": source.name, "url": source.url, "ref": source.ref,
        "commit": commit, "sha256": digest, "strip_top": False,
        "submodules": None if source.submodules is None else list(source.submodules),
        **({"sparse": sparse} if sparse else {}), **patched,
        **({"stand_in": source.stand_in.to_dict()} if source.stand_in else {}),
    })
    return VendorEntry("source", source.name, "fetched", f"{source.ref} = {commit}", digest)


# -- URLs ---------------------------------------------------------------------------------


def _check_url_hash(source: SourcePlan, path: Path) -> None:
    """URL_HASH in another algorithm than sha256 (MD5, SHA1, SHA512...)."""
    if not source.url_hash or source.sha256:
        return
    algorithm, _, expected = source.url_hash.partition("=")
    digest = hashlib.new(algorithm.lower().replace("_", ""))
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != expected.lower():
        raise HashMismatchError(
            f"{source.name}: {algorithm} mismatch for {source.url}", where=source.where,
            hint="the file changed upstream or the tree's URL_HASH is wrong",
        )


def _fetch_url(cache: Cache, source: SourcePlan, mirrors: Mirrors, scratch: Path,
               edit: DependencyEdit | None = None, utils: Path | None = None) -> VendorEntry:
    step(f"vendoring {source.name}: {source.url}")
    last: NetworkError | None = None
    upstream = (source.url, *source.mirrors)
    candidates = dict.fromkeys([mirrors.rewrite(url) for url in upstream] + list(upstream))
    for url in candidates:
        try:
            path = fetch_to_cache(cache, url, source.sha256)
            break
        except NetworkError as exc:
            last = exc
    else:
        assert last is not None
        raise last
    _check_url_hash(source, path)
    filename = source.url.rstrip("/").rsplit("/", 1)[-1]
    if edit is None or source.patched is None:
        record_source(cache, source.key, {
            "kind": "url", "name": source.name, "url": source.url, "sha256": path.name,
            "strip_top": True, "filename": filename,
        })
        return VendorEntry("source", source.name, "fetched", source.url, path.name)
    # Patched: the archive unpacked (its single top directory stripped), edited, re-packed.
    from sparkbuild.sources.archive import extract_archive

    staging = scratch / f"{source.name}-unpacked"
    extracted = extract_archive(path, staging, sha256=path.name)
    top = extracted.top_level
    root = staging / top[0] if len(top) == 1 and (staging / top[0]).is_dir() else staging
    patched = _patch_checkout(source, root, edit, utils)
    digest = store_tree_tarball(cache, root)
    shutil.rmtree(staging, ignore_errors=True)
    record_source(cache, source.key, {
        "kind": "url", "name": source.name, "url": source.url, "sha256": digest,
        "strip_top": False, "filename": filename, "archive_sha256": path.name, **patched,
    })
    return VendorEntry("source", source.name, "fetched", source.url, digest)


def fetch_source(cache: Cache, source: SourcePlan, scratch: Path,
                 mirrors: Mirrors = NO_MIRRORS, sparse: list[str] | None = None,
                 edit: DependencyEdit | None = None, utils: Path | None = None) -> VendorEntry:
    """``source`` into the cache unless there; ``edit``: the series' arch edit, for a source
    planned with it (``source.patched``); ``utils``: the tree's helper for it."""
    entry = source_entry(cache, source)
    if entry is not None:
        detail = str(entry.get("commit") or source.url)
        return VendorEntry("source", source.name, "cached", detail, str(entry["sha256"]))
    if source.kind == "git":
        return _fetch_git(cache, source, scratch, mirrors, sparse, edit, utils)
    return _fetch_url(cache, source, mirrors, scratch, edit, utils)


# -- wheels -------------------------------------------------------------------------------


def _unavailable(output: str) -> str | None:
    match = re.search(r"No matching distribution found for (\S+)", output)
    return match.group(1) if match else None


def fetch_wheels(cache: Cache, plan: VendorPlan, scratch: Path) -> VendorEntry:
    names = ", ".join(plan.requirements)
    if not plan.wheels:
        return VendorEntry("wheels", "build requirements", "cached", "none declared")
    if wheelset_entry(cache, plan) is not None:
        return VendorEntry("wheels", "build requirements", "cached", names)
    step(f"vendoring build requirements: {names}")
    requirements = scratch / "build-requirements.txt"
    requirements.write_text("\n".join(plan.requirements) + "\n", encoding="utf-8")
    wheel_dir = scratch / "wheels"
    result = run(
        [sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "--wheel-dir",
         wheel_dir, "-r", requirements],
        log=scratch / "pip-wheel.log", check=False, timeout=3 * 3600,
    )
    if result.returncode != 0:
        missing = _unavailable(result.full_output())
        if missing:
            raise SourceError(
                f"build requirement {missing} cannot be had from the configured package index",
                where=str(plan.tree),
                hint="a torch pin needs its wheel for this Python and machine on the index "
                "(pip config: index-url / find-links); `pip download` it by hand to see why",
            )
        raise CommandFailed(
            "pip wheel of the build requirements failed:\n" + result.output.strip()[-3000:],
            where=str(scratch / "pip-wheel.log"),
        )
    files = {path.name: cache.put_file(path) for path in sorted(wheel_dir.glob("*.whl"))}
    record_wheelset(cache, plan.wheelset_key, {
        "requirements": plan.requirements, "files": files, "tree": str(plan.tree),
    })
    return VendorEntry("wheels", "build requirements", "fetched", f"{len(files)} wheels")


# -- crates -------------------------------------------------------------------------------


def fetch_crates(cache: Cache, tree: Path, crate: CratePlan, scratch: Path) -> VendorEntry:
    if crate.count == 0:
        return VendorEntry("crates", crate.lockfile, "cached", "no registry or git crates")
    if crates_entry(cache, crate) is not None:
        return VendorEntry("crates", crate.lockfile, "cached", f"{crate.count} crates")
    step(f"vendoring {crate.count} crates of {crate.lockfile}")
    manifest = (tree / crate.lockfile).parent / "Cargo.toml"
    out = scratch / "cargo-vendor"
    run(["cargo", "vendor", "--locked", "--manifest-path", manifest, out],
        cwd=manifest.parent, env={"CARGO_TERM_COLOR": "never"}, timeout=3 * 3600,
        log=scratch / "cargo-vendor.log")
    digest = store_tree_tarball(cache, out)
    record_crates(cache, crate, digest)
    return VendorEntry("crates", crate.lockfile, "fetched", f"{crate.count} crates", digest)


# -- all of it ----------------------------------------------------------------------------


def fetch_plan(plan: VendorPlan, cache_root: Path, *, mirrors: Mirrors = NO_MIRRORS,
               wheels: bool = True, sparse: list[str] | None = None,
               edit: DependencyEdit | None = None) -> list[VendorEntry]:
    """Fetch every item of ``plan`` missing from the cache; holds the cache lock.

    ``mirrors`` rewrite where sources come from (keys and records stay upstream's);
    ``wheels=False`` leaves the build requirements out (a build on an existing torch);
    ``sparse``: sparse-checkout patterns for git sources (:mod:`sparkbuild.vendoring.sparse`);
    ``edit``: the series' arch edit for the sources planned with it (vendor.patched).
    """
    cache = Cache(cache_root)
    entries: list[VendorEntry] = []
    with cache.locked():
        cache.sweep_partials()
        scratch_root = cache.root / "tmp"
        scratch_root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="vendor-", dir=scratch_root) as scratch_dir:
            scratch = Path(scratch_dir)
            utils = None
            if edit is not None:
                from sparkbuild.vendoring.patched import tree_utils

                utils = tree_utils(plan.tree)
            for source in plan.sources:
                entries.append(fetch_source(cache, source, scratch, mirrors, sparse, edit,
                                            utils))
            if wheels:
                entries.append(fetch_wheels(cache, plan, scratch))
            for crate in plan.crates:
                entries.append(fetch_crates(cache, plan.tree, crate, scratch))
    return entries


def vendor_for_recipe(tree: Path, cache: Cache, recipe: Recipe, *, mirrors: Sequence[str] = (),
                      offline: bool, wheels: bool, reuse: bool = False,
                      placeholders: tuple[Placeholder, ...] = ()) -> VendorResult:
    """:func:`~sparkbuild.vendoring.plan.vendor_tree` with the recipe's choices (``wheel`` and
    ``bundle`` alike): the sources an earlier build found missing, ``[vendor]`` submodules,
    excludes and sparse checkouts, ``mirrors`` before the recipe's own, the recipe's build
    environment.  ``offline``: plan only; ``wheels=False``: no build-requirement wheels;
    ``reuse``: the recorder's part kept from an earlier run with the same inputs
    (:mod:`sparkbuild.vendoring.kept_plan`; ``wheel`` only); ``placeholders``: the sources
    no built extension uses, which are not fetched."""
    from sparkbuild.vendoring.kept_plan import reusing
    from sparkbuild.vendoring.patched import dependency_edit, with_dependency_edit
    from sparkbuild.vendoring.plan import FetchChoices, adjust_plan, record_sources, vendor_tree

    settings = recipe.vendor
    edit = dependency_edit(recipe)

    def adjust(plan: VendorPlan) -> VendorPlan:
        plan = with_missed_sources(plan, cache, recipe.name)
        plan = adjust_plan(plan, submodules=settings.submodules, exclude=settings.exclude,
                           crates=settings.crates, placeholders=placeholders,
                           stand_ins=settings.stand_ins)
        plan = with_dependency_edit(plan, edit)
        return plan if wheels else dataclasses.replace(plan, wheels=())

    merged = Mirrors.parse(mirrors).merged(Mirrors.parse(settings.mirrors, where=str(recipe.path)))
    return vendor_tree(tree, cache.root, plan_only=offline, env={**os.environ, **recipe.build.env},
                       adjust=adjust, sources_of=reusing(cache) if reuse else record_sources,
                       fetching=FetchChoices(mirrors=merged, wheels=wheels,
                                             sparse=settings.sparse, edit=edit))
