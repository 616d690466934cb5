"""A tree brought up to another one file by file (sparkbuild.store.tree_sync): only what
differs is written, what the build wrote stays, what the new tree dropped goes."""

from __future__ import annotations

import os
from pathlib import Path

from corpus.builders import write_tree
from sparkbuild.store.tree_sync import sync_tree, tree_listing


def _old(path: Path) -> None:
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))


def test_the_first_sync_copies_whole_and_the_second_only_what_differs(tmp_path: Path) -> None:
    dest, listing = tmp_path / "tree", tmp_path / "tree.files.json"
    first = write_tree(tmp_path / "a", {"CMakeLists.txt": "project(x)\n", "csrc/k.cu": "k1\n",
                                   "csrc/gone.cu": "g\n", "empty/.keep": ""})
    (first / "link").symlink_to("csrc/k.cu")
    synced = sync_tree(first, dest, listing)
    assert synced.whole and (dest / "link").is_symlink() and listing.is_file()
    for path in dest.rglob("*"):
        if path.is_file() and not path.is_symlink():
            _old(path)
    (dest / "build").mkdir()
    (dest / "build" / "k.o").write_text("object")  # the build's own output
    second = write_tree(tmp_path / "b", {"CMakeLists.txt": "project(x)\n", "csrc/k.cu": "k2\n",
                                    "csrc/new.cu": "n\n", "empty/.keep": ""})
    (second / "link").symlink_to("csrc/new.cu")
    synced = sync_tree(second, dest, listing)
    assert not synced.whole
    assert sorted(synced.copied) == ["csrc/k.cu", "csrc/new.cu", "link"]
    assert synced.removed == ["csrc/gone.cu"] and synced.unchanged == 2
    assert (dest / "csrc" / "k.cu").read_text() == "k2\n"
    assert (dest / "csrc" / "k.cu").stat().st_mtime_ns > 1_000_000_000  # ninja sees it
    assert (dest / "CMakeLists.txt").stat().st_mtime_ns == 1_000_000_000  # kept
    assert (dest / "build" / "k.o").read_text() == "object"
    assert not (dest / "csrc" / "gone.cu").exists()
    assert str((dest / "link").readlink()) == "csrc/new.cu"
    assert tree_listing(second) == {k: v for k, v in tree_listing(dest).items()
                                    if not k.startswith("build/")}
    assert "3 file(s) changed" in synced.describe()


def test_a_tracked_file_the_build_rewrote_is_put_back(tmp_path: Path) -> None:
    dest, listing = tmp_path / "tree", tmp_path / "tree.files.json"
    source = write_tree(tmp_path / "a", {"pkg/_version.py": "v = '1'\n"})
    sync_tree(source, dest, listing)
    (dest / "pkg" / "_version.py").write_text("v = 'local'\n")
    synced = sync_tree(source, dest, listing)
    assert synced.copied == ["pkg/_version.py"]
    assert (dest / "pkg" / "_version.py").read_text() == "v = '1'\n"


def test_no_listing_means_a_whole_copy(tmp_path: Path) -> None:
    dest, listing = tmp_path / "tree", tmp_path / "tree.files.json"
    write_tree(dest, {"stale.txt": "from somewhere else"})
    synced = sync_tree(write_tree(tmp_path / "a", {"f.txt": "f"}), dest, listing)
    assert synced.whole and not (dest / "stale.txt").exists()
    assert "copied whole (1 files)" in synced.describe()
