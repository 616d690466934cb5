"""The one reader of files users hand sparkbuild: a FIFO, a device or a directory is named
and never opened for reading, a file over its limit is not read, a missing one says so."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkbuild.errors import RecipeError, UsageError
from sparkbuild.store.user_files import NotRegularFile, open_regular, read_user_file, read_user_text


def test_a_regular_file_is_read_whole_up_to_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_bytes(b"x" * 10)
    assert read_user_file(path, "recipe", 10) == b"x" * 10
    with pytest.raises(RecipeError, match="recipe is over 9 bytes: not read"):
        read_user_file(path, "recipe", 9)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(RecipeError, match=r"recipe is a named pipe \(FIFO\), not a regular"):
        read_user_file(tmp_path / "pipe", "recipe", 1 << 20)
    link = tmp_path / "link.toml"
    link.symlink_to(tmp_path / "pipe")
    with pytest.raises(NotRegularFile):
        open_regular(link)


@pytest.mark.parametrize(("path", "kind"), [("/dev/zero", "a character device"),
                                            ("/", "a directory")])
def test_a_device_or_a_directory_is_named(path: str, kind: str) -> None:
    with pytest.raises(UsageError, match=f"the token file is {kind}, not a regular file"
                       ) as caught:
        read_user_file(Path(path), "the token file", 1 << 20, error=UsageError)
    assert caught.value.where == path


def test_a_missing_file_keeps_its_cause_and_text_must_be_utf8(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="cannot read recipe: No such file") as caught:
        read_user_file(tmp_path / "absent.toml", "recipe", 100)
    assert isinstance(caught.value.__cause__, FileNotFoundError)
    (tmp_path / "latin.toml").write_bytes(b"name = '\xe9'")
    with pytest.raises(RecipeError, match="recipe is not UTF-8 text"):
        read_user_text(tmp_path / "latin.toml", "recipe", 100)
