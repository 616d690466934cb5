"""The on-disk journal of a patch run: what a killed run leaves is enough to undo it.

A "killed" run here is a :class:`Journal` whose ``restore``/``finish`` is never called:
only what reached the disk (the journal file) is left for the next run to replay.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from sparkbuild.errors import PatchError
from sparkbuild.patches.journal import (
    JOURNAL,
    Journal,
    read_journal,
    recover_interrupted,
    replay_journal,
    tree_lock,
)


def killed_run(tree: Path) -> None:
    """A run that changed, created and deleted files and died before finishing."""
    kept, gone, link = tree / "kept.txt", tree / "gone.txt", tree / "link"
    journal = Journal(tree, "apply", ["p1", "p2"])
    journal.begin("p1")
    for path in (kept, gone, link, tree / "a" / "b" / "new.txt"):
        journal.save(path)
    journal.commit()
    kept.write_bytes(b"changed")
    kept.chmod(0o644)
    gone.unlink()
    link.unlink()
    link.write_text("a file where a link was")
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "new.txt").write_text("new")
    journal.done("p1")
    journal.begin("p2")
    journal.save(tree / "late.txt")
    journal.commit()


def make_tree(tree: Path) -> dict[str, bytes | str]:
    tree.mkdir(exist_ok=True)
    (tree / "kept.txt").write_bytes(b"original\r\n\x00")
    (tree / "kept.txt").chmod(0o755)
    (tree / "gone.txt").write_text("deleted by the run\n")
    (tree / "link").symlink_to("kept.txt")
    return state(tree)


def state(tree: Path) -> dict[str, bytes | str]:
    found: dict[str, bytes | str] = {}
    for path in sorted(tree.rglob("*")):
        rel = path.relative_to(tree).as_posix()
        if path.is_symlink():
            found[rel] = "-> " + str(path.readlink())
        elif path.is_file():
            found[rel] = path.read_bytes() + f" {path.stat().st_mode & 0o7777:o}".encode()
        else:
            found[rel] = "dir"
    return found


def test_the_next_run_restores_what_a_killed_run_changed(tmp_path: Path) -> None:
    before = make_tree(tmp_path)
    killed_run(tmp_path)
    assert (tmp_path / JOURNAL).is_file()
    recovery = replay_journal(tmp_path)
    assert recovery is not None
    assert state(tmp_path) == before, "not byte-identical, or .sparkbuild left behind"
    assert recovery.action == "apply" and recovery.pid == os.getpid()
    assert recovery.in_flight == ("p2",) and recovery.finished == ("p1",)
    assert (recovery.restored, recovery.removed) == (3, 1)  # kept, gone, link; new.txt
    assert replay_journal(tmp_path) is None, "the journal must be gone once replayed"


def test_recovery_says_what_it_did(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_tree(tmp_path)
    killed_run(tmp_path)
    recovery = recover_interrupted(tmp_path)
    assert recovery is not None
    err = capsys.readouterr().err
    assert "found an interrupted run of `patch apply`" in err
    assert "patches in flight: p2" in err and "restored 3 files" in err
    assert "starting clean" in err


def test_nothing_reaches_the_disk_before_commit(tmp_path: Path) -> None:
    before = make_tree(tmp_path)
    journal = Journal(tmp_path, "apply", ["p1"])
    journal.begin("p1")
    journal.save(tmp_path / "kept.txt")
    assert state(tmp_path) == before
    journal.commit()
    entries = read_journal(tmp_path / JOURNAL)
    assert entries[0]["run"] == "apply" and entries[1] == {"begin": "p1"}
    assert entries[2]["keep"] == "kept.txt" and entries[2]["mode"] == 0o755
    journal.finish()
    assert not (tmp_path / JOURNAL).exists()


def test_an_orderly_rollback_is_the_same_replay(tmp_path: Path) -> None:
    before = make_tree(tmp_path)
    journal = Journal(tmp_path, "revert", ["p1"])
    journal.begin("p1")
    journal.save(tmp_path / "kept.txt")
    journal.commit()
    (tmp_path / "kept.txt").write_text("x")
    recovery = journal.restore()
    assert recovery is not None and recovery.restored == 1
    assert state(tmp_path) == before


def test_a_torn_last_line_is_dropped_but_a_torn_middle_is_refused(tmp_path: Path) -> None:
    make_tree(tmp_path)
    killed_run(tmp_path)
    path = tmp_path / JOURNAL
    complete = path.read_bytes()
    path.write_bytes(complete + b'{"keep": "kept.txt", "mo')
    assert read_journal(path) == read_journal_from(complete, tmp_path)
    lines = complete.split(b"\n")
    path.write_bytes(b"\n".join([lines[0], b"{not json", *lines[1:]]))
    with pytest.raises(PatchError, match="unreadable: line 2"):
        read_journal(path)


def read_journal_from(data: bytes, tmp_path: Path) -> list[dict[str, object]]:
    other = tmp_path / "copy.jsonl"
    other.write_bytes(data)
    try:
        return read_journal(other)
    finally:
        other.unlink()


@pytest.mark.parametrize("rel", ["../outside.txt", "/etc/passwd", "a/../../x", ".git/config", 7])
def test_a_journal_naming_a_path_outside_the_tree_is_refused(tmp_path: Path, rel: object) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / JOURNAL).parent.mkdir()
    entries = [{"run": "apply"}, {"keep": rel, "mode": 0o644, "data": "cHduZWQ="}]
    (tree / JOURNAL).write_text("".join(json.dumps(e) + "\n" for e in entries))
    with pytest.raises(PatchError, match="outside the tree"):
        replay_journal(tree)
    assert not (tmp_path / "outside.txt").exists() and not (tmp_path / "x").exists()


def test_a_journal_reaching_out_through_a_symlink_is_refused(tmp_path: Path) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (tree / "out").symlink_to(outside)
    (tree / JOURNAL).parent.mkdir()
    entries = [{"run": "apply"}, {"absent": "out/victim.txt"}]
    (tree / JOURNAL).write_text("".join(json.dumps(e) + "\n" for e in entries))
    (outside / "victim.txt").write_text("keep me")
    with pytest.raises(PatchError, match="outside the tree"):
        replay_journal(tree)
    assert (outside / "victim.txt").read_text() == "keep me"


def test_the_tree_lock_excludes_other_holders_and_is_reentrant(tmp_path: Path) -> None:
    other = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with tree_lock(tmp_path), tree_lock(tmp_path), pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released on leaving
    finally:
        os.close(other)
    assert list(tmp_path.iterdir()) == [], "the lock must leave no file in the tree"
