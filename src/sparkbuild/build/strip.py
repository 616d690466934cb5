"""What a build never reads, so that bundles and vendored dependencies can leave it out.

Dependencies (CUTLASS, flash-attention, ...) carry their documentation, images, tests and
examples; a compile reads none of it.  The rules:

* directories named ``docs``, ``doc``, ``media``, ``test``, ``tests``, ``testing``,
  ``examples``, ``example`` or ``.github``, at any depth;
* images, videos and PDFs (by suffix), anywhere;
* git's own files (``.git``).

**Except what the build refers to.**  vLLM compiles against
``${CUTLASS_DIR}/examples/77_blackwell_fmha`` and ``examples/common``: every path of the form
``<stripped dir>/<child>`` written in the tree's CMake files is kept (the child directory,
with everything under it).  :func:`referenced_paths` finds them; the same rules drive the
sparse checkout of vendored sources (:func:`sparse_patterns`) and the bundle's copy
(:func:`strip_tree`), which lists what it left out.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STRIPPED_DIRS = frozenset({
    "docs", "doc", "media", "test", "tests", "testing", "examples", "example", ".github",
})
MEDIA_SUFFIXES = frozenset({
    ".png", ".jpg", ".jpeg", ".gif", ".svg", ".pdf", ".mp4", ".webp", ".ico", ".bmp", ".mov",
})
GIT_NAMES = frozenset({".git"})
CMAKE_FILES = ("CMakeLists.txt", "*.cmake")

_REFERENCE = re.compile(
    r"(?:^|[/\"'\s(;=])(" + "|".join(re.escape(name) for name in sorted(STRIPPED_DIRS))
    + r")/([A-Za-z0-9_.+-]+)"
)


def _cmake_files(tree: Path) -> list[Path]:
    found: list[Path] = []
    for pattern in CMAKE_FILES:
        found += [path for path in tree.rglob(pattern)
                  if not ({".git", "build", ".deps"} & set(path.relative_to(tree).parts))]
    return sorted(found)


def referenced_paths(tree: Path) -> frozenset[str]:
    """``examples/common``-style paths the tree's CMake names below a stripped directory."""
    kept: set[str] = set()
    for path in _cmake_files(tree):
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in _REFERENCE.finditer(text):
            child = match.group(2)
            if "$" not in child and child not in (".", ".."):
                kept.add(f"{match.group(1)}/{child}")
    return frozenset(kept)


def sparse_patterns(keep: frozenset[str]) -> list[str]:
    """``git sparse-checkout set --no-cone`` patterns for the rules (later patterns win)."""
    patterns = ["/*"]
    patterns += [f"!{name}/" for name in sorted(STRIPPED_DIRS)]
    patterns += [f"!*{suffix}" for suffix in sorted(MEDIA_SUFFIXES)]
    patterns += [f"**/{path}/" for path in sorted(keep)]
    # Images inside a kept directory are still left out.
    patterns += [f"!*{suffix}" for suffix in sorted(MEDIA_SUFFIXES)] if keep else []
    return patterns


def referenced_children(name: str, keep: frozenset[str]) -> frozenset[str]:
    """The children of a stripped directory called ``name`` that the build refers to."""
    return frozenset(path.split("/", 1)[1] for path in keep if path.startswith(name + "/"))


def is_stripped_path(relative: str, keep: frozenset[str] = frozenset()) -> bool:
    """Would the rules leave out the file at ``relative`` (a POSIX path)?"""
    parts = relative.split("/")
    if GIT_NAMES & set(parts):
        return True
    if Path(parts[-1]).suffix.lower() in MEDIA_SUFFIXES:
        return True
    for index, part in enumerate(parts[:-1]):
        if part in STRIPPED_DIRS:
            child = parts[index + 1]
            if child not in referenced_children(part, keep) or index + 1 == len(parts) - 1:
                return True
    return False


@dataclass
class StripReport:
    """What :func:`strip_tree` left out of one tree."""

    name: str
    paths: list[str] = field(default_factory=list)
    """The top-most paths removed (a directory stands for everything below it)."""
    files: int = 0
    bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "files": self.files, "bytes": self.bytes,
                "paths": self.paths}


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
