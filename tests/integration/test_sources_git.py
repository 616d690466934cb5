"""git and directory sources against local repositories over file:// (no GitHub here).

The upstream repository has a branch that moves, a pull-request ref made with
``git update-ref refs/pull/7/head``, and the recipe's lock file beside a temporary recipe.
Every git that sparkbuild runs goes through ``proc.run``; the mirror lives in the run's
cache (``--cache``), never in another one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from sparkbuild import proc
from sparkbuild.errors import CacheMissError, NetworkError, SourceError
from sparkbuild.recipe import Recipe, load_recipe
from sparkbuild.sources.fetch import fetch_source
from sparkbuild.store.context import RunContext

if TYPE_CHECKING:
    from pathlib import Path

BRANCH = "release/qwen38next"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def commit_file(repo: Path, name: str, text: str) -> str:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"write {name}")
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def upstream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository with main, a release branch and refs/pull/7/head; cache in tmp."""
    monkeypatch.setenv("SPARKBUILD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARKBUILD_QUIET", "1")
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@example.org")
    git(repo, "config", "user.name", "dev")
    commit_file(repo, "README", "main\n")
    git(repo, "checkout", "-q", "-b", BRANCH)
    commit_file(repo, "version.txt", "release 1\n")
    git(repo, "checkout", "-q", "-b", "pr")
    pull = commit_file(repo, "pr.txt", "pull request\n")
    git(repo, "update-ref", "refs/pull/7/head", pull)
    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "-D", "pr")  # only refs/pull/7/head leads to it now
    return repo


def make_recipe(tmp_path: Path, spec: str) -> Recipe:
    path = tmp_path / "recipes" / "test.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f'[source]\nspec = "{spec}"\n\n[series]\npath = "series"\n')
    return load_recipe(path)


def test_pull_request_ref_is_fetched_by_refspec(upstream: Path, tmp_path: Path) -> None:
    result = fetch_source(
        f"git+file://{upstream}@refs/pull/7/head", tmp_path / "work", recipe=None
    )
    assert result.kind == "git" and result.ref == "refs/pull/7/head"
    assert result.commit == git(upstream, "rev-parse", "refs/pull/7/head")
    assert (result.tree / "pr.txt").read_text() == "pull request\n"
    assert git(result.tree, "rev-parse", "HEAD") == result.commit
    assert git(result.tree, "status", "--porcelain") == ""
    mirror = next((tmp_path / "cache" / "git").iterdir())
    assert git(mirror, "rev-parse", "refs/sparkbuild/pull/7") == result.commit


def test_branch_commit_is_locked_and_reused_after_the_branch_moves(
    upstream: Path, tmp_path: Path
) -> None:
    spec = f"git+file://{upstream}@{BRANCH}"
    recipe = make_recipe(tmp_path, spec)
    first = fetch_source(spec, tmp_path / "w1", recipe=recipe)
    assert first.commit == git(upstream, "rev-parse", BRANCH)
    assert recipe.locked_commit() == first.commit

    git(upstream, "checkout", "-q", BRANCH)
    moved = commit_file(upstream, "version.txt", "release 2\n")
    second = fetch_source(spec, tmp_path / "w2", recipe=recipe)
    assert second.commit == first.commit != moved
    assert (second.tree / "version.txt").read_text() == "release 1\n"

    updated = fetch_source(spec, tmp_path / "w3", recipe=recipe, update_lock=True)
    assert updated.commit == moved
    assert recipe.locked_commit() == moved
    assert (updated.tree / "version.txt").read_text() == "release 2\n"


def test_locked_commit_needs_no_network_once_cached(upstream: Path, tmp_path: Path) -> None:
    spec = f"git+file://{upstream}@{BRANCH}"
    recipe = make_recipe(tmp_path, spec)
    first = fetch_source(spec, tmp_path / "w1", recipe=recipe)
    shutil.rmtree(upstream)  # the remote is gone: only the cache can serve it now
    offline = RunContext.create(offline=True)  # $SPARKBUILD_CACHE, as the first fetch used
    again = fetch_source(spec, tmp_path / "w2", recipe=recipe, context=offline)
    assert again.commit == first.commit
    assert (again.tree / "version.txt").read_text() == "release 1\n"
    with pytest.raises(CacheMissError, match="offline"):
        fetch_source(spec, tmp_path / "w3", recipe=recipe, update_lock=True, context=offline)


def test_another_spec_does_not_touch_the_recipe_lock(upstream: Path, tmp_path: Path) -> None:
    recipe = make_recipe(tmp_path, f"git+file://{upstream}@{BRANCH}")
    fetch_source(f"git+file://{upstream}@main", tmp_path / "w", recipe=recipe)
    assert not recipe.lock_path.exists()


def test_full_commit_and_default_head(upstream: Path, tmp_path: Path) -> None:
    commit = git(upstream, "rev-parse", BRANCH)
    pinned = fetch_source(f"git+file://{upstream}@{commit}", tmp_path / "w1", recipe=None)
    assert pinned.commit == commit
    head = fetch_source(f"git+file://{upstream}", tmp_path / "w2", recipe=None)
    assert head.commit == git(upstream, "rev-parse", "main")


@pytest.mark.parametrize("ref", ["refs/pull/99/head", "no-such-branch", "f" * 40])
def test_missing_ref_is_a_source_error(upstream: Path, tmp_path: Path, ref: str) -> None:
    with pytest.raises(SourceError, match=r"does not exist|not available") as caught:
        fetch_source(f"git+file://{upstream}@{ref}", tmp_path / "w", recipe=None)
    assert ref in caught.value.what


def test_missing_repository_is_a_source_error(tmp_path: Path, upstream: Path) -> None:
    with pytest.raises(SourceError, match="no git repository"):
        fetch_source(f"git+file://{tmp_path}/nothing-here@main", tmp_path / "w", recipe=None)


def test_dirty_checkout_keeps_and_names_its_changes(
    upstream: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPARKBUILD_QUIET")
    checkout = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", "-b", BRANCH, str(upstream), str(checkout))
    (checkout / ".gitignore").write_text("build/\n")
    git(checkout, "add", ".gitignore")
    git(checkout, "-c", "user.email=d@e", "-c", "user.name=d", "commit", "-q", "-m", "ignore")
    (checkout / "version.txt").write_text("edited, not committed\n")
    (checkout / "new.txt").write_text("untracked\n")
    (checkout / "README").unlink()
    (checkout / "build").mkdir()
    (checkout / "build" / "out.o").write_text("ignored\n")

    result = fetch_source(str(checkout), tmp_path / "work", recipe=None)
    assert result.kind == "directory"
    assert result.commit == git(checkout, "rev-parse", "HEAD")
    assert result.kept_changes == ("README", "new.txt", "version.txt")
    assert (result.tree / "version.txt").read_text() == "edited, not committed\n"
    assert (result.tree / "new.txt").read_text() == "untracked\n"
    assert not (result.tree / "README").exists()
    assert not (result.tree / "build").exists()
    assert "uncommitted changes" in capsys.readouterr().err
    assert (checkout / "version.txt").read_text() == "edited, not committed\n"


def test_plain_directory_is_copied_and_links_out_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    (plain / "sub").mkdir(parents=True)
    (plain / "sub" / "a.txt").write_text("a\n")
    (plain / "inside").symlink_to("sub/a.txt")
    result = fetch_source(str(plain), tmp_path / "work", recipe=None)
    assert result.kind == "directory" and result.commit is None
    assert (result.tree / "inside").read_text() == "a\n"
    assert (result.tree / "inside").is_symlink()

    (plain / "outside").symlink_to("/etc/hostname")
    with pytest.raises(SourceError, match="points outside"):
        fetch_source(str(plain), tmp_path / "work2", recipe=None)


# -- one process path, one cache ---------------------------------------------------------


def test_every_git_goes_through_proc_run(
    upstream: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fetch, clone, checkout, update-ref... all through proc.run; GitPython only reads."""
    import git as gitpython

    import sparkbuild.sources.git as sources_git

    through_proc: list[str] = []
    real_run = proc.run

    def recording_run(cmd: list[str], **kwargs: Any) -> Any:
        through_proc.append(str(cmd[1]) if cmd[1] != "-c" else str(cmd[3]))
        return real_run(cmd, **kwargs)

    through_gitpython: list[str] = []
    real_execute = gitpython.cmd.Git.execute

    def recording_execute(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        through_gitpython.append(str(command[1]))
        return real_execute(self, command, *args, **kwargs)

    monkeypatch.setattr(sources_git, "run", recording_run)
    monkeypatch.setattr(gitpython.cmd.Git, "execute", recording_execute)
    fetch_source(f"git+file://{upstream}@{BRANCH}", tmp_path / "w", recipe=None)
    checkout = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", str(upstream), str(checkout))
    (checkout / "new.txt").write_text("untracked\n")
    fetch_source(str(checkout), tmp_path / "copy", recipe=None)

    assert {"init", "fetch", "update-ref", "clone", "checkout", "remote"} <= set(through_proc)
    assert set(through_gitpython) <= {"status", "cat-file", "rev-parse"}, through_gitpython


def test_the_git_mirror_lives_in_the_runs_cache(upstream: Path, tmp_path: Path) -> None:
    """``--cache DIR`` (the context's cache), not $SPARKBUILD_CACHE or ~/.cache."""
    own = tmp_path / "own-cache"
    result = fetch_source(
        f"git+file://{upstream}@{BRANCH}", tmp_path / "w", recipe=None,
        context=RunContext.create(own),
    )
    mirrors = list((own / "git").iterdir())
    assert len(mirrors) == 1 and git(mirrors[0], "rev-parse", "refs/sparkbuild/heads/" + BRANCH) \
        == result.commit
    assert not (tmp_path / "cache").exists(), "something went to $SPARKBUILD_CACHE"


def test_prepare_cli_takes_cache(upstream: Path, tmp_path: Path) -> None:
    recipe = make_recipe(tmp_path, f"git+file://{upstream}@{BRANCH}")
    (recipe.path.parent / "series").write_text("")
    own = tmp_path / "cli-cache"
    done = subprocess.run(
        [sys.executable, "-m", "sparkbuild", "prepare", "--dest", str(tmp_path / "dest"),
         "--recipe", str(recipe.path), "--cache", str(own), "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["source"]["commit"] == git(upstream, "rev-parse", BRANCH)
    assert len(list((own / "git").iterdir())) == 1
    assert not (tmp_path / "cache").exists(), "something went to $SPARKBUILD_CACHE"


def test_vendoring_uses_the_same_git_path(
    upstream: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """build/vendor_fetch's checkouts run the same helper, in the same environment."""
    import sparkbuild.sources.git as sources_git
    from sparkbuild.vendoring.fetch import checkout_git
    from sparkbuild.vendoring.plan import SourcePlan

    envs: list[object] = []
    real_run = proc.run

    def recording_run(cmd: list[str], **kwargs: Any) -> Any:
        envs.append(kwargs.get("env"))
        return real_run(cmd, **kwargs)

    monkeypatch.setattr(sources_git, "run", recording_run)
    plan = SourcePlan("demo", "git", upstream.as_uri(), BRANCH)
    assert checkout_git(plan, tmp_path / "vendored") == git(upstream, "rev-parse", BRANCH)
    assert (tmp_path / "vendored" / "version.txt").read_text() == "release 1\n"
    assert len(envs) >= 4 and all(env == sources_git.git_environment() for env in envs)


def test_an_unreachable_remote_is_a_network_error_on_both_paths(tmp_path: Path) -> None:
    from sparkbuild.vendoring.fetch import checkout_git
    from sparkbuild.vendoring.plan import SourcePlan

    url = "http://127.0.0.1:9/nothing.git"  # the discard port: connection refused
    context = RunContext.create(tmp_path / "cache")
    with pytest.raises(NetworkError, match="cannot reach git remote"):
        fetch_source(f"git+{url}@main", tmp_path / "w", recipe=None, context=context)
    with pytest.raises(NetworkError, match="cannot reach the git remote of demo"):
        checkout_git(SourcePlan("demo", "git", url, "main"), tmp_path / "vendored")
