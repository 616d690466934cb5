"""What a build never reads, so that vendored dependencies and bundles can leave it out.

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
(:func:`sparkbuild.bundle.strip.strip_tree`), which lists what it left out.
"""

from __future__ import annotations

import re
from pathlib import Path

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
