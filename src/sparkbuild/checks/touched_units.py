"""Which translation units a patch series touched: the .cu files it changed, and every
.cu file that includes -- directly or through other headers -- a header it changed.

Headers are followed the way the preprocessor finds quoted includes: next to the
including file first, then the target's ``-I`` directories.  Angle-bracket includes are
system and library headers, which a series never patches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from sparkbuild.store.files import walk_files

HEADER_SUFFIXES = frozenset({".h", ".hpp", ".cuh", ".hh", ".inl", ".inc"})
UNIT_SUFFIXES = frozenset({".cu"})
SKIP_DIRS = frozenset({".git", ".sparkbuild", "build", ".deps", "__pycache__"})
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def quoted_includes(text: str) -> list[str]:
    return INCLUDE_RE.findall(text)


def _resolve(name: str, here: Path, search_dirs: list[Path]) -> Path | None:
    for directory in (here, *search_dirs):
        candidate = directory / name
        if candidate.is_file():
            return candidate.resolve()
    return None


class IncludeGraph:
    """Quoted-include edges, read lazily and remembered across units."""

    def __init__(self, search_dirs: list[Path]) -> None:
        self.search_dirs = search_dirs
        self._edges: dict[Path, set[Path]] = {}

    def _includes_of(self, path: Path) -> set[Path]:
        if path not in self._edges:
            try:
                names = quoted_includes(path.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                names = []
            self._edges[path] = {
                found for name in names
                if (found := _resolve(name, path.parent, self.search_dirs)) is not None
            }
        return self._edges[path]

    def closure(self, unit: Path) -> set[Path]:
        """``unit`` and every file it includes with quotes, transitively."""
        seen: set[Path] = set()
        pending = [unit.resolve()]
        while pending:
            current = pending.pop()
            if current not in seen:
                seen.add(current)
                pending.extend(self._includes_of(current) - seen)
        return seen


def tree_units(tree: Path) -> list[str]:
    """Every .cu file of the tree, tree-relative, build and VCS directories left out."""
    return [path.relative_to(tree).as_posix() for path in walk_files(tree, SKIP_DIRS)
            if path.suffix in UNIT_SUFFIXES]


def select_units(
    tree: Path, touched: list[str], built: set[str], search_dirs: list[Path]
) -> tuple[list[str], list[str]]:
    """(touched units the build compiles, touched units it does not), tree-relative."""
    headers = {(tree / p).resolve() for p in touched if Path(p).suffix in HEADER_SUFFIXES}
    selected = {p for p in touched if Path(p).suffix in UNIT_SUFFIXES}
    if headers:
        graph = IncludeGraph(search_dirs)
        selected |= {unit for unit in tree_units(tree)
                     if graph.closure(tree / unit) & headers}
    return sorted(selected & built), sorted(selected - built)



def gencode_changed(
    before: Mapping[str, tuple[str, ...]], after: Mapping[str, tuple[str, ...]]
) -> list[str]:
    """Units whose ``-gencode`` values the series changed: compiled for other archs than
    before, or compiled now and not before.  Keys are unit names, values gencode tuples."""
    return sorted(unit for unit, codes in after.items() if before.get(unit) != codes)


def cuda_units(sources: set[str]) -> list[str]:
    """The CUDA translation units among a build's sources."""
    return sorted(s for s in sources if Path(s).suffix in UNIT_SUFFIXES)
