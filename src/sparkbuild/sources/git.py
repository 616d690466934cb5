"""git sources: a bare mirror per URL in the cache, fetched by refspec, checked out by commit.

``git+URL@REF`` takes REF as a branch, a tag, a full commit or any ``refs/...`` name such
as a pull request's ``refs/pull/N/head``.  What is fetched collects in the cache's mirror
of the URL (so a second prepare needs no network); every used commit keeps a ref there,
so ``git gc`` never drops a locked commit.

Every git that runs goes through :func:`run_git` (``proc.run``: its echo, timeout, log
tail and process-group handling) in the one git environment, :func:`git_environment`; its
failures are classified once, by :func:`git_error`; a remote the network cannot reach
gets :data:`UNREACHABLE_GIT_HINT`, wherever git fetches.  GitPython only reads repositories
(commits, refs, status), each opened by :func:`open_repo`, whose git runs in the same
environment.  :mod:`sparkbuild.vendoring.fetch` and :mod:`sparkbuild.patches.engine` (``git
apply``) use the same helpers.

The environment carries :data:`SAFE_CONFIG` as git's command-line configuration, which
outranks every configuration file, a repository's own included: a checkout's
``core.fsmonitor`` command, its hooks and ``ext::`` URLs never run.  For a repository
sparkbuild did not make (a local checkout, a tree given to ``patch``), it also empties every
filter driver that repository's configuration defines, since ``git status`` and ``git apply``
run a driver's ``clean`` command on the files they read.
"""

from __future__ import annotations

import contextlib
import os
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
from sparkbuild.proc import ProcResult, Streams, run
from sparkbuild.store.hashing import sha256_bytes

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from pathlib import Path
    from types import ModuleType

    from sparkbuild.recipe import Recipe
    from sparkbuild.store.context import RunContext

UNREACHABLE_GIT_HINT = (
    "check the network, or fetch through a mirror that this machine reaches (--mirror "
    "BASE=REPLACEMENT, or [vendor] mirrors in the recipe; e.g. "
    "--mirror https://github.com/=file:///srv/git/); a machine that never reaches the "
    "remote builds from a bundle written on one that does (`sparkbuild bundle --out FILE` "
    "there, `sparkbuild wheel --bundle FILE` here)"
)
"""The hint of every git fetch that failed for want of the network (a source, a vendored
dependency, a sparse fetch): the ways to build without reaching the remote."""

GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "GCM_INTERACTIVE": "never"}
"""Never let git stop and ask for a password (no prompt; an askpass that answers nothing):
a repository that needs one fails at once instead of hanging an unattended run."""
SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", os.devnull),
    ("protocol.ext.allow", "never"),
)
"""Configuration every git runs with, above any file's: no fsmonitor command (git status
runs it), no hooks, no ``ext::`` transport (it runs a command named in the URL)."""
FILTER_COMMANDS = ("clean", "smudge", "process")
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


def _config_count(raw: str | None) -> int:
    return int(raw) if raw is not None and raw.strip().isdigit() else 0


def git_environment(config: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """The variables every git runs with: :data:`GIT_ENV`, and :data:`SAFE_CONFIG` plus
    ``config`` as command-line configuration (``GIT_CONFIG_COUNT``), after the entries the
    caller's own environment may hold.  Every git that git starts (a submodule's status,
    an upload-pack) inherits them."""
    base = _config_count(os.environ.get("GIT_CONFIG_COUNT"))
    entries = [*SAFE_CONFIG, *config]
    env = dict(GIT_ENV)
    for number, (key, value) in enumerate(entries, start=base):
        env[f"GIT_CONFIG_KEY_{number}"] = key
        env[f"GIT_CONFIG_VALUE_{number}"] = value
    env["GIT_CONFIG_COUNT"] = str(base + len(entries))
    return env


def run_git(
    args: Sequence[str | Path],
    cwd: Path | None = None,
    *,
    check: bool = True,
    echo: bool = False,
    timeout: float = GIT_TIMEOUT,
    env: Mapping[str, str] | None = None,
    stdin_data: str | None = None,
    foreign: Path | None = None,
) -> ProcResult:
    """``git ARGS`` through :func:`sparkbuild.proc.run`, in :func:`git_environment`
    (``env``: more variables).  ``foreign``: a repository sparkbuild did not make, whose
    filter drivers are emptied (:func:`foreign_config`)."""
    config = foreign_config(foreign) if foreign is not None else ()
    return run(["git", *args], cwd=cwd, env={**git_environment(config), **(env or {})},
               timeout=timeout, check=check, echo=echo,
               streams=Streams(stdin_data=stdin_data))


def _filter_drivers(output: str) -> set[str]:
    """Driver names from ``git config --name-only --null`` lines ``filter.NAME.KEY``."""
    names = set()
    for key in output.split("\0"):
        key = key.strip()
        if key.startswith("filter.") and key.count(".") >= 2:
            names.add(key[len("filter."):key.rindex(".")])
    return names


def foreign_config(repository: Path) -> tuple[tuple[str, str], ...]:
    """For a repository sparkbuild did not make: each filter driver its configuration
    defines (its own, its submodules', and what they include), emptied.

    ``git config`` only reads.  A directory that is no repository has none.
    """
    pattern = r"^filter\..*\.(" + "|".join(FILTER_COMMANDS) + ")$"
    query = ["config", "--null", "--name-only", "--includes", "--get-regexp", pattern]
    found = run_git(query, repository, check=False)
    names = _filter_drivers(found.output) if found.returncode == 0 else set()
    common = run_git(["rev-parse", "--git-common-dir"], repository, check=False)
    if common.returncode == 0 and common.output.strip():
        git_dir = (repository / common.output.strip()).resolve()
        for config in sorted(git_dir.glob("modules/**/config")):
            nested = run_git([*query[:1], "--file", str(config), *query[1:]], repository,
                             check=False)
            names |= _filter_drivers(nested.output) if nested.returncode == 0 else set()
    emptied = [(f"filter.{name}.{key}", "") for name in sorted(names) for key in FILTER_COMMANDS]
    return tuple(emptied + [(f"filter.{name}.required", "false") for name in sorted(names)])


def git_module() -> ModuleType:
    """GitPython, for reading repositories (open them with :func:`open_repo`)."""
    try:
        import git
    except ImportError as exc:
        raise ToolchainError(
            f"git is not usable: {exc}", hint="install git (GitPython runs the git program)"
        ) from exc
    return git


@contextlib.contextmanager
def open_repo(path: Path, *, foreign: bool = False) -> Iterator[Any]:
    """GitPython's ``Repo`` at ``path``, its git in :func:`git_environment` (``foreign``:
    a repository sparkbuild did not make; see :func:`foreign_config`)."""
    git = git_module()
    with git.Repo(path) as repo:
        config = foreign_config(path) if foreign else ()
        repo.git.update_environment(**git_environment(config))
        yield repo


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


def is_local_url(url: str) -> bool:
    """A remote on this machine: ``file://``, an absolute path, or a path with no scheme."""
    return url.startswith(("file://", "/")) or ("://" not in url and ":" not in url)


def network_trouble(output: str, url: str) -> bool:
    """Whether git's output says the remote ``url`` could not be reached over the network
    (git says "could not read from remote repository" for a local path that is no
    repository too: a remote on this machine is never network trouble)."""
    return not is_local_url(url) and _NETWORK.search(output) is not None


def git_error(failure: str | BaseException, url: str, ref: str | None) -> SparkbuildError:
    """A failed git command (its output, or an exception carrying it) as the error a user
    can act on: a missing ref or repository, the network, or git's own words."""
    output = _output(failure)
    message = git_message(output)
    lower = output.lower()
    if missing_ref(output):
        return SourceError(
            f"git ref {ref or 'HEAD'} does not exist at {url}",
            where=url,
            hint="check the ref: a branch, a tag, a full commit or refs/pull/N/head",
        )
    unreadable_here = is_local_url(url) and "could not read from remote" in lower
    if unreadable_here or any(marker in lower for marker in _NO_REPO):
        return SourceError(f"no git repository at {url}: {message}", where=url)
    if network_trouble(output, url):
        return NetworkError(f"cannot reach git remote: {message}", where=url,
                            hint=UNREACHABLE_GIT_HINT)
    return SourceError(f"git failed: {message}", where=url)


def missing_ref(output: str) -> bool:
    """Whether git's ``output`` says the ref asked for is not at the remote."""
    lower = output.lower()
    return any(marker in lower for marker in _MISSING_REF)


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
        with open_repo(self.path) as repo:
            try:
                repo.commit(commit)
            except (ValueError, git.BadName, git.BadObject):
                return False
        return True

    def commit_of(self, ref: str) -> str:
        with open_repo(self.path) as repo:
            return str(repo.commit(ref).hexsha)

    def try_fetch(self, refspecs: list[str], ref: str | None) -> ProcResult:
        """``git fetch URL REFSPEC...`` into the mirror, its result whatever it is (offline:
        a :class:`CacheMissError`, nothing is run)."""
        if self.offline:
            raise CacheMissError(
                f"git ref {ref or 'HEAD'} of {self.url} is not in the cache and the run is "
                "offline",
                where=str(self.path),
                hint="run once online to fill the cache",
            )
        return run_git(["fetch", "--no-tags", "--quiet", self.url, *refspecs], self.path,
                       check=False, echo=True)

    def fetch(self, refspecs: list[str], ref: str | None) -> None:
        """:meth:`try_fetch`, its failure raised as the error a user can act on."""
        result = self.try_fetch(refspecs, ref)
        if result.returncode != 0:
            raise git_error(result.output, self.url, ref)

    def fetch_ref(self, ref: str | None) -> str:
        """Fetch ``ref`` by refspec (a branch, else a tag of that name); the commit it
        points at now."""
        candidates = _refspecs(ref)
        info(f"fetching {ref or 'HEAD'} from {self.url}")
        for number, (remote, local) in enumerate(candidates, start=1):
            result = self.try_fetch([f"+{remote}:{local}"], ref)
            if result.returncode == 0:
                return self.commit_of(local)
            if number == len(candidates) or not missing_ref(result.output):
                raise git_error(result.output, self.url, ref)
        raise AssertionError("unreachable: the last candidate returns or raises")

    def fetch_commit(self, commit: str, ref: str | None) -> str:
        """Make ``commit`` present: by its id, else (a server that refuses a bare commit
        id) with every branch and tag."""
        if self.has_commit(commit):
            return commit
        info(f"fetching commit {commit[:12]} from {self.url}")
        by_id = self.try_fetch([f"+{commit}:refs/sparkbuild/commits/{commit}"], commit)
        if by_id.returncode != 0:
            error = git_error(by_id.output, self.url, commit)
            if not isinstance(error, SourceError):  # the network: no server to ask again
                raise error
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
