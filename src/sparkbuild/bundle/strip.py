"""The bundle's copy of a tree without what a build never reads (the rules:
:mod:`sparkbuild.vendoring.unread`), and the list of what it left out."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from sparkbuild.records import Record
from sparkbuild.vendoring.unread import (
    GIT_NAMES,
    MEDIA_SUFFIXES,
    STRIPPED_DIRS,
    referenced_children,
)


@dataclass
class StripReport(Record):
    """What :func:`strip_tree` left out of one tree."""

    json_order: ClassVar[tuple[str, ...]] = ("name", "files", "bytes")

    name: str
    paths: list[str] = field(default_factory=list)
    """The top-most paths removed (a directory stands for everything below it)."""
    files: int = 0
    bytes: int = 0


def _size(path: Path) -> tuple[int, int]:
    if path.is_symlink() or path.is_file():
        return 1, path.lstat().st_size
    files = total = 0
    for directory, _dirs, names in os.walk(path):
        for name in names:
            files += 1
            total += (Path(directory) / name).lstat().st_size
    return files, total


def strip_tree(root: Path, name: str, keep: frozenset[str],
               *, dirs: frozenset[str] = STRIPPED_DIRS, media: bool = True) -> StripReport:
    """Remove, in place, what the rules leave out of ``root``; returns what went."""
    report = StripReport(name)

    def drop(path: Path) -> None:
        files, size = _size(path)
        report.paths.append(path.relative_to(root).as_posix())
        report.files += files
        report.bytes += size
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()

    for directory, subdirs, names in os.walk(root):
        base = Path(directory)
        for sub in sorted(subdirs):
            if sub in GIT_NAMES:
                drop(base / sub)
                subdirs.remove(sub)
            elif sub in dirs:
                referenced = referenced_children(sub, keep)
                if not referenced:
                    drop(base / sub)
                    subdirs.remove(sub)
                    continue
                # Referenced below: keep only the referenced children.
                for child in sorted((base / sub).iterdir()):
                    if child.name not in referenced or not child.is_dir():
                        drop(child)
        for file_name in sorted(names):
            path = base / file_name
            if file_name in GIT_NAMES or (media and path.suffix.lower() in MEDIA_SUFFIXES):
                drop(path)
    report.paths.sort()
    return report
