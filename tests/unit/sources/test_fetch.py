"""Source specs parse into typed values; anything else is one clear SourceError."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import SourceError
from sparkbuild.sources.fetch import SourceResult, parse_source_spec
from sparkbuild.sources.git import _refspecs, git_error

if TYPE_CHECKING:
    from pathlib import Path

SHA = "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"


@pytest.mark.parametrize(
    ("text", "url", "ref"),
    [
        (
            "git+https://github.com/vllm-project/vllm.git@refs/pull/53896/head",
            "https://github.com/vllm-project/vllm.git",
            "refs/pull/53896/head",
        ),
        ("git+https://example.org/r.git@release/qwen38next", "https://example.org/r.git",
         "release/qwen38next"),
        ("git+file:///srv/repo@v1.2", "file:///srv/repo", "v1.2"),
        ("git+ssh://git@example.org/r.git@main", "ssh://git@example.org/r.git", "main"),
        ("git+https://example.org/r.git", "https://example.org/r.git", None),
        ("git+file:///srv/repo@" + "a" * 40, "file:///srv/repo", "a" * 40),
    ],
)
def test_git_specs(text: str, url: str, ref: str | None) -> None:
    spec = parse_source_spec(text)
    assert (spec.kind, spec.url, spec.ref) == ("git", url, ref)


@pytest.mark.parametrize(
    "text",
    [
        "git+ftp://example.org/r.git@main",
        "git+https://example.org/r.git@bad..ref",
        "git+https://example.org/r.git@has space",
        "git+https://example.org/r.git@",
        "git+https://example.org/r.git@main#egg=x",
    ],
)
def test_bad_git_specs(text: str) -> None:
    with pytest.raises(SourceError, match="unknown source spec"):
        parse_source_spec(text)


def test_pypi_spec() -> None:
    spec = parse_source_spec("pypi:vllm==0.33.0")
    assert (spec.kind, spec.name, spec.version) == ("pypi", "vllm", "0.33.0")


@pytest.mark.parametrize(
    "text", ["pypi:vllm", "pypi:vllm>=0.1", "pypi:==1.0", "pypi:vllm==not a version", "pypi:"]
)
def test_bad_pypi_specs(text: str) -> None:
    with pytest.raises(SourceError, match="unknown source spec"):
        parse_source_spec(text)


def test_sdist_path_with_and_without_pin(tmp_path: Path) -> None:
    sdist = tmp_path / "vllm-0.33.0.tar.gz"
    sdist.write_bytes(b"x")
    plain = parse_source_spec(str(sdist))
    assert (plain.kind, plain.path, plain.sha256) == ("sdist", sdist, None)
    pinned = parse_source_spec(f"{sdist}#sha256={SHA.upper()}")
    assert (pinned.kind, pinned.path, pinned.sha256) == ("sdist", sdist, SHA)
    relative = parse_source_spec("vllm-0.33.0.tar.gz", base=tmp_path)
    assert relative.path == sdist


def test_directory_spec(tmp_path: Path) -> None:
    spec = parse_source_spec(str(tmp_path))
    assert (spec.kind, spec.path) == ("directory", tmp_path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("https://github.com/vllm-project/vllm.git", "needs the git\\+ prefix"),
        ("svn:whatever", "unknown scheme"),
        ("", "it is empty"),
        ("{sdist}#md5=abc", "#sha256="),
        ("{sdist}#sha256=1234", "#sha256="),
        ("{dir}#sha256=" + SHA, "directory cannot be pinned"),
    ],
)
def test_unknown_specs(tmp_path: Path, text: str, message: str) -> None:
    sdist = tmp_path / "a.tar.gz"
    sdist.write_bytes(b"x")
    with pytest.raises(SourceError, match=message) as caught:
        parse_source_spec(text.format(sdist=sdist, dir=tmp_path))
    assert "\n" not in caught.value.what


def test_missing_path_names_it(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file or directory") as caught:
        parse_source_spec(str(tmp_path / "nope.tar.gz"))
    assert str(tmp_path / "nope.tar.gz") in caught.value.what


def test_refspecs_fetch_pull_requests_into_our_namespace() -> None:
    assert _refspecs("refs/pull/53896/head") == [
        ("refs/pull/53896/head", "refs/sparkbuild/pull/53896")
    ]
    assert _refspecs("main") == [
        ("refs/heads/main", "refs/sparkbuild/heads/main"),
        ("refs/tags/main", "refs/sparkbuild/tags/main"),
    ]
    assert _refspecs(None) == [("HEAD", "refs/sparkbuild/HEAD")]


class FakeGitError(Exception):
    def __init__(self, stderr: str) -> None:
        super().__init__("git fetch failed")
        self.stderr = stderr


@pytest.mark.parametrize(
    ("stderr", "kind", "text"),
    [
        ("stderr: 'fatal: couldn't find remote ref refs/pull/9/head'", "SourceError",
         "does not exist"),
        ("stderr: 'fatal: '/x' does not appear to be a git repository\nfatal: Could not read "
         "from remote repository.'", "SourceError", "no git repository"),
        ("stderr: 'fatal: unable to access 'https://h/': Could not resolve host: h'",
         "NetworkError", "Could not resolve host"),
        ("stderr: 'fatal: something else'", "SourceError", "git failed: something else"),
    ],
)
def test_git_errors_are_classified(stderr: str, kind: str, text: str) -> None:
    error = git_error(FakeGitError(stderr), "https://h/r.git", "refs/pull/9/head")
    assert type(error).__name__ == kind
    assert text in error.what


def test_source_result_to_dict_is_json_ready(tmp_path: Path) -> None:
    result = SourceResult("sdist", "x.tar.gz", "file:///x.tar.gz", None, None, SHA, tmp_path)
    assert result.to_dict() == {
        "kind": "sdist",
        "spec": "x.tar.gz",
        "url": "file:///x.tar.gz",
        "ref": None,
        "commit": None,
        "sha256": SHA,
        "tree": str(tmp_path),
        "kept_changes": [],
    }
