"""Every git fetch that fails for want of the network says how to build without it: through
a mirror, or from a bundle written where the network is (one hint, three fetches)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.errors import NetworkError
from sparkbuild.proc import ProcResult
from sparkbuild.sources.git import UNREACHABLE_GIT_HINT, git_error
from sparkbuild.sources.mirrors import Mirrors
from sparkbuild.vendoring import fetch as vendor_fetch
from sparkbuild.vendoring import sparse
from sparkbuild.vendoring.plan import SourcePlan

UNREACHABLE = ("fatal: unable to access 'https://github.com/NVIDIA/cutlass.git/': "
               "Could not resolve host: github.com\n")
SOURCE = SourcePlan(name="cutlass", kind="git", url="https://github.com/NVIDIA/cutlass.git",
                    ref="v4.2.1")


def _unreachable(*_args: object, **_kwargs: object) -> ProcResult:
    return ProcResult(128, UNREACHABLE, None, 0.1)


def test_the_hint_names_the_mirror_flag_and_the_bundle_flow() -> None:
    assert "--mirror BASE=REPLACEMENT" in UNREACHABLE_GIT_HINT
    assert "sparkbuild bundle" in UNREACHABLE_GIT_HINT
    assert "wheel --bundle" in UNREACHABLE_GIT_HINT


def test_a_source_fetch_that_cannot_reach_github_gets_it() -> None:
    error = git_error(UNREACHABLE, SOURCE.url, "v4.2.1")
    assert isinstance(error, NetworkError) and error.hint == UNREACHABLE_GIT_HINT


def test_a_vendored_dependency_that_cannot_be_reached_gets_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vendor_fetch, "run_git", _unreachable)
    with pytest.raises(NetworkError) as caught:
        vendor_fetch._fetch_ref(tmp_path, SOURCE, Mirrors.parse([]))
    assert caught.value.hint == UNREACHABLE_GIT_HINT


def test_a_sparse_fetch_that_cannot_reach_it_gets_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sparse, "run_git", _unreachable)
    with pytest.raises(NetworkError) as caught:
        sparse._fetch(tmp_path, SOURCE, "v4.2.1", Mirrors.parse([]))
    assert caught.value.hint == UNREACHABLE_GIT_HINT
