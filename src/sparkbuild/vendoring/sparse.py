"""Vendoring only what a build reads: a partial clone with a sparse checkout.

``[vendor] sparse = true`` (or ``--sparse``) fetches each git source the way
:func:`sparkbuild.vendoring.fetch.checkout_git` does, with two differences:

* ``git fetch --filter=blob:none``: the commit's trees arrive, file contents only when
  the checkout asks for them;
* a non-cone sparse checkout of the rules in :mod:`sparkbuild.vendoring.unread` (no docs,
  media, tests or examples, except what the tree's CMake names), so the blobs a build
  never reads are never fetched.  CUTLASS's images alone are tens of MB.

Submodules are followed by hand (``git submodule update`` cannot set a sparse checkout
before it checks out): each gitlink's URL comes from ``.gitmodules`` (relative URLs
resolved against the parent's), mirrors apply, and the same rules hold at every level.
A mirror reached through ``file://`` or a path is served by a ``git upload-pack`` that
sparkbuild starts itself, so filters are switched on for it.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from sparkbuild.errors import CommandFailed, NetworkError, SourceError
from sparkbuild.sources.git import (
    UNREACHABLE_GIT_HINT,
    git_error,
    git_message,
    is_local_url,
    network_trouble,
    run_git,
)

if TYPE_CHECKING:
    from sparkbuild.sources.mirrors import Mirrors
    from sparkbuild.vendoring.plan import SourcePlan

LOCAL_UPLOAD_PACK = ("git -c uploadpack.allowFilter=true -c uploadpack.allowAnySHA1InWant=true "
                     "upload-pack")
MAX_DEPTH = 8


def _git(args: list[str], cwd: Path, mirrors: Mirrors, *, check: bool = True) -> tuple[int, str]:
    result = run_git([*mirrors.git_config_args(), *args], cwd, check=False)
    if check and result.returncode != 0:
        raise CommandFailed(
            f"git {' '.join(args)} failed:\n{result.output.strip()[-2000:]}", where=str(cwd)
        )
    return result.returncode, result.output


def resolve_submodule_url(parent: str, url: str) -> str:
    """``../other.git`` relative to the parent's URL, as git resolves it."""
    if not url.startswith(("./", "../")):
        return url
    parts = urlsplit(parent)
    base = parent[: len(parent) - len(parts.path)] if parts.scheme else ""
    path = parts.path if parts.scheme else parent
    joined = posixpath.normpath(posixpath.join(path.rstrip("/"), url))
    return base + joined


def _submodules(repo: Path, mirrors: Mirrors) -> list[tuple[str, str, str]]:
    """(path, url, commit) of each gitlink in HEAD that the sparse checkout kept."""
    if not (repo / ".gitmodules").is_file():
        return []
    _code, listing = _git(["ls-tree", "-r", "HEAD"], repo, mirrors)
    links = {}
    for line in listing.splitlines():
        meta, _tab, path = line.partition("\t")
        fields = meta.split()
        if len(fields) == 3 and fields[0] == "160000":
            links[path] = fields[2]
    _code, config = _git(["config", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*"],
                         repo, mirrors, check=False)
    paths: dict[str, str] = {}
    urls: dict[str, str] = {}
    for line in config.splitlines():
        key, _space, value = line.partition(" ")
        name, _dot, field = key[len("submodule."):].rpartition(".")
        if field == "path":
            paths[name] = value
        elif field == "url":
            urls[name] = value
    found = []
    for name, path in sorted(paths.items()):
        if path in links and name in urls and (repo / path).is_dir():
            found.append((path, urls[name], links[path]))
    return found


def _fetch(repo: Path, source: SourcePlan, ref: str, mirrors: Mirrors) -> str:
    code, output = _git(["fetch", "-q", "--depth", "1", "--filter=blob:none", "origin", ref],
                        repo, mirrors, check=False)
    if code != 0:
        if network_trouble(output, mirrors.rewrite(source.url)):
            raise NetworkError(f"cannot reach the git remote of {source.name}: "
                               f"{git_message(output)}",
                               where=source.url, hint=UNREACHABLE_GIT_HINT)
        code, output = _git(["fetch", "-q", "--filter=blob:none", "--tags", "origin",
                             "+refs/heads/*:refs/remotes/origin/*"], repo, mirrors, check=False)
        if code != 0:
            raise git_error(output, source.url, ref)
        for candidate in (ref, f"origin/{ref}", f"refs/tags/{ref}"):
            code, commit = _git(["rev-parse", "--verify", "-q", f"{candidate}^{{commit}}"],
                                repo, mirrors, check=False)
            if code == 0 and commit.strip():
                return commit.strip()
        raise SourceError(f"{source.name}: ref {ref!r} does not exist in {source.url}",
                          where=source.where, hint="the tree pins a ref its upstream lacks")
    return _git(["rev-parse", "FETCH_HEAD^{commit}"], repo, mirrors)[1].strip()


def _checkout(url: str, ref: str, dest: Path, source: SourcePlan, mirrors: Mirrors,
              patterns: list[str], submodules: tuple[str, ...] | None, depth: int) -> str:
    dest.mkdir(parents=True, exist_ok=True)
    _git(["init", "-q"], dest, mirrors)
    _git(["remote", "add", "origin", url], dest, mirrors)
    if is_local_url(mirrors.rewrite(url)):
        _git(["config", "remote.origin.uploadpack", LOCAL_UPLOAD_PACK], dest, mirrors)
    commit = _fetch(dest, source, ref, mirrors)
    _git(["sparse-checkout", "set", "--no-cone", *patterns], dest, mirrors)
    _git(["-c", "advice.detachedHead=false", "checkout", "-q", "--detach", commit], dest,
         mirrors)
    if submodules == () or depth >= MAX_DEPTH:
        return commit
    for path, sub_url, sub_commit in _submodules(dest, mirrors):
        if submodules is not None and path not in submodules:
            continue
        _checkout(resolve_submodule_url(url, sub_url), sub_commit, dest / path, source,
                  mirrors, patterns, None, depth + 1)
    return commit


def checkout_sparse(source: SourcePlan, dest: Path, mirrors: Mirrors,
                    patterns: list[str]) -> str:
    """A sparse working tree of ``source`` at its ref, submodules too; returns the commit."""
    return _checkout(source.url, source.fetch_ref or "HEAD", dest, source, mirrors, patterns,
                     source.submodules, 0)
