"""Bring a directory up to another one's files, touching only the files that differ.

A warm rebuild starts from a tree prepared anew: a bundle with one more patch is copied
again.  Copied whole, every file gets a new mtime and the build directory inside the tree
goes with the old copy (vLLM's setup.py builds under the tree's ``build/``), so CMake
configures from nothing and ninja compiles every unit again: for vLLM a one-line change
costs 41 s of configure and 104 ccache lookups.  ``sync_tree``
instead copies only the files whose content differs (their mtime is now, so ninja
rebuilds exactly what depends on them), removes the files the last sync placed that the
new tree no longer has, and leaves everything else alone: unchanged files keep their
mtime, and what the build wrote (not in the listing) stays.  The listing (path -> sha256,
or the link's target) of what the last sync placed is kept beside the directory.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sparkbuild.console import shown
from sparkbuild.store.files import read_kept_file, set_aside, write_text_atomic
from sparkbuild.store.hashing import sha256_file
from sparkbuild.store.user_files import parse_json

_LINK = "link:"


@dataclass
class TreeSync:
    copied: list[str] = field(default_factory=list)
    """Files (tree-relative) written because they were new or their content differed."""
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    whole: bool = False
    """True when the tree was copied whole (no earlier sync to start from)."""

    def describe(self) -> str:
        if self.whole:
            return f"copied whole ({len(self.copied)} files)"
        names = ", ".join(map(shown, self.copied[:3])) + (" ..." if len(self.copied) > 3
                                                            else "")
        return (f"{len(self.copied)} file(s) changed{f' ({names})' if names else ''}, "
                f"{len(self.removed)} removed, {self.unchanged} unchanged (their mtimes "
                "kept, and the build directory inside the tree)")


def _digest(path: Path) -> str | None:
    if path.is_symlink():
        return _LINK + str(path.readlink())
    return sha256_file(path, progress=False) if path.is_file() else None


def tree_listing(root: Path) -> dict[str, str]:
    """Every file and link under ``root`` (links not followed): relative path -> digest."""
    listing: dict[str, str] = {}
    for here, dirs, files in os.walk(root):
        base = Path(here)
        for name in [*files, *(d for d in dirs if (base / d).is_symlink())]:
            path = base / name
            digest = _digest(path)
            if digest is not None:
                listing[path.relative_to(root).as_posix()] = digest
    return dict(sorted(listing.items()))


def _place(source: Path, target: Path, digest: str) -> None:
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if digest.startswith(_LINK):
        target.symlink_to(digest[len(_LINK):])
    else:
        shutil.copyfile(source, target)  # a new mtime: what depends on it is rebuilt
        shutil.copymode(source, target)


LISTING_LIMIT = 256 << 20
"""The largest listing read back (a path and a digest per file of the tree)."""


def _listed(listing: Path) -> dict[str, str]:
    """The kept record of what was placed: path -> digest; {} (a whole copy follows) when
    there is none or it is not of that form (set aside, named)."""
    raw = read_kept_file(listing, "the record of a copied tree", LISTING_LIMIT)
    if raw is None:
        return {}
    try:
        data = parse_json(raw.decode("utf-8"))
    except ValueError:
        data = None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in data.items()):
        set_aside(listing, "the record of a copied tree", "is not a map of paths to digests")
        return {}
    return data


def sync_tree(source: Path, dest: Path, listing: Path) -> TreeSync:
    """Make ``dest`` hold ``source``'s files (see the module's text); ``listing``: where
    the record of what was placed is kept (next to ``dest``, outside it)."""
    new = tree_listing(source)
    old = _listed(listing)
    result = TreeSync()
    if not dest.is_dir() or not old:
        listing.unlink(missing_ok=True)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(source, dest, symlinks=True)
        result.copied, result.whole = list(new), True
    else:
        for relative in sorted(old.keys() - new.keys()):
            target = dest / relative
            if target.is_symlink() or target.is_file():
                target.unlink()
                result.removed.append(relative)
        for relative, digest in new.items():
            target = dest / relative
            if old.get(relative) == digest and _digest(target) == digest:
                result.unchanged += 1
                continue
            _place(source / relative, target, digest)
            result.copied.append(relative)
        for here, dirs, _files in os.walk(source):  # empty directories too
            for name in dirs:
                (dest / Path(here, name).relative_to(source)).mkdir(parents=True, exist_ok=True)
    write_text_atomic(listing, json.dumps(new) + "\n")
    return result
