"""CUDA arch lists in a vLLM tree's CMake files: where they are, and which branch holds them.

vLLM decides per kernel family which archs to compile with ``cuda_archs_loose_intersection``
(``cmake/utils.cmake``): a source list such as ``"12.0;12.0a"`` is intersected with the
target archs (``CUDA_ARCHS``), and a target without its own entry may fall back to the
nearest lower arch of the same major -- a 12.1 build silently gets 12.0 code -- or, for a
family entry (``12.0f``), to the target's own spelling.  Which list applies also depends on
the CUDA version: most lists sit in ``if(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL
13.0) ... else() ... endif()`` branches.

This module is the reading half, pure and unit-tested: every literal arch list of the root
CMake file and of the files it ``include()``s (:func:`tree_arch_lists`), each with the
``if()`` branches around it (:class:`Guard`), and which variable is the *supported* list
that ``CUDA_ARCHS`` is cut from.  :mod:`sparkbuild.toolchain.arch_eval` asks the tree's own
CMake what each list gives for a target and a CUDA version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from sparkbuild.resources import build_tools_dir

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from pathlib import Path

ARCH_EVAL_SCRIPT = build_tools_dir() / "arch_eval.cmake"
UTILS_CMAKE = "cmake/utils.cmake"
VERSION_VARIABLE = "CMAKE_CUDA_COMPILER_VERSION"

_ENTRY = re.compile(r"(?P<base>\d+\.\d+)(?P<suffix>[af]?)(?P<ptx>\+PTX)?")
_LIST_SITES = (
    # set(CUDA_SUPPORTED_ARCHS "...") and every other set(<NAME>_ARCHS "...")
    re.compile(r"\bset\s*\(\s*(?P<var>\w*ARCHS)\s+\"(?P<list>[^\"]*)\"\s*\)"),
    # cuda_archs_loose_intersection(VAR "SRC" ...): the SRC literal
    re.compile(r"\bcuda_archs_loose_intersection\s*\(\s*(?P<var>\w+)\s+\"(?P<list>[^\"]*)\""),
)
_APPEND = re.compile(r"list\s*\(\s*APPEND\s+(?P<var>\w+)\s+(?P<args>[^)]*)\)", re.DOTALL)
_APPEND_ARG = re.compile(r"\"(?P<quoted>[^\"]*)\"|(?P<bare>[^\s\"]+)")
_SUPPORTED_CUT = re.compile(
    r"\bcuda_archs_loose_intersection\s*\(\s*(?P<out>\w+)\s+\"\$\{(?P<src>\w+)\}\"\s+"
    r"\"\$\{(?P=out)\}\""
)
"""``cuda_archs_loose_intersection(CUDA_ARCHS "${CUDA_SUPPORTED_ARCHS}" "${CUDA_ARCHS}")``:
the target list cut by the supported list, the result stored back under its own name."""
_INCLUDE_DIRS = ("CMAKE_CURRENT_SOURCE_DIR", "CMAKE_SOURCE_DIR", "PROJECT_SOURCE_DIR")


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

    @property
    def specific(self) -> bool:
        """Arch- or family-specific (``a``/``f``): the SM12x features (block-scaled MMA...)."""
        return self.suffix in ("a", "f")


@dataclass(frozen=True)
class Guard:
    """One ``if()`` chain around a list: the conditions of the branches before the one taken
    (all false there) and the taken branch's own condition (None for ``else()``)."""

    previous: tuple[str, ...]
    condition: str | None


@dataclass(frozen=True)
class ArchList:
    variable: str
    line: int
    entries: tuple[ArchEntry, ...]
    file: str = "CMakeLists.txt"
    """Relative to the tree, POSIX form."""
    guards: tuple[Guard, ...] = ()
    """Outermost first, the include() site's guards before the file's own."""
    supported: bool = False
    """A value of the list ``CUDA_ARCHS`` is cut from (``CUDA_SUPPORTED_ARCHS``)."""
    appended: bool = False
    """``list(APPEND X ...)``: adds to the value ``X`` holds, does not replace it."""

    @property
    def values(self) -> list[str]:
        return [entry.text for entry in self.entries]

    def has_major(self, major: int) -> bool:
        return any(entry.major == major for entry in self.entries)

    def has_specific(self, major: int) -> bool:
        return any(entry.major == major and entry.specific for entry in self.entries)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def describe(self) -> str:
        return f"{self.variable} \"{';'.join(self.values)}\" ({self.where})"


def parse_entry(text: str, start: int = 0) -> ArchEntry | None:
    """One CUDA arch entry (``9.0a``, ``12.0f``, ``8.0+PTX``); None for anything else (gfx...)."""
    match = _ENTRY.fullmatch(text)
    if match is None:
        return None
    return ArchEntry(text, match.group("base"), match.group("suffix"), start)


def entry_for(targets: Sequence[str], base: str) -> str | None:
    """The targets' entry for ``base`` (``12.1a`` of ``["9.0a", "12.1a"]``), without +PTX."""
    for target in targets:
        entry = parse_entry(target)
        if entry is not None and entry.base == base:
            return entry.base + entry.suffix
    return None


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


# -- commands and if() blocks --------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    name: str
    """Lower case: CMake command names are case-insensitive."""
    start: int
    args_start: int
    end: int
    """Just past the closing parenthesis."""

    def args(self, text: str) -> str:
        return text[self.args_start:self.end - 1]


def _skip_comment(text: str, position: int) -> int:
    """Past a ``#`` comment (line or ``#[[ bracket ]]``) starting at ``position``."""
    bracket = re.match(r"#\[(=*)\[", text[position:])
    if bracket:
        close = text.find("]" + bracket.group(1) + "]", position)
        return len(text) if close < 0 else close + len(bracket.group(1)) + 2
    newline = text.find("\n", position)
    return len(text) if newline < 0 else newline


def _skip_string(text: str, position: int) -> int:
    """Past the quoted argument opening at ``position``."""
    index = position + 1
    while index < len(text):
        if text[index] == "\\":
            index += 2
            continue
        if text[index] == '"':
            return index + 1
        index += 1
    return len(text)


def _past_string_or_comment(text: str, index: int) -> int | None:
    """Past the quoted argument or comment starting at ``index``; None if neither starts."""
    if text[index] == '"':
        return _skip_string(text, index)
    if text[index] == "#":
        return _skip_comment(text, index)
    return None


def _closing(text: str, position: int) -> int:
    """Past the parenthesis closing the one at ``position``."""
    depth = 0
    index = position
    while index < len(text):
        char = text[index]
        skipped = _past_string_or_comment(text, index)
        if skipped is not None:
            index = skipped
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return len(text)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def commands(text: str) -> Iterator[Command]:
    """Every command invocation of a CMake file, in order; comments are skipped."""
    index = 0
    while index < len(text):
        skipped = _past_string_or_comment(text, index)
        if skipped is not None:
            index = skipped
            continue
        match = _IDENTIFIER.match(text, index)
        if match is None or (index and (text[index - 1].isalnum() or text[index - 1] == "_")):
            index += 1
            continue
        after = match.end()
        while after < len(text) and text[after] in " \t":
            after += 1
        if after < len(text) and text[after] == "(":
            end = _closing(text, after)
            yield Command(match.group(0).lower(), index, after + 1, end)
            index = end
        else:
            index = match.end()


@dataclass
class _Chain:
    conditions: list[str] = field(default_factory=list)
    in_else: bool = False

    def guard(self) -> Guard:
        if self.in_else:
            return Guard(tuple(self.conditions), None)
        return Guard(tuple(self.conditions[:-1]), self.conditions[-1])


def _normalized(condition: str) -> str:
    return " ".join(condition.split())


def guarded_commands(text: str) -> Iterator[tuple[Command, tuple[Guard, ...]]]:
    """Each command with the ``if()`` branches it sits in, outermost first."""
    stack: list[_Chain] = []
    for command in commands(text):
        if command.name == "if":
            stack.append(_Chain([_normalized(command.args(text))]))
        elif command.name == "elseif" and stack:
            stack[-1].conditions.append(_normalized(command.args(text)))
        elif command.name == "else" and stack:
            stack[-1].in_else = True
        elif command.name == "endif" and stack:
            stack.pop()
        else:
            yield command, tuple(chain.guard() for chain in stack)


# -- arch lists -----------------------------------------------------------------------------


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _lists_of(text: str, command: Command, file: str, guards: tuple[Guard, ...]
              ) -> Iterator[ArchList]:
    source = text[command.start:command.end]
    for pattern in _LIST_SITES:
        match = pattern.match(source)
        if match is None:
            continue
        start = command.start + match.start("list")
        entries = _entries(match.group("list"), start)
        if entries is not None:
            yield ArchList(match.group("var"), _line(text, start), entries, file, guards)
    append = _APPEND.match(source) if command.name == "list" else None
    if append is not None:
        found: list[ArchEntry] = []
        base = command.start + append.start("args")
        for arg in _APPEND_ARG.finditer(append.group("args")):
            value = arg.group("quoted") if arg.group("quoted") is not None else arg.group("bare")
            offset = base + (arg.start("quoted") if arg.group("quoted") is not None
                             else arg.start("bare"))
            entries = _entries(value, offset)
            if entries is None:
                return  # an append of something else (flags, sources, variables)
            found.extend(entries)
        if found:
            yield ArchList(append.group("var"), _line(text, found[0].start), tuple(found), file,
                           guards, appended=True)


def find_arch_lists(text: str, file: str = "CMakeLists.txt",
                    guards: tuple[Guard, ...] = ()) -> list[ArchList]:
    """Every literal CUDA arch list of one CMake file, in file order: ``set(X_ARCHS "...")``,
    the source literal of ``cuda_archs_loose_intersection(OUT "..." ...)`` and
    ``list(APPEND X 12.0a ...)`` of arch entries only.  ``guards``: those of the include()."""
    found: list[ArchList] = []
    for command, own in guarded_commands(text):
        if command.name in ("set", "cuda_archs_loose_intersection", "list"):
            found.extend(_lists_of(text, command, file, guards + own))
    return found


def supported_variable(text: str) -> str | None:
    """The variable ``CUDA_ARCHS`` is cut from (``CUDA_SUPPORTED_ARCHS``), if this file cuts it."""
    for command, _ in guarded_commands(text):
        if command.name == "cuda_archs_loose_intersection":
            match = _SUPPORTED_CUT.match(text, command.start)
            if match is not None:
                return match.group("src")
    return None


def _include_target(argument: str, including: str) -> str | None:
    """The tree-relative path an ``include()`` argument names; None for a module name."""
    value = argument.strip().strip('"')
    folder = including.rsplit("/", 1)[0] if "/" in including else ""
    value = value.replace("${CMAKE_CURRENT_LIST_DIR}", folder or ".")
    for variable in _INCLUDE_DIRS:
        value = value.replace("${" + variable + "}", ".")
    if "${" in value or not value.endswith(".cmake"):
        return None
    parts: list[str] = []
    for part in value.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts) or None


def cmake_files(tree: Path, root: str = "CMakeLists.txt") -> list[tuple[str, tuple[Guard, ...]]]:
    """``root`` and every file it ``include()``s, depth first, with each include's guards."""
    found: dict[str, tuple[Guard, ...]] = {}

    def visit(relative: str, guards: tuple[Guard, ...]) -> None:
        path = tree / relative
        if relative in found or not path.is_file():
            return
        found[relative] = guards
        text = path.read_text(encoding="utf-8", errors="replace")
        for command, own in guarded_commands(text):
            if command.name == "include":
                target = _include_target(command.args(text).split()[0] if command.args(
                    text).split() else "", relative)
                if target is not None:
                    visit(target, guards + own)

    visit(root, ())
    return list(found.items())


@dataclass(frozen=True)
class TreeLists:
    lists: tuple[ArchList, ...]
    texts: dict[str, str]
    """Each file's text, by tree-relative path."""
    supported: str | None
    """The supported list's variable, or None when the tree does not cut CUDA_ARCHS."""


def tree_arch_lists(tree: Path, root: str = "CMakeLists.txt",
                    texts: dict[str, str] | None = None) -> TreeLists:
    """Every CUDA arch list the build reads, with the supported list marked.

    ``texts`` overrides file contents (an edit checks its new text before writing it).
    """
    texts = dict(texts or {})
    lists: list[ArchList] = []
    supported: str | None = None
    for relative, guards in cmake_files(tree, root):
        if relative not in texts:
            texts[relative] = (tree / relative).read_text(encoding="utf-8", errors="replace")
        text = texts[relative]
        supported = supported or supported_variable(text)
        lists.extend(find_arch_lists(text, relative, guards))
    if supported is not None:
        lists = [replace(lst, supported=lst.variable == supported) for lst in lists]
    return TreeLists(tuple(lists), texts, supported)


def is_native(result: Sequence[str], target: str) -> bool:
    """True when an evaluated list compiles ``target`` itself (``12.1``, ``12.1a``, ``12.1f``)."""
    for text in result:
        entry = parse_entry(text.strip())
        if entry is not None and entry.base == target:
            return True
    return False


def flashinfer_arch_list(archs: Sequence[str]) -> str:
    """``FLASHINFER_CUDA_ARCH_LIST`` for a target: space-separated, suffixes kept (``12.1a``);
    flashinfer builds no PTX, so ``+PTX`` is dropped."""
    return " ".join(a.removesuffix("+PTX") for a in archs)
