"""The cache lock records its holder's process groups, for the run after a SIGKILL.
No process is started here: the groups are told to the lock by hand."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from sparkbuild.errors import UsageError
from sparkbuild.store import lock as lockmod
from sparkbuild.store.lock import CacheLock, stop_left_running, unusable_directory


def test_the_lock_file_names_the_holder_and_its_running_groups(tmp_path: Path) -> None:
    path = tmp_path / "work" / "x.lock"
    with CacheLock(path).held():
        assert path.read_text() == f"{os.getpid()}\n"
        lockmod._on_group(424242, True)  # what proc.run tells the lock as a child starts
        assert path.read_text().splitlines()[1].startswith("group 424242 ")
        with path.open("rb") as probe:
            assert 424242 in lockmod._read_groups(probe.fileno())
        lockmod._on_group(424242, False)
        assert path.read_text() == f"{os.getpid()}\n"
        lockmod._on_group(434343, True)
    # released in order while a group still runs: the run is alive and answers for it, so
    # the next holder must not stop it
    assert path.read_text() == f"{os.getpid()}\n"
    lockmod._on_group(434343, False)
    assert lockmod._RECORDING == {}


def test_a_group_that_is_gone_or_ours_is_left_alone(tmp_path: Path) -> None:
    assert stop_left_running(tmp_path / "x.lock", {4194305: "1"}) == []  # no such group
    own = os.getpgid(0)
    lockmod._GROUPS[own] = "?"
    try:  # one of this process's own groups is never "left running"
        assert stop_left_running(tmp_path / "x.lock", {own: "?"}) == []
    finally:
        lockmod._GROUPS.pop(own)


def test_a_leader_started_at_another_time_is_someone_else(tmp_path: Path) -> None:
    """A live process with the recorded id but another start time: the id was reused."""
    pgid = os.getpgid(0)
    if lockmod.start_time(pgid) is None:
        pytest.skip("this process group's leader is gone")
    assert not lockmod._group_alive(pgid, "not-its-start-time")
    assert lockmod._group_alive(pgid, str(lockmod.start_time(pgid)))


def test_a_cache_that_is_a_file_or_read_only_is_named(tmp_path: Path) -> None:
    file = tmp_path / "cache"
    file.write_text("x")
    error = unusable_directory(file / "work", NotADirectoryError(errno.ENOTDIR, "Not a dir"))
    assert isinstance(error, UsageError)
    assert error.where == str(file) and "is a file" in error.what
    error = unusable_directory(tmp_path / "ro" / "work", OSError(errno.EROFS, "Read-only"))
    assert "read-only" in error.what
    assert error.where == str(tmp_path)  # the first directory that exists: the mount
