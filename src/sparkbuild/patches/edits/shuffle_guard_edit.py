"""Structured edit ``shuffle-rows-guard``: bound both indices of shuffleInputRowsKernel.

The MoE row shuffle kernel reads ``dst2src_map[blockIdx.x]`` before checking the block
against ``num_dst_rows`` and never checks the row it read against ``num_src_rows``.  The
kernel's body has been rewritten between releases, so instead of a line diff this edit finds
every definition of the kernel under ``csrc/``, takes the parameter names from its signature
(by position: input, map, output, num_src_rows, num_dst_rows, num_cols) and the element type
from its template, and injects two block-uniform early returns:

* right after the body's opening brace, ``if (blockIdx.x >= num_dst_rows) return;``;
* right after the statement that reads ``map[...]`` into a variable V, a zero-filled
  destination row and a return when V is outside ``[0, num_src_rows)``.

Both conditions depend only on the block (the map index must be ``blockIdx.x``-based), so a
block leaves as a whole and no barrier in the rest of the kernel is split.  A definition the
edit cannot read that way (not six parameters, no template type, several map reads, a read
nested in a branch or loop or indexed by thread) is refused, not guessed at.  Already applied
is the semantic check of :mod:`sparkbuild.patches.edits.shuffle_guard_check`, which also
recognises the guard upstream wrote itself (vllm >= 0.33).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkbuild.errors import PatchError
from sparkbuild.patches.edits.edit_plan import EditContext, EditPlan, FileChange, Params
from sparkbuild.patches.edits.inline_asm import strip_comments
from sparkbuild.patches.edits.shuffle_guard_check import (
    KERNEL,
    PARAM_ROLES,
    KernelDefinition,
    definition_guarded,
    guard_in_text,
    kernel_definitions,
    kernel_sources,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

KIND = "shuffle-rows-guard"
_HINT = "the kernel was rewritten in a shape this edit does not know; update patches/ for it"


class _Refused(Exception):
    """A definition the edit cannot read: the message says what, the offset says where."""

    def __init__(self, what: str, offset: int) -> None:
        super().__init__(what)
        self.offset = offset


@dataclass(frozen=True)
class MapRead:
    variable: str
    end: int
    """Offset just past the statement's semicolon."""
    indent: str


def template_type(code: str, definition: KernelDefinition) -> str:
    """The template type parameter the kernel's output pointer is declared with."""
    boundary = max(code.rfind(c, 0, definition.name_at) for c in ";{}") + 1
    template = re.search(r"\btemplate\s*<(.*)>", code[boundary : definition.name_at], re.DOTALL)
    declared = template.group(1) if template else ""
    names: list[str] = re.findall(r"\b(?:typename|class)\s+(\w+)", declared)
    output = definition.params[PARAM_ROLES.index("output")]
    used = [name for name in names if re.search(rf"\b{name}\b", output)]
    if len(used) != 1:
        raise _Refused(f"cannot tell the element type of {KERNEL}'s output from its template",
                       definition.name_at)
    return used[0]


def _line_indent(code: str, offset: int) -> str:
    start = code.rfind("\n", 0, offset) + 1
    line = code[start:]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _block_uniform(body: str, before: int, index: str) -> bool:
    """Whether the map index is ``blockIdx.x`` or a variable set from it, never a thread's."""
    if re.search(r"threadIdx|laneid", index):
        return False
    if "blockIdx.x" in index:
        return True
    name = re.fullmatch(r"\s*(\w+)\s*", index)
    if name is None:
        return False
    setting = re.findall(rf"\b{name.group(1)}\s*=\s*([^;=][^;]*);", body[:before])
    return len(setting) == 1 and "blockIdx.x" in setting[0] and "threadIdx" not in setting[0]


def map_read(code: str, definition: KernelDefinition) -> MapRead:
    """The one top-level statement that reads the map into a variable."""
    body_at = definition.open_brace
    body = definition.body(code)
    map_name = definition.role("map")
    reads = [m.start() for m in re.finditer(rf"\b{re.escape(map_name)}\s*\[", body)]
    if len(reads) != 1:
        raise _Refused(f"{KERNEL} reads {map_name} {len(reads)} times, expected once",
                       body_at + (reads[1] if reads else 0))
    read = reads[0]
    start = max(body.rfind(c, 0, read) for c in ";{}") + 1
    end = body.find(";", read)
    statement = re.fullmatch(
        rf"\s*(?:[\w:<>]+\s+)*?(\w+)\s*=\s*(?:static_cast\s*<[\w:\s]+>\s*\()?"
        rf"{re.escape(map_name)}\s*\[(.*)\]\s*\)?\s*",
        body[start:end], re.DOTALL)
    prefix = body[1:start]
    top_level = prefix.count("{") == prefix.count("}") and prefix.count("(") == prefix.count(")")
    if statement is None or not top_level or end < 0:
        raise _Refused(f"{KERNEL} does not read {map_name}[...] into a variable at the top of "
                       "its body", body_at + read)
    if not _block_uniform(body, start, statement.group(2)):
        raise _Refused(f"{KERNEL} indexes {map_name} by something other than its block",
                       body_at + read)
    return MapRead(statement.group(1), body_at + end + 1, _line_indent(code, body_at + read))


def _lines(indent: str, lines: list[str]) -> str:
    return "".join(f"\n{indent}{line}" for line in lines)


def guard_insertions(code: str, definition: KernelDefinition) -> list[tuple[int, str]]:
    """(offset, text) pairs that guard one unguarded definition, in ascending order."""
    if len(definition.params) != len(PARAM_ROLES) or not all(definition.names):
        raise _Refused(f"{KERNEL} does not take ({', '.join(PARAM_ROLES)})", definition.name_at)
    element = template_type(code, definition)
    read = map_read(code, definition)
    dst, src, cols, out = (definition.role(r) for r in
                           ("num_dst_rows", "num_src_rows", "num_cols", "output"))
    row = read.variable
    entry = _lines(read.indent, [
        f"// No map entry past {dst}: leave (block-uniform, so barrier-safe).",
        f"if (blockIdx.x >= {dst}) return;",
    ])
    zero_row = _lines(read.indent, [
        f"// A source row outside [0, {src}) names no input row: write zeros.",
        f"if ({row} < 0 || {row} >= {src}) {{",
        f"  for (int64_t col = threadIdx.x; col < {cols}; col += blockDim.x) {{",
        f"    {out}[static_cast<int64_t>(blockIdx.x) * {cols} + col] = {element}{{}};",
        "  }",
        "  return;",
        "}",
    ])
    return [(definition.open_brace + 1, entry), (read.end, zero_row)]


def guard_text(text: str, origin: str) -> tuple[str, list[int]]:
    """``text`` with every unguarded definition guarded, and the lines of those definitions."""
    code = strip_comments(text)
    insertions: list[tuple[int, str]] = []
    guarded: list[int] = []
    for definition in kernel_definitions(code):
        if definition_guarded(code, definition):
            continue
        try:
            insertions += guard_insertions(code, definition)
        except _Refused as refused:
            line = text.count("\n", 0, refused.offset) + 1
            raise PatchError(str(refused), where=f"{origin}:{line}", hint=_HINT) from None
        guarded.append(text.count("\n", 0, definition.name_at) + 1)
    for offset, inserted in sorted(insertions, reverse=True):
        text = text[:offset] + inserted + text[offset:]
    if guarded and not guard_in_text(text):
        raise PatchError(f"the guarded {KERNEL} is not recognised as guarded", where=origin,
                         hint="a sparkbuild bug: report it with this file")
    return text, guarded


@dataclass(frozen=True)
class ShuffleRowsGuardEdit:
    search: str

    def plan(self, tree: Path) -> EditPlan:
        changes: list[FileChange] = []
        notes: list[str] = []
        defined: list[str] = []
        for path in kernel_sources(tree, self.search):
            relative = path.relative_to(tree).as_posix()
            text = path.read_text(encoding="utf-8")
            if not kernel_definitions(strip_comments(text)):
                continue  # a launch or a declaration only
            defined.append(relative)
            new_text, lines = guard_text(text, relative)
            if lines:
                changes.append(FileChange(relative, text, new_text))
                notes += [f"{relative}:{line}: {KERNEL} bounds both indices" for line in lines]
        if not defined:
            raise PatchError(f"no definition of {KERNEL} under {self.search}/",
                             where=str(tree / self.search), hint=_HINT)
        if not changes:
            return EditPlan((), (f"{', '.join(defined)}: {KERNEL} already bounds both indices",))
        return EditPlan(tuple(changes), tuple(notes))


def from_params(params: Mapping[str, object], base: Path, origin: str,
                context: EditContext) -> ShuffleRowsGuardEdit:
    del base, context  # the edit brings no files of its own and fits every target
    search = Params(params, origin, {"search"}).string("search", "csrc")
    if search.startswith("/") or ".." in search.split("/"):
        raise PatchError(f"search must be a directory in the tree, not {search!r}", where=origin)
    return ShuffleRowsGuardEdit(search)
