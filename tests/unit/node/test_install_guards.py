"""What ``install`` refuses or recovers before it runs anything: a venv path
that ``activate`` would run, one too long for the system, a venv a killed install left."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.errors import DestinationError, UsageError
from sparkbuild.node.install import (
    _interrupted,
    check_venv_path,
    install_lock,
    install_wheelhouse,
    refuse_foreign,
)
from sparkbuild.node.installed import INSTALLING_MARK


@pytest.mark.parametrize(("name", "said"), [
    ("v$(touch x)", "'$'"), ("v`id`", "'`'"), ('v"q', "'\"'"), ("v\\q", "'\\\\'"),
    ("v\nLD_PRELOAD=x", "U+000A"), ("v\x1b[2J", "U+001B"), ("v\u202e", "U+202E"),
])
def test_a_venv_path_activate_would_run_is_refused_saying_why(tmp_path: Path, name: str,
                                                              said: str) -> None:
    with pytest.raises(UsageError) as refused:
        check_venv_path(tmp_path / name)
    assert said in refused.value.what and "CVE-2024-9287" in refused.value.what
    with pytest.raises(UsageError):  # before the wheelhouse is read or anything is made
        install_wheelhouse(tmp_path / "no-wheelhouse", tmp_path / name)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_plain_venv_path_passes(tmp_path: Path) -> None:
    assert check_venv_path(tmp_path / "vllm-venv_2.1+x") == tmp_path / "vllm-venv_2.1+x"


@pytest.mark.parametrize(("relative", "link", "said"), [
    ("plain/venv", False, "which is a file, not a directory"),
    ("plain/a/b/venv", False, "which is a file, not a directory"),
    ("plain/venv", True, "which is a symbolic link, not a directory"),
])
def test_a_venv_under_a_file_is_a_usage_error(tmp_path: Path, relative: str, link: bool,
                                              said: str) -> None:
    if link:
        (tmp_path / "plain").symlink_to(tmp_path / "nowhere")
    else:
        (tmp_path / "plain").write_text("a file\n")
    with pytest.raises(UsageError, match=f"--venv lies under .*plain, {said}"):
        check_venv_path(tmp_path / relative)
    (tmp_path / "dir").mkdir()
    (tmp_path / "to-dir").symlink_to(tmp_path / "dir")
    assert check_venv_path(tmp_path / "to-dir" / "venv") == tmp_path / "to-dir" / "venv"


def test_a_path_over_name_max_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--venv has a name of 300 bytes, over NAME_MAX"):
        check_venv_path(tmp_path / ("x" * 300))
    with pytest.raises(UsageError, match="over PATH_MAX"):
        check_venv_path(tmp_path.joinpath(*["y" * 200] * 25))


def test_the_lock_lies_beside_the_venv_under_a_fixed_length_name(tmp_path: Path) -> None:
    lock = install_lock(tmp_path / ("v" * 250))
    assert lock.path.parent == tmp_path
    assert lock.path.name.startswith(".sparkbuild-install-") and len(lock.path.name) < 40
    assert install_lock(tmp_path / "a").path != install_lock(tmp_path / "b").path


def test_only_a_venv_or_an_empty_directory_is_installed_into(tmp_path: Path) -> None:
    refuse_foreign(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    refuse_foreign(tmp_path / "empty")
    (tmp_path / "empty" / INSTALLING_MARK).write_text("created\n")
    refuse_foreign(tmp_path / "empty")  # what a killed install left: its mark alone
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("mine\n")
    with pytest.raises(DestinationError):
        refuse_foreign(tmp_path / "home")
    (tmp_path / "file").write_text("")
    with pytest.raises(DestinationError):
        refuse_foreign(tmp_path / "file")


def test_a_venv_a_killed_install_created_is_made_anew(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / INSTALLING_MARK).write_text("created\n")
    assert _interrupted(venv) is False  # nothing to reinstall: it is empty now
    assert venv.is_dir() and not any(venv.iterdir())


def test_a_venv_that_existed_is_reinstalled_file_for_file(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    assert _interrupted(venv) is False  # no mark: nothing was cut short
    (venv / INSTALLING_MARK).write_text("existing\n")
    assert _interrupted(venv) is True
    assert (venv / "bin" / "python").exists()
