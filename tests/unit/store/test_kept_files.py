"""A small file the cache keeps is read back or set aside: one that is no regular file, too
big, or (its reader judges) malformed is named, moved aside and never trusted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sparkbuild.store.cache import Cache
from sparkbuild.store.files import read_kept_file, set_aside


def test_absent_is_none_and_a_plain_file_is_read(tmp_path: Path) -> None:
    assert read_kept_file(tmp_path / "absent.json", "the table", 100) is None
    (tmp_path / "t.json").write_text("{}")
    assert read_kept_file(tmp_path / "t.json", "the table", 100) == b"{}"


def test_a_fifo_or_an_oversized_file_is_set_aside(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "t.json")
    assert read_kept_file(tmp_path / "t.json", "the table", 100) is None
    assert not (tmp_path / "t.json").exists() and (tmp_path / "t.json.set-aside").exists()
    said = capsys.readouterr().err
    assert "the table" in said and "a named pipe (FIFO), not a regular file" in said
    (tmp_path / "t.json").write_text("x" * 101)
    assert read_kept_file(tmp_path / "t.json", "the table", 100) is None
    assert (tmp_path / "t.json.set-aside").read_text() == "x" * 101  # the older one replaced
    assert "is over 100 bytes" in capsys.readouterr().err


def test_set_aside_replaces_a_directory_left_before(tmp_path: Path) -> None:
    (tmp_path / "t.json.set-aside").mkdir()
    (tmp_path / "t.json.set-aside" / "inner").write_text("")
    (tmp_path / "t.json").write_text("[")
    set_aside(tmp_path / "t.json", "the table", "is not JSON")
    assert (tmp_path / "t.json.set-aside").read_text() == "["


def test_a_malformed_index_entry_is_set_aside(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    cache = Cache(tmp_path)
    cache.record("urls", "k", {"n": 1})
    (entry,) = (tmp_path / "index" / "urls").glob("*.json")
    entry.write_text(json.dumps([1]))
    assert cache.lookup("urls", "k") is None
    assert "holds no JSON object" in capsys.readouterr().err
    assert cache.lookup("urls", "k") is None and not capsys.readouterr().err  # said once
