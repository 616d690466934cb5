"""One environment for every git sparkbuild runs, GitPython's included (no git runs here:
the repository GitPython opens is written by hand, and ``proc.run`` is replaced)."""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

from sparkbuild.errors import NetworkError, SourceError
from sparkbuild.proc import ProcResult
from sparkbuild.sources import git as sources_git

SRC = Path(sources_git.__file__).resolve().parents[1]


def _config(env: dict[str, str]) -> dict[str, str]:
    count = int(env["GIT_CONFIG_COUNT"])
    return {env[f"GIT_CONFIG_KEY_{n}"]: env[f"GIT_CONFIG_VALUE_{n}"] for n in range(count)
            if f"GIT_CONFIG_KEY_{n}" in env}


def test_every_git_runs_without_fsmonitor_hooks_or_ext(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GIT_CONFIG_COUNT", raising=False)
    env = sources_git.git_environment()
    assert _config(env) == {"core.fsmonitor": "false", "core.hooksPath": os.devnull,
                            "protocol.ext.allow": "never"}
    assert env["GIT_TERMINAL_PROMPT"] == "0" and env["GIT_CONFIG_COUNT"] == "3"


def test_the_callers_own_command_line_config_is_kept_and_ours_comes_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CONFIG_COUNT", "2")
    env = sources_git.git_environment([("filter.x.clean", "")])
    assert env["GIT_CONFIG_COUNT"] == "6"
    assert "GIT_CONFIG_KEY_0" not in env and "GIT_CONFIG_KEY_1" not in env
    assert (env["GIT_CONFIG_KEY_2"], env["GIT_CONFIG_VALUE_2"]) == ("core.fsmonitor", "false")
    assert (env["GIT_CONFIG_KEY_5"], env["GIT_CONFIG_VALUE_5"]) == ("filter.x.clean", "")


def _bare_repository(path: Path) -> Path:
    """What GitPython takes for a repository: HEAD, objects/ and refs/ (no git needed)."""
    (path / "objects").mkdir(parents=True)
    (path / "refs" / "heads").mkdir(parents=True)
    (path / "HEAD").write_text("ref: refs/heads/main\n")
    (path / "config").write_text("[core]\n\tbare = true\n\tfsmonitor = touch /tmp/pwned\n")
    return path


def _fake_git(outputs: dict[str, str], calls: list[list[str]]) -> object:
    def run(cmd: list[str], **kwargs: dict[str, str]) -> ProcResult:
        calls.append([*cmd, str(kwargs["env"].get("GIT_CONFIG_COUNT"))])
        for word, output in outputs.items():
            if word in cmd:
                return ProcResult(0, output, None, 0.0)
        return ProcResult(1, "", None, 0.0)
    return run


def test_gitpython_runs_git_in_the_same_environment(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def no_git(*args: object, **kwargs: object) -> NoReturn:
        raise PermissionError("unit tests spawn no process")

    # GitPython's import asks git its version: refused as a git it may not run, quietly
    monkeypatch.setenv("GIT_PYTHON_REFRESH", "quiet")
    monkeypatch.setattr(subprocess, "Popen", no_git)
    with sources_git.open_repo(_bare_repository(tmp_path / "r.git")) as repo:
        env = repo.git.environment()
    assert _config(env)["core.fsmonitor"] == "false"
    assert env["GIT_CONFIG_COUNT"] == sources_git.git_environment()["GIT_CONFIG_COUNT"]


def test_a_foreign_repository_s_filter_drivers_are_emptied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """git status and git apply run a driver's clean command on what they read: every driver
    the checkout's configuration (and its submodules') defines is emptied."""
    repo = _bare_repository(tmp_path / "checkout" / ".git").parent
    (repo / ".git" / "modules" / "sub").mkdir(parents=True)
    (repo / ".git" / "modules" / "sub" / "config").write_text("")
    calls: list[list[str]] = []
    outputs = {"--includes": "filter.evil.clean\0filter.a.b.process\0",
               "--git-common-dir": ".git\n"}
    monkeypatch.setattr(sources_git, "run", _fake_git(outputs, calls))
    config = dict(sources_git.foreign_config(repo))
    assert config == {f"filter.{name}.{key}": "" for name in ("a.b", "evil")
                      for key in ("clean", "smudge", "process")} | {
        "filter.a.b.required": "false", "filter.evil.required": "false"}
    assert any("--file" in call and str(repo / ".git" / "modules" / "sub" / "config") in call
               for call in calls), calls
    assert all(call[-1] == "3" for call in calls)  # the queries run in the safe environment


def test_git_apply_in_a_tree_runs_with_its_filters_emptied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkbuild.patches.engine import git_apply

    seen: list[dict[str, str]] = []

    def run(cmd: list[str], **kwargs: dict[str, str]) -> ProcResult:
        env = kwargs["env"]
        seen.append(env)
        output = "filter.evil.clean\0" if "--includes" in cmd else ""
        return ProcResult(0, output, None, 0.0)

    monkeypatch.setattr(sources_git, "run", run)
    assert git_apply(tmp_path, "a diff", check=True)[0]
    applied = seen[-1]
    assert applied["GIT_CEILING_DIRECTORIES"] == str(tmp_path.parent)
    assert _config(applied)["filter.evil.clean"] == ""
    assert _config(applied)["core.hooksPath"] == os.devnull


@pytest.mark.parametrize(("url", "error"), [
    ("file:///srv/a-file", SourceError), ("/srv/a-file", SourceError),
    ("https://example.com/x.git", NetworkError),
])
def test_a_local_remote_that_cannot_be_read_is_no_network_trouble(url: str,
                                                                 error: type) -> None:
    output = "fatal: invalid gitfile format: /srv/a-file\nfatal: Could not read from remote " \
             "repository.\n"
    assert type(sources_git.git_error(output, url, "main")) is error


def _calls_outside_git_py() -> list[str]:
    """GitPython's Repo, or a git command, used anywhere but sources/git.py."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == Path(sources_git.__file__).resolve():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            first = node.args[0] if node.args else None
            runs_git = (isinstance(first, (ast.List, ast.Tuple)) and first.elts
                        and isinstance(first.elts[0], ast.Constant)
                        and first.elts[0].value == "git")
            if name == "Repo" or runs_git:
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    return found


def test_every_git_goes_through_sources_git() -> None:
    assert _calls_outside_git_py() == []


class _Remote:
    """git fetch as a remote answers it: each refspec's exit and output, in order."""

    def __init__(self, answers: list[tuple[int, str]]) -> None:
        self.answers = answers
        self.fetched: list[str] = []

    def __call__(self, args: list[str], cwd: object = None, **kwargs: object) -> ProcResult:
        self.fetched.append(str(args[-1]))
        code, output = self.answers.pop(0)
        return ProcResult(code, output, None, 0.0)


URL = "https://example.com/x.git"
MISSING = "fatal: couldn't find remote ref refs/heads/v1\n"
UNREACHABLE = "fatal: unable to access 'https://example.com/x.git/': Could not resolve host\n"


def _mirror(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, remote: _Remote
            ) -> sources_git._Mirror:
    monkeypatch.setattr(sources_git, "run_git", remote)
    monkeypatch.setattr(sources_git._Mirror, "commit_of", lambda self, ref: f"commit of {ref}")
    monkeypatch.setattr(sources_git._Mirror, "has_commit", lambda self, commit: False)
    return sources_git._Mirror(tmp_path / "m.git", URL, offline=False)


def test_a_ref_that_is_no_branch_is_fetched_as_a_tag(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    remote = _Remote([(128, MISSING), (0, "")])
    assert _mirror(monkeypatch, tmp_path, remote).fetch_ref("v1") == \
        "commit of refs/sparkbuild/tags/v1"
    assert remote.fetched == ["+refs/heads/v1:refs/sparkbuild/heads/v1",
                              "+refs/tags/v1:refs/sparkbuild/tags/v1"]


@pytest.mark.parametrize(("answers", "error", "said"), [
    ([(128, MISSING), (128, MISSING)], SourceError, "git ref v1 does not exist at"),
    ([(128, UNREACHABLE)], NetworkError, "cannot reach git remote"),
])
def test_a_ref_found_nowhere_or_a_remote_unreachable_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: list[tuple[int, str]],
        error: type[Exception], said: str) -> None:
    remote = _Remote(answers)
    with pytest.raises(error, match=said):
        _mirror(monkeypatch, tmp_path, remote).fetch_ref("v1")
    assert remote.answers == []  # an unreachable remote is not asked for the tag


def test_a_commit_the_server_will_not_give_by_id_comes_with_every_branch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remote = _Remote([(128, "fatal: remote error: upload-pack: not our ref abc\n"), (0, "")])
    mirror = _mirror(monkeypatch, tmp_path, remote)
    with pytest.raises(SourceError, match="is not available"):  # has_commit stays False
        mirror.fetch_commit("a" * 40, "main")
    assert remote.fetched[-1] == "+refs/heads/*:refs/sparkbuild/heads/*"
    unreachable = _Remote([(128, UNREACHABLE)])
    with pytest.raises(NetworkError):
        _mirror(monkeypatch, tmp_path, unreachable).fetch_commit("a" * 40, "main")
    assert unreachable.answers == []
