"""Sources: turn a spec into a source tree on disk, recording exactly what it came from.

A spec is one of

* ``git+URL@REF``: REF is a branch, a tag, a full commit or any ``refs/...`` name such as a
  pull request's ``refs/pull/N/head``; fetched by refspec into a bare mirror in the cache
  (so a second prepare needs no network), then checked out at one commit;
* a directory: a git checkout (copied at its commit, uncommitted changes kept and named)
  or a plain directory;
* an sdist path, optionally pinned: ``PATH#sha256=HEX``;
* ``pypi:NAME==VERSION``: the sdist from the index pip is configured with, its sha256
  checked against the index's, cached.

For the recipe's own git source the commit a moving ref resolves to is recorded in the
recipe's lock file on first fetch and used from then on (even after the branch moves),
until ``update_lock`` asks to resolve the ref again.  Git mirrors and sdists from the index
live in the run's cache (:class:`~sparkbuild.store.context.RunContext`).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from packaging.utils import InvalidName, canonicalize_name
from packaging.version import InvalidVersion, Version

from sparkbuild.console import info, warn
from sparkbuild.errors import DestinationError, HashMismatchError, SourceError
from sparkbuild.records import Record
from sparkbuild.sources.archive import ExtractedArchive, extract_archive
from sparkbuild.sources.declared import record_pinned_requirements
from sparkbuild.sources.git import checkout_ref, clone_at, open_repo, status_paths
from sparkbuild.store.context import RunContext

if TYPE_CHECKING:
    from sparkbuild.recipe import Recipe

SourceKind = Literal["git", "directory", "sdist", "pypi"]
GIT_SCHEMES = ("https", "http", "ssh", "git", "file")
SPEC_FORMS = "git+URL@REF, a directory, an sdist path (PATH#sha256=HEX) or pypi:NAME==VERSION"

_SHA256 = re.compile(r"[0-9a-f]{64}")
_PYPI = re.compile(r"pypi:\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)")


@dataclass(frozen=True)
class SourceSpec:
    """A parsed source spec; only the fields of its ``kind`` are set."""

    kind: SourceKind
    text: str
    url: str | None = None
    """git: the remote URL (``git+`` removed)."""
    ref: str | None = None
    """git: the ref or commit; None means the remote's HEAD."""
    path: Path | None = None
    """directory and sdist."""
    sha256: str | None = None
    """sdist: the ``#sha256=`` pin."""
    name: str | None = None
    """pypi: the project."""
    version: str | None = None
    """pypi: the exact version."""


@dataclass(frozen=True)
class SourceResult(Record):
    kind: SourceKind
    spec: str
    url: str | None
    ref: str | None
    commit: str | None
    sha256: str | None
    tree: Path
    kept_changes: tuple[str, ...] = ()
    """A local checkout's uncommitted changes that were copied along (``git status``)."""

    def describe(self) -> str:
        """One line for a person: what the tree is."""
        pinned = self.commit or self.sha256
        return f"{self.kind} source {self.spec}" + (f" at {pinned}" if pinned else "")


# -- parsing ---------------------------------------------------------------------------


def _unknown(text: str, why: str) -> SourceError:
    return SourceError(f"unknown source spec {text!r}: {why}", hint=f"use {SPEC_FORMS}")


def _parse_git(text: str) -> SourceSpec:
    url = text[len("git+") :]
    parts = urlsplit(url)
    if parts.scheme not in GIT_SCHEMES or not (parts.netloc or parts.path):
        raise _unknown(text, f"git URLs must use one of: {', '.join(GIT_SCHEMES)}")
    ref: str | None = None
    if "@" in parts.path:
        path, ref = parts.path.rsplit("@", 1)
        url = parts._replace(path=path).geturl()
        if not ref or any(c in ref for c in " ~^:?*[\\") or ".." in ref:
            raise _unknown(text, f"{ref!r} is not a valid git ref")
    if parts.query or parts.fragment:
        raise _unknown(text, "a git URL takes no query or #fragment")
    return SourceSpec("git", text, url=url, ref=ref)


def _parse_pypi(text: str) -> SourceSpec:
    match = _PYPI.fullmatch(text.strip())
    if match is None:
        raise _unknown(text, "write pypi:NAME==VERSION with one exact version")
    name, version = match.groups()
    try:
        canonicalize_name(name, validate=True)
        Version(version)
    except (InvalidName, InvalidVersion) as exc:
        raise _unknown(text, str(exc)) from None
    return SourceSpec("pypi", text, name=name, version=version)


def _parse_path(text: str, base: Path) -> SourceSpec:
    location, sep, fragment = text.partition("#")
    sha256: str | None = None
    if sep:
        key, _, value = fragment.partition("=")
        if key != "sha256" or not _SHA256.fullmatch(value.lower()):
            raise _unknown(text, "the only fragment a path takes is #sha256=<64 hex digits>")
        sha256 = value.lower()
    path = (base / Path(location).expanduser()).absolute()
    if path.is_dir():
        if sha256:
            raise _unknown(text, "a directory cannot be pinned by #sha256=")
        return SourceSpec("directory", text, path=path)
    if path.is_file():
        return SourceSpec("sdist", text, path=path, sha256=sha256)
    if path.exists():
        raise _unknown(text, f"{path} is neither a directory nor a file")
    raise SourceError(
        f"no such file or directory: {path}",
        where=text,
        hint=f"check the path; a source spec is {SPEC_FORMS}",
    )


def parse_source_spec(text: str, *, base: Path | None = None) -> SourceSpec:
    """Parse ``text``; a relative path is taken from ``base`` (default: the cwd)."""
    spec = text.strip()
    if not spec:
        raise _unknown(text, "it is empty")
    if spec.startswith("git+"):
        return _parse_git(spec)
    if spec.startswith("pypi:"):
        return _parse_pypi(spec)
    scheme = urlsplit(spec).scheme
    if scheme in ("http", "https", "ssh", "git"):
        raise _unknown(text, "a URL needs the git+ prefix (git+URL@REF)")
    if len(scheme) > 1 and ":" in spec and not Path(spec.partition("#")[0]).exists():
        raise _unknown(text, f"unknown scheme {scheme!r}")
    return _parse_path(spec, base or Path.cwd())


# -- fetching --------------------------------------------------------------------------


def _own_source(spec: str, recipe: Recipe | None) -> Recipe | None:
    """The recipe, when ``spec`` is the recipe's own source (its pins and lock apply)."""
    if recipe is None or recipe.source.spec.strip() != spec.strip():
        return None
    return recipe


def fetch_source(
    spec: str,
    work: Path,
    *,
    recipe: Recipe | None,
    update_lock: bool = False,
    context: RunContext | None = None,
) -> SourceResult:
    """Put the source named by ``spec`` under the (new or empty) directory ``work``.

    The tree is ``result.tree``, somewhere under ``work``.  ``recipe`` supplies the lock
    file and the sha256 pin when ``spec`` is the recipe's own source.  ``context``: the
    cache (git mirrors, sdists from the index) and whether the run is offline (only the
    cache may serve); by default the default cache, online.
    """
    pinned = _own_source(spec, recipe)
    context = (context or RunContext.create()).with_recipe(pinned)
    # A relative path in a recipe is relative to the recipe, on the command line to the cwd.
    parsed = parse_source_spec(spec, base=pinned.path.parent if pinned is not None else None)
    work.mkdir(parents=True, exist_ok=True)
    if parsed.kind == "git":
        return fetch_git(parsed, work, context, update_lock=update_lock)
    if parsed.kind == "directory":
        return copy_directory(parsed, work)
    expected = pinned.source.sha256 if pinned is not None else None
    if parsed.kind == "pypi":
        return fetch_pypi(parsed, work, context, expected=expected)
    return unpack_sdist(parsed, work, expected=expected)


# -- sdists ----------------------------------------------------------------------------


def _sdist_tree(extracted: ExtractedArchive, into: Path) -> Path:
    """An sdist holds one top directory (``NAME-VERSION/``): that directory is the tree."""
    if len(extracted.top_level) == 1:
        top = into / extracted.top_level[0]
        if top.is_dir() and not top.is_symlink():
            return top
    return into


def _one_pin(spec: SourceSpec, expected: str | None) -> str | None:
    if spec.sha256 and expected and spec.sha256 != expected.lower():
        raise HashMismatchError(
            f"the spec pins sha256 {spec.sha256} but the recipe pins {expected.lower()}",
            where=spec.text,
            hint="make the two pins agree",
        )
    return spec.sha256 or expected


def unpack_sdist(spec: SourceSpec, work: Path, *, expected: str | None) -> SourceResult:
    """Extract a local sdist (``PATH`` or ``PATH#sha256=HEX``)."""
    assert spec.path is not None
    info(f"extracting {spec.path}")
    extracted = extract_archive(spec.path, work / "sdist", sha256=_one_pin(spec, expected))
    tree = _sdist_tree(extracted, work / "sdist")
    return SourceResult(
        "sdist", spec.text, spec.path.as_uri(), None, None, extracted.sha256, tree
    )


def fetch_pypi(
    spec: SourceSpec, work: Path, context: RunContext, *, expected: str | None
) -> SourceResult:
    """The sdist from the configured index through the run's cache, checked, extracted."""
    from sparkbuild.sources.index import fetch_sdist, normalize

    assert spec.name is not None and spec.version is not None
    cache = context.cache()
    path = fetch_sdist(cache, spec.name, spec.version, offline=context.offline)
    entry = cache.lookup("sdists", f"{normalize(spec.name)}=={spec.version}") or {}
    url = entry.get("url") if isinstance(entry.get("url"), str) else None
    indexed = entry.get("sha256") if isinstance(entry.get("sha256"), str) else None
    if expected and indexed and expected.lower() != indexed:
        raise HashMismatchError(
            f"the recipe pins sha256 {expected.lower()} but the index serves {indexed}",
            where=url or spec.text,
            hint="the release was replaced upstream, or the pin is wrong",
        )
    info(f"extracting {spec.name} {spec.version} sdist")
    extracted = extract_archive(path, work / "sdist", sha256=expected or indexed)
    tree = _sdist_tree(extracted, work / "sdist")
    return SourceResult("pypi", spec.text, url, None, None, extracted.sha256, tree)


# -- git -------------------------------------------------------------------------------


def fetch_git(
    spec: SourceSpec, work: Path, context: RunContext, *, update_lock: bool
) -> SourceResult:
    """``git+URL@REF``: fetch into the cache's mirror, check the commit out under ``work``."""
    assert spec.url is not None
    tree = work / "checkout"
    commit = checkout_ref(spec.url, spec.ref, tree, context, update_lock=update_lock)
    if context.recipe is not None:  # what the branch itself asks of each pinned project
        record_pinned_requirements(context.recipe, tree, commit)
    return SourceResult("git", spec.text, spec.url, spec.ref, commit, None, tree)


# -- local directories -----------------------------------------------------------------


def _refuse_overlap(source: Path, work: Path) -> None:
    source, work = source.resolve(), work.resolve()
    if work.is_relative_to(source) or source.is_relative_to(work):
        raise DestinationError(
            "the destination lies inside the source directory (or the other way round)",
            where=f"{work} / {source}",
            hint="choose a --dest outside the source tree",
        )


def _check_links(source: Path) -> None:
    """A copied tree must not hold a link that leads out of it."""
    root = source.resolve()
    for directory, subdirs, files in os.walk(source):
        subdirs[:] = [d for d in subdirs if d != ".git"]
        for name in (*subdirs, *files):
            path = Path(directory, name)
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                raise SourceError(
                    f"symlink {path.relative_to(source)} points outside the source directory",
                    where=str(path),
                    hint="replace it with what it points to, or use another source",
                )


def _mirror_path_state(source: Path, dest: Path, relative: str) -> None:
    """Make ``dest/relative`` what ``source/relative`` is in the working tree."""
    src, dst = source / relative, dest / relative
    if dst.is_symlink() or dst.is_file():
        dst.unlink()
    elif dst.is_dir():
        shutil.rmtree(dst)
    if src.is_symlink():
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.symlink_to(src.readlink())
    elif src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    elif src.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def _copy_checkout(spec: SourceSpec, dest: Path) -> SourceResult:
    assert spec.path is not None
    with open_repo(spec.path, foreign=True) as repo:  # the user's: its config runs nothing
        try:
            commit = str(repo.head.commit.hexsha)
        except ValueError:
            raise SourceError(
                "the git checkout has no commit yet", where=str(spec.path), hint="commit first"
            ) from None
        changes = status_paths(repo)
    clone_at(str(spec.path), dest, commit)
    for relative in changes:
        _mirror_path_state(spec.path, dest, relative)
    if changes:
        more = f" and {len(changes) - 8} more" if len(changes) > 8 else ""
        shown = ", ".join(changes[:8]) + more
        warn(f"{spec.path} has uncommitted changes; the prepared tree keeps them: {shown}")
    return SourceResult(
        "directory", spec.text, str(spec.path), None, commit, None, dest, tuple(changes)
    )


def copy_directory(spec: SourceSpec, work: Path) -> SourceResult:
    """A local checkout (at its commit, plus its uncommitted changes) or a plain directory."""
    assert spec.path is not None
    _refuse_overlap(spec.path, work)
    _check_links(spec.path)
    dest = work / (spec.path.name or "tree")
    if (spec.path / ".git").exists():
        return _copy_checkout(spec, dest)
    info(f"copying {spec.path}")
    shutil.copytree(spec.path, dest, symlinks=True)
    return SourceResult("directory", spec.text, str(spec.path), None, None, None, dest)
