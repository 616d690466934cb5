"""One context per run: ``--cache`` is honoured by every stage, and ``wheel`` checks
``--out`` before any work.

No process is started: the sdist comes from a ``file://`` index through urllib, and
``wheel`` is stopped (by a stand-in for ``prepare``) right after its first checks.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from sparkbuild.errors import DestinationError
from sparkbuild.pipeline import WheelOptions, build_wheel
from sparkbuild.recipe import BuildSettings, Recipe, SourcePin, Target
from sparkbuild.sources.fetch import fetch_source
from sparkbuild.store.context import RunContext
from sparkbuild.wheelhouse.destination import check_destination, foreign_files


def make_recipe(tmp_path: Path) -> Recipe:
    return Recipe(path=tmp_path / "demo.toml", name="demo", source=SourcePin("pypi:demo==1.0"),
                  series=tmp_path / "series", target=Target(), build=BuildSettings(),
                  pins=(), package="demo")


def test_context_cache_is_the_flag_then_the_variable_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKBUILD_CACHE", str(tmp_path / "from-env"))
    assert RunContext.create(tmp_path / "flag" / ".." / "flag").cache_root == tmp_path / "flag"
    assert RunContext.create().cache_root == (tmp_path / "from-env").resolve()
    monkeypatch.delenv("SPARKBUILD_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert RunContext.create().cache_root == (tmp_path / "home/.cache/sparkbuild").resolve()
    context = RunContext.create(tmp_path, offline=True)
    assert context.offline and context.cache().root == tmp_path.resolve()


# -- sdists from the index go to the run's cache ---------------------------------------------


def file_index(tmp_path: Path) -> str:
    """A PEP 503 index over file:// that serves demo 1.0's sdist."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("demo-1.0/setup.py")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"x=1"))
    files = tmp_path / "index" / "files"
    files.mkdir(parents=True)
    (files / "demo-1.0.tar.gz").write_bytes(buffer.getvalue())
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    page = tmp_path / "index" / "simple" / "demo" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f'<a href="../../files/demo-1.0.tar.gz#sha256={digest}">demo-1.0.tar.gz</a>')
    return (tmp_path / "index" / "simple").as_uri()


def test_an_sdist_from_the_index_goes_to_the_runs_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", file_index(tmp_path))
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("SPARKBUILD_CACHE", str(tmp_path / "env-cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    own = tmp_path / "own-cache"
    result = fetch_source("pypi:demo==1.0", tmp_path / "work", recipe=None,
                          context=RunContext.create(own))
    assert (result.tree / "setup.py").read_bytes() == b"x=1"
    assert (own / "blobs" / "sha256" / str(result.sha256)).is_file()
    assert not (tmp_path / "env-cache").exists() and not (tmp_path / "home").exists()

    offline = fetch_source("pypi:demo==1.0", tmp_path / "again", recipe=None,
                           context=RunContext.create(own, offline=True))
    assert offline.sha256 == result.sha256


# -- wheel --out: checked first ---------------------------------------------------------------


class PrepareReached(Exception):
    pass


@pytest.fixture
def no_prepare(monkeypatch: pytest.MonkeyPatch) -> None:
    """``wheel`` stops where its work would begin."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise PrepareReached

    monkeypatch.setattr("sparkbuild.patches.prepare.prepare_tree", refuse)


def test_wheel_refuses_a_foreign_out_before_any_work(tmp_path: Path, no_prepare: None) -> None:
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("do not delete")
    options = WheelOptions(recipe=make_recipe(tmp_path), cache=tmp_path / "cache", out=out)
    with pytest.raises(DestinationError, match="not a sparkbuild wheelhouse"):
        build_wheel(options)
    assert not (tmp_path / "cache").exists(), "work began before --out was checked"
    assert (out / "thesis.tex").read_text() == "do not delete"


def earlier_wheelhouse(out: Path, *extra: str) -> None:
    out.mkdir()
    (out / "demo-1.0-py3-none-any.whl").write_bytes(b"wheel")
    (out / "requirements.lock").write_text("demo==1.0\n")
    (out / "simple" / "demo").mkdir(parents=True)
    (out / "simple" / "index.html").write_text("<html/>")
    (out / "simple" / "demo" / "index.html").write_text("<html/>")
    for name in extra:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("mine")
    manifest = {
        "wheels": [{"file": "demo-1.0-py3-none-any.whl", "sha256": "0" * 64}],
        "files": {"requirements.lock": "1" * 64, "simple/index.html": "2" * 64,
                  "simple/demo/index.html": "3" * 64},
    }
    (out / "manifest.json").write_text(json.dumps(manifest))


def test_a_rerun_says_it_replaces_the_wheelhouse_and_names_foreign_files(
    tmp_path: Path, no_prepare: None, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPARKBUILD_QUIET", raising=False)
    out = tmp_path / "wheelhouse"
    earlier_wheelhouse(out, "notes.txt", "simple/demo/stray.whl")
    assert foreign_files(out) == ["notes.txt", "simple/demo/stray.whl"]
    options = WheelOptions(recipe=make_recipe(tmp_path), cache=tmp_path / "cache", out=out)
    with pytest.raises(PrepareReached):  # said before the work begins
        build_wheel(options)
    said = " ".join(capsys.readouterr().err.split())
    assert f"this run replaces the earlier wheelhouse {out}" in said
    assert "deleting 2 file(s) its manifest does not name: notes.txt, simple/demo/stray.whl" in said
    assert (out / "notes.txt").read_text() == "mine"


def test_a_clean_wheelhouse_is_replaced_without_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPARKBUILD_QUIET", raising=False)
    out = tmp_path / "wheelhouse"
    earlier_wheelhouse(out)
    assert check_destination(out) == []
    said = capsys.readouterr().err
    assert "replacing the earlier wheelhouse" in said and "warning" not in said
