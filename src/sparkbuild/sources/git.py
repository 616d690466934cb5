"""git sources: a bare mirror per URL in the cache, fetched by refspec, checked out by commit.

``git+URL@REF`` takes REF as a branch, a tag, a full commit or any ``refs/...`` name such
as a pull request's ``refs/pull/N/head``.  What is fetched collects in the cache's mirror
of the URL (so a second prepare needs no network); every used commit keeps a ref there,
so ``git gc`` never drops a locked commit.

Every git that runs goes through :func:`run_git` (``proc.run``: its echo, timeout, log
tail and process-group handling) in the one git environment, :data:`GIT_ENV`; its
failures are classified once, by :func:`git_error`.  GitPython only reads repositories
(commits, refs, status).  :mod:`sparkbuild.vendoring.fetch` uses the same helpers.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkbuild.console import info
from sparkbuild.errors import (
    CacheMissError,
    NetworkError,
    SourceError,
    SparkbuildError,
    ToolchainError,
)
from sparkbuild.proc import ProcResult, run
from sparkbuild.store.download import OFFLINE_HINT
from sparkbuild.store.hashing import sha256_bytes

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path
    from types import ModuleType

    from sparkbuild.recipe import Recipe
    from sparkbuild.store.context import RunContext

GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "GCM_INTERACTIVE": "never"}
"""Never let git stop and ask for a password (no prompt; an askpass that answers nothing):
a repository that needs one fails at once instead of hanging an unattended run."""
GIT_TIMEOUT = 3 * 3600.0
"""A clone of a big repository over a slow link takes long, but not forever."""

_MISSING_REF = (
    "couldn't find remote ref",
    "no such remote ref",
    "not our ref",
    "unadvertised object",
    "no matching remote head",
)
_NO_REPO = ("does not appear to be a git repository", "repository not found", "not found")
_NETWORK = re.compile(
    r"could not resolve host|unable to access|connection (refused|timed out)|"
    r"network is unreachable|could not read from remote|failed to connect|"
    r"temporary failure in name resolution",
    re.IGNORECASE,
)


def run_git(
    args: Sequence[str | Path],
    cwd: Path | None = None,
    *,
    check: bool = True,
    echo: bool = False,
    timeout: float = GIT_TIMEOUT,
) -> ProcResult:
    """``git ARGS`` through :func:`sparkbuild.proc.run`, in :data:`GIT_ENV`."""
    return run(["git", *args], cwd=cwd, env=GIT_ENV, timeout=timeout, check=check, echo=echo)


def git_module() -> ModuleType:
    """GitPython, for reading repositories."""
    try:
        import git
    except ImportError as exc:
        raise ToolchainError(
            f"git is not usable: {exc}", hint="install git (GitPython runs the git program)"
        ) from exc
    return git


def _output(failure: str | BaseException) -> str:
    return failure if isinstance(failure, str) else str(getattr(failure, "stderr", "") or failure)


def git_message(output: str) -> str:
    """git's own complaint: its first ``fatal:``/``error:`` line."""
    raw = output.splitlines()
    stripped = (line.strip().removeprefix("stderr: ").strip("'").strip() for line in raw)
    lines = [line for line in stripped if line]
    for line in lines:
        for prefix in ("fatal: ", "error: "):
            if line.startswith(prefix):
                return line[len(prefix) :]
    return lines[-1] if lines else "no message"


def network_trouble(output: str) -> bool:
    """Whether git's output says the remote could not be reached."""
    return _NETWORK.search(output) is not None


def git_error(failure: str | BaseException, url: str, ref: str | None) -> SparkbuildError:
    """A failed git command (its output, or an exception carrying it) as the error a user
    can act on: a missing ref or repository, the network, or git's own words."""
    output = _output(failure)
    message = git_message(output)
    lower = output.lower()
    if any(marker in lower for marker in _MISSING_REF):
        return SourceError(
            f"git ref {ref or 'HEAD'} does not exist at {url}",
            where=url,
            hint="check the ref: a branch, a tag, a full commit or refs/pull/N/head",
        )
    if any(marker in lower for marker in _NO_REPO):
        return SourceError(f"no git repository at {url}: {message}", where=url)
    if network_trouble(output):
        return NetworkError(f"cannot reach git remote: {message}", where=url, hint=OFFLINE_HINT)
    return SourceError(f"git failed: {message}", where=url)


def _git_or_error(args: Sequence[str | Path], cwd: Path | None, url: str, ref: str | None,
                  *, echo: bool = False) -> ProcResult:
    result = run_git(args, cwd, check=False, echo=echo)
    if result.returncode != 0:
        raise git_error(result.output, url, ref)
    return result


def _refspecs(ref: str | None) -> list[tuple[str, str]]:
    """(remote ref, ref in the mirror) to try, most likely first."""
    if ref is None:
        return [("HEAD", "refs/sparkbuild/HEAD")]
    pull = re.fullmatch(r"refs/pull/(\d+)/head", ref)
    if pull:
        return [(ref, f"refs/sparkbuild/pull/{pull.group(1)}")]
    if ref.startswith("refs/"):
        return [(ref, "refs/sparkbuild/" + ref[len("refs/") :])]
    return [
        (f"refs/heads/{ref}", f"refs/sparkbuild/heads/{ref}"),
        (f"refs/tags/{ref}", f"refs/sparkbuild/tags/{ref}"),
    ]


def _mirror_path(cache_root: Path, url: str) -> Path:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", url.rstrip("/").rsplit("/", 1)[-1])[:40]
    digest = sha256_bytes(url.encode())[:16]
    return cache_root / "git" / f"{stem.removesuffix('.git')}-{digest}.git"


@dataclass
class _Mirror:
    """A bare repository in the cache that collects what was fetched from one URL."""

    path: Path
    url: str
    offline: bool

    def has_commit(self, commit: str) -> bool:
        git = git_module()
        with git.Repo(self.path) as repo:
            try:
                repo.commit(commit)
            except (ValueError, git.BadName, git.BadObject):
                return False
        return True

    def commit_of(self, ref: str) -> str:
        with git_module().Repo(self.path) as repo:
            return str(repo.commit(ref).hexsha)

    def fetch(self, refspecs: list[str], ref: str | None) -> None:
        """``git fetch URL REFSPEC...`` into the mirror."""
        if self.offline:
            raise CacheMissError(
                f"git ref {ref or 'HEAD'} of {self.url} is not in the cache and the run is "
                "offline",
                where=str(self.path),
                hint="run once online to fill the cache",
            )
        _git_or_error(["fetch", "--no-tags", "--quiet", self.url, *refspecs], self.path,
                      self.url, ref, echo=True)

    def fetch_ref(self, ref: str | None) -> str:
        """Fetch ``ref`` by refspec; the commit it points at now."""
        candidates = _refspecs(ref)
        info(f"fetching {ref or 'HEAD'} from {self.url}")
        for number, (remote, local) in enumerate(candidates, start=1):
            try:
                self.fetch([f"+{remote}:{local}"], ref)
            except SourceError as error:
                if number < len(candidates) and "does not exist" in error.what:
                    continue
                raise
            return self.commit_of(local)
        raise AssertionError("unreachable: the last candidate raises")

    def fetch_commit(self, commit: str, ref: str | None) -> str:
        """Make ``commit`` present: by its id, else with every branch and tag."""
        if self.has_commit(commit):
            return commit
        info(f"fetching commit {commit[:12]} from {self.url}")
        try:
            self.fetch([f"+{commit}:refs/sparkbuild/commits/{commit}"], commit)
        except SourceError:  # the server refuses a bare commit id: take every branch
            self.fetch(["+refs/heads/*:refs/sparkbuild/heads/*"], ref)
        if not self.has_commit(commit):
            locked = ref != commit
            raise SourceError(
                f"commit {commit} is not available from {self.url}",
                where=self.url,
                hint="it may have been force-pushed away; "
                + ("pass --update-lock to use the ref's current commit" if locked else
                   "check the commit id"),
            )
        return commit

    def keep(self, commit: str) -> None:
        """A ref per used commit, so git gc never drops a locked commit from the cache."""
        run_git(["update-ref", f"refs/sparkbuild/commits/{commit}", commit], self.path)


def _open_mirror(path: Path, url: str, offline: bool) -> _Mirror:
    if not (path / "HEAD").is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        run_git(["init", "--bare", "--quiet", path])
    return _Mirror(path, url, offline)


def _resolve_commit(
    mirror: _Mirror, ref: str | None, recipe: Recipe | None, update_lock: bool
) -> str:
    if ref is not None and re.fullmatch(r"[0-9a-f]{40}", ref):
        return mirror.fetch_commit(ref, ref)
    locked = recipe.locked_commit() if recipe is not None else None
    if locked and recipe is not None and not update_lock:
        if not mirror.has_commit(locked):
            mirror.fetch_ref(ref)  # the commit is usually still reachable from the ref
            mirror.fetch_commit(locked, ref)
        info(f"using commit {locked[:12]} from {recipe.lock_path.name} (--update-lock moves it)")
        return locked
    commit = mirror.fetch_ref(ref)
    if recipe is not None:
        recipe.record_commit(commit)
        moved = f" (was {locked[:12]})" if locked and locked != commit else ""
        info(f"recorded commit {commit[:12]} of {ref or 'HEAD'} in {recipe.lock_path}{moved}")
    return commit


def clone_at(origin: str, dest: Path, commit: str, *, remote_url: str | None = None) -> None:
    """A local clone of ``origin`` (objects hard-linked: fast), ``commit`` checked out.

    ``remote_url``: the URL the clone's ``origin`` remote names instead of ``origin``.
    """
    _git_or_error(["clone", "--quiet", "--local", "--no-checkout", origin, dest], None,
                  origin, commit, echo=True)
    _git_or_error(["-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", commit],
                  dest, origin, commit)
    if remote_url is not None:
        run_git(["remote", "set-url", "origin", remote_url], dest)


def status_paths(repo: Any) -> list[str]:
    """Paths ``git status`` reports (both names of a rename), untracked files included."""
    raw = repo.git.status("--porcelain=v1", "-z", "--untracked-files=all")
    entries = [entry for entry in str(raw).split("\0") if entry]
    paths: list[str] = []
    index = 0
    while index < len(entries):
        entry = entries[index]
        paths.append(entry[3:])
        if entry[0] in "RC":  # a rename or copy: the next entry is the old name
            index += 1
            paths.append(entries[index])
        index += 1
    return sorted(set(paths))


def checkout_ref(
    url: str, ref: str | None, dest: Path, context: RunContext, *, update_lock: bool
) -> str:
    """Fetch ``url``'s ``ref`` into the cache's mirror, check it out at ``dest``; the commit.

    With ``context.recipe`` (the recipe's own source) a locked commit is used, or the one
    the ref resolves to is recorded; ``context.offline`` lets only the mirror serve.
    """
    cache = context.cache()
    with cache.locked():
        path = _mirror_path(cache.root, url)
        created = not (path / "HEAD").is_file()
        mirror = _open_mirror(path, url, context.offline)
        try:
            commit = _resolve_commit(mirror, ref, context.recipe, update_lock)
        except SparkbuildError:
            if created:  # a wrong URL must not leave an empty mirror behind
                shutil.rmtree(path, ignore_errors=True)
            raise
        mirror.keep(commit)
    # The kept ref guards the commit from here on.
    clone_at(str(mirror.path), dest, commit, remote_url=url)
    return commit
