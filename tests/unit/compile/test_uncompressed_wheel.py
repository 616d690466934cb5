"""The tree's own wheel is stored, not deflated (sparkbuild.compile.uncompressed_wheel): the file
setuptools reads through DIST_EXTRA_CONFIG, and a user's own file left in place."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from sparkbuild.compile.uncompressed_wheel import VARIABLE, stored_wheel_environment


def test_setuptools_is_told_to_store_the_wheel(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VARIABLE, raising=False)
    env = stored_wheel_environment(tmp_path / "work", {"MAX_JOBS": "4"})
    config = configparser.ConfigParser()
    assert config.read(env[VARIABLE]) == [env[VARIABLE]]
    assert Path(env[VARIABLE]).parent == tmp_path / "work"
    assert config["bdist_wheel"]["compression"] == "stored"


def test_a_users_own_file_is_left_as_it_is(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, "/etc/my-setuptools.cfg")
    assert stored_wheel_environment(tmp_path, {}) == {}
    monkeypatch.delenv(VARIABLE)
    assert stored_wheel_environment(tmp_path, {VARIABLE: "/recipe/setup.cfg"}) == {}
    assert not list(tmp_path.iterdir())
