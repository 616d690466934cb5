"""Applied check ``shuffle-rows-bounds-guard``: does shuffleInputRowsKernel guard its reads?

The ``moe-shuffle-rows-bounds-guard`` edit adds two guards to the MoE row shuffle kernel:
the destination-to-source map is read only for destination rows below ``num_dst_rows``, and
a source row outside ``[0, num_src_rows)`` produces zeros instead of an out-of-bounds read.
Later vLLM releases ship their own guard in other words.  This check recognises the guard by
what the code does, not by its text, with the parameter names the kernel's own signature
gives (by position: input, map, output, num_src_rows, num_dst_rows, num_cols):

* every map read sits inside an ``if`` whose condition bounds the row by ``num_dst_rows``,
  or after an ``if (... >= num_dst_rows ...) return``;
* the row read from the map is compared with 0 and with ``num_src_rows``, and the kernel
  writes a zero value (``DataElem{}``, ``T{}``, a ``zero``, ``.clear()``) somewhere.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sparkbuild.patches.edits.inline_asm import strip_comments

CHECK_NAME = "shuffle-rows-bounds-guard"
KERNEL = "shuffleInputRowsKernel"
SEARCH_DIR = "csrc"
ParamRole = Literal["input", "map", "output", "num_src_rows", "num_dst_rows", "num_cols"]
"""What each parameter of the kernel is, in their order."""
PARAM_ROLES: tuple[ParamRole, ...] = ("input", "map", "output", "num_src_rows", "num_dst_rows",
                                      "num_cols")
_SUFFIXES = (".cu", ".cuh")
_IF = re.compile(r"\bif\s*\(")
_ZERO = re.compile(r"\w+\s*\{\s*\}|\bzero\w*\b|\.clear\(\)|=\s*0\s*;")


def balanced(code: str, start: int, open_char: str, close_char: str) -> int:
    """Index of the bracket closing the one at ``start``."""
    depth = 0
    for index in range(start, len(code)):
        depth += (code[index] == open_char) - (code[index] == close_char)
        if depth == 0:
            return index
    return len(code) - 1


def split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside (), <>, [] and {}."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        depth += (char in "(<[{") - (char in ")>]}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts]


def _declared_name(declaration: str) -> str:
    """The name a parameter declaration declares: its last identifier ('' if none)."""
    match = re.search(r"(\w+)\s*$", declaration)
    return match.group(1) if match else ""


@dataclass(frozen=True)
class KernelDefinition:
    """One definition of the kernel in comment-free code: offsets index that code."""

    name_at: int
    params: tuple[str, ...]
    """Each parameter's declaration, as written."""
    open_brace: int
    close_brace: int

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(_declared_name(param) for param in self.params)

    def role(self, role: ParamRole) -> str:
        return self.names[PARAM_ROLES.index(role)]

    def body(self, code: str) -> str:
        return code[self.open_brace : self.close_brace + 1]


def kernel_definitions(code: str) -> list[KernelDefinition]:
    """Every definition (not declaration, not launch) of the kernel in comment-free ``code``."""
    found = []
    for match in re.finditer(rf"\b{KERNEL}\s*\(", code):
        close = balanced(code, match.end() - 1, "(", ")")
        after = code[close + 1 :]
        if not after.lstrip().startswith("{"):
            continue
        open_brace = close + 1 + after.index("{")
        params = tuple(split_top_level(code[match.end() : close]))
        found.append(KernelDefinition(match.start(), params, open_brace,
                                      balanced(code, open_brace, "{", "}")))
    return found


def _if_sites(body: str) -> list[tuple[str, int, int]]:
    """(condition, start, end) of each ``if`` statement: end is where its branch ends."""
    sites = []
    for match in _IF.finditer(body):
        close = balanced(body, match.end() - 1, "(", ")")
        rest = body[close + 1 :]
        stripped = len(rest) - len(rest.lstrip())
        branch = close + 1 + stripped
        if body.startswith("{", branch):
            end = balanced(body, branch, "{", "}")
        else:
            end = body.find(";", branch)
        sites.append((body[match.end() : close], match.start(), end))
    return sites


def reads_are_bounded(body: str, map_name: str, dst_rows: str) -> bool:
    dst_bound = re.compile(rf"<\s*{dst_rows}\b|\b{dst_rows}\s*>")
    dst_exit = re.compile(rf">=\s*{dst_rows}\b|\b{dst_rows}\s*<=")
    sites = _if_sites(body)
    for read in re.finditer(rf"\b{map_name}\s*\[", body):
        inside = any(
            start < read.start() < end and dst_bound.search(cond) for cond, start, end in sites
        )
        exited = any(
            end < read.start() and dst_exit.search(cond) and "return" in body[start : end + 1]
            for cond, start, end in sites
        )
        if not (inside or exited):
            return False
    return True


def source_is_checked(body: str, map_name: str, src_rows: str) -> bool:
    assigned = re.search(rf"(\w+)\s*=\s*{map_name}\s*\[", body)
    if assigned is None:
        return False
    row = re.escape(assigned.group(1))
    bounded_above = re.search(rf"\b{row}\s*(<|>=)\s*{src_rows}\b", body)
    bounded_below = re.search(rf"\b{row}\s*(<|>=)\s*0\b|\b0\s*(<=|>)\s*{row}\b", body)
    return bool(bounded_above and bounded_below and _ZERO.search(body))


def definition_guarded(code: str, definition: KernelDefinition) -> bool:
    if len(definition.params) != len(PARAM_ROLES) or not all(definition.names):
        return False
    body = definition.body(code)
    map_name = re.escape(definition.role("map"))
    return reads_are_bounded(body, map_name, re.escape(definition.role("num_dst_rows"))) and (
        source_is_checked(body, map_name, re.escape(definition.role("num_src_rows")))
    )


def guard_in_text(text: str) -> bool:
    """Whether the text defines the kernel and every definition guards both indices."""
    code = strip_comments(text)
    definitions = kernel_definitions(code)
    return bool(definitions) and all(definition_guarded(code, d) for d in definitions)


def kernel_sources(tree: Path, search: str = SEARCH_DIR) -> list[Path]:
    """Every CUDA source under ``tree/search`` that names the kernel, sorted."""
    found = []
    for directory, subdirs, files in os.walk(tree / search):
        subdirs.sort()
        for name in sorted(files):
            path = Path(directory) / name
            if name.endswith(_SUFFIXES) and KERNEL in path.read_text(
                encoding="utf-8", errors="replace"
            ):
                found.append(path)
    return found


def guard_present(tree: Path) -> str | None:
    """Where the tree already guards the kernel, or None."""
    for path in kernel_sources(tree):
        if guard_in_text(path.read_text(encoding="utf-8", errors="replace")):
            relative = path.relative_to(tree).as_posix()
            return f"{relative}: {KERNEL} already bounds both indices"
    return None
