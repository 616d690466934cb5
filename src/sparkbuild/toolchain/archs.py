"""CUDA arch lists in a vLLM CMakeLists.txt, evaluated by the tree's own cmake helper.

vLLM decides per kernel family which archs to compile with ``cuda_archs_loose_intersection``
(``cmake/utils.cmake``): a source list such as ``"12.0;12.0a"`` is intersected with the
target archs, and a target without its own entry falls back to the nearest lower arch of
the same major -- a 12.1 build silently gets 12.0 code.  The helper's rules changed between
releases (``f`` family suffixes, cross-suffix matches), so sparkbuild never re-implements
them: :func:`evaluate` runs ``build_tools/arch_eval.cmake`` with ``cmake -P``, which
``include()``s the tree's utils.cmake and calls the real function.

The parsing half (:func:`find_arch_lists`, :func:`is_native`) is pure and unit-tested.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.errors import PatchError, ToolchainError
from sparkbuild.proc import run
from sparkbuild.resources import build_tools_dir
from sparkbuild.toolchain.tools import find_cmake

if TYPE_CHECKING:
    from collections.abc import Sequence

ARCH_EVAL_SCRIPT = build_tools_dir() / "arch_eval.cmake"
UTILS_CMAKE = "cmake/utils.cmake"

_ENTRY = re.compile(r"(?P<base>\d+\.\d+)(?P<suffix>[af]?)(?P<ptx>\+PTX)?")
_LIST_SITES = (
    # set(CUDA_SUPPORTED_ARCHS "...") and every other set(<NAME>_ARCHS "...")
    re.compile(r"\bset\s*\(\s*(?P<var>\w*ARCHS)\s+\"(?P<list>[^\"]*)\"\s*\)"),
    # cuda_archs_loose_intersection(VAR "SRC" ...): the SRC literal
    re.compile(r"\bcuda_archs_loose_intersection\s*\(\s*(?P<var>\w+)\s+\"(?P<list>[^\"]*)\""),
)
_RESULT = re.compile(r"^sparkbuild-arch-eval (\d+):(.*)$", re.MULTILINE)


@dataclass(frozen=True)
class ArchEntry:
    text: str
    base: str
    """``12.0`` for ``12.0a`` or ``12.0f+PTX``."""
    suffix: str
    """``""``, ``"a"`` (arch-specific) or ``"f"`` (family)."""
    start: int
    """Offset of the entry in the file's text."""

    @property
    def major(self) -> int:
        return int(self.base.split(".")[0])


@dataclass(frozen=True)
class ArchList:
    variable: str
    line: int
    entries: tuple[ArchEntry, ...]

    @property
    def values(self) -> list[str]:
        return [entry.text for entry in self.entries]

    def has_major(self, major: int) -> bool:
        return any(entry.major == major for entry in self.entries)

    def describe(self) -> str:
        return f"{self.variable} \"{';'.join(self.values)}\" (line {self.line})"


def parse_entry(text: str, start: int = 0) -> ArchEntry | None:
    """One CUDA arch entry (``9.0a``, ``12.0f``, ``8.0+PTX``); None for anything else (gfx...)."""
    match = _ENTRY.fullmatch(text)
    if match is None:
        return None
    return ArchEntry(text, match.group("base"), match.group("suffix"), start)


def _entries(literal: str, offset: int) -> tuple[ArchEntry, ...] | None:
    entries = []
    position = 0
    for piece in literal.split(";"):
        stripped = piece.strip()
        if stripped:
            entry = parse_entry(stripped, offset + position + piece.index(stripped))
            if entry is None:
                return None  # not a CUDA arch list (HIP gfx names, a variable reference)
            entries.append(entry)
        position += len(piece) + 1
    return tuple(entries) if entries else None


def _commented(text: str, position: int) -> bool:
    line_start = text.rfind("\n", 0, position) + 1
    return "#" in text[line_start:position]


def find_arch_lists(text: str) -> list[ArchList]:
    """Every literal CUDA arch list of a CMakeLists.txt, in file order."""
    found: dict[int, ArchList] = {}
    for pattern in _LIST_SITES:
        for match in pattern.finditer(text):
            if _commented(text, match.start()):
                continue
            entries = _entries(match.group("list"), match.start("list"))
            if entries is None:
                continue
            line = text.count("\n", 0, match.start("list")) + 1
            found[match.start("list")] = ArchList(match.group("var"), line, entries)
    return [found[key] for key in sorted(found)]


def is_native(result: Sequence[str], target: str) -> bool:
    """True when an evaluated list compiles ``target`` itself (``12.1``, ``12.1a``, ``12.1f``)."""
    for text in result:
        entry = parse_entry(text.strip())
        if entry is not None and entry.base == target:
            return True
    return False


def cmake_program() -> str:
    """The cmake doctor would pick: the venv's (pip's, newest) before the one on PATH."""
    tool = find_cmake()
    if tool is None:
        raise ToolchainError(
            "cmake not found", hint="pip install cmake (or put cmake >= 3.20 on PATH)"
        )
    return str(tool.path)


def _parse_results(output: str, count: int) -> list[list[str]]:
    results: dict[int, list[str]] = {}
    for match in _RESULT.finditer(output):
        results[int(match.group(1))] = [e for e in match.group(2).strip().split(",") if e]
    if sorted(results) != list(range(count)):
        raise PatchError(
            "cmake did not evaluate every arch list",
            where=str(ARCH_EVAL_SCRIPT),
            hint=f"cmake said:\n{output.strip()}",
        )
    return [results[index] for index in range(count)]


def evaluate(tree: Path, lists: Sequence[Sequence[str]], target: str) -> list[list[str]]:
    """What the tree's ``cuda_archs_loose_intersection`` makes of each list for ``target``."""
    utils = tree / UTILS_CMAKE
    if not utils.is_file():
        raise PatchError(
            "the tree has no cmake/utils.cmake to evaluate its arch lists with",
            where=str(utils),
            hint="is this a vLLM source tree?",
        )
    if not lists:
        return []
    with tempfile.TemporaryDirectory(prefix="sparkbuild-archs-") as scratch:
        list_file = Path(scratch) / "lists.txt"
        list_file.write_text(
            "".join(f"{i}:{','.join(entries)}\n" for i, entries in enumerate(lists)),
            encoding="utf-8",
        )
        result = run(
            [
                cmake_program(),
                f"-DUTILS={utils}",
                f"-DTARGET={target}",
                f"-DLISTS={list_file}",
                "-P",
                str(ARCH_EVAL_SCRIPT),
            ],
            echo=False,
            timeout=120,
        )
    return _parse_results(result.output, len(lists))
