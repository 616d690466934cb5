"""Applied check ``shuffle-rows-bounds-guard``: does shuffleInputRowsKernel guard its reads?

The ``moe-shuffle-rows-bounds-guard`` diff adds two guards to the MoE row shuffle kernel:
``dst2src_map`` is read only for destination rows below ``num_dst_rows``, and a source row
outside ``[0, num_src_rows)`` produces zeros instead of an out-of-bounds read.  Later vLLM
releases ship their own guard in other words, where the diff neither applies nor reverses.
This check recognises the guard by what the code does, not by its text:

* every ``dst2src_map[...]`` read sits inside an ``if`` whose condition bounds the row by
  ``num_dst_rows``, or after an ``if (... >= num_dst_rows ...) return``;
* the row read from the map is compared with 0 and with ``num_src_rows``, and the kernel
  writes a zero value (``DataElem{}``, a ``zero``, ``.clear()``) somewhere.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sparkbuild.edits.inline_asm import strip_comments

CHECK_NAME = "shuffle-rows-bounds-guard"
KERNEL = "shuffleInputRowsKernel"
SEARCH_DIR = "csrc"
_SUFFIXES = (".cu", ".cuh")
_IF = re.compile(r"\bif\s*\(")
_DST_BOUND = re.compile(r"<\s*num_dst_rows|num_dst_rows\s*>")
_DST_EXIT = re.compile(r">=\s*num_dst_rows|num_dst_rows\s*<=")
_ZERO = re.compile(r"\w+\s*\{\s*\}|\bzero\w*\b|\.clear\(\)|=\s*0\s*;")


def _balanced(code: str, start: int, open_char: str, close_char: str) -> int:
    """Index of the bracket closing the one at ``start``."""
    depth = 0
    for index in range(start, len(code)):
        depth += (code[index] == open_char) - (code[index] == close_char)
        if depth == 0:
            return index
    return len(code) - 1


def kernel_body(code: str) -> str | None:
    """The body of the kernel's definition (comment-free code), or None."""
    for match in re.finditer(rf"\b{KERNEL}\s*\(", code):
        close = _balanced(code, match.end() - 1, "(", ")")
        after = code[close + 1 :].lstrip()
        if after.startswith("{"):
            open_brace = close + 1 + code[close + 1 :].index("{")
            return code[open_brace : _balanced(code, open_brace, "{", "}") + 1]
    return None


def _if_sites(body: str) -> list[tuple[str, int, int]]:
    """(condition, start, end) of each ``if`` statement: end is where its branch ends."""
    sites = []
    for match in _IF.finditer(body):
        close = _balanced(body, match.end() - 1, "(", ")")
        rest = body[close + 1 :]
        stripped = len(rest) - len(rest.lstrip())
        branch = close + 1 + stripped
        if body.startswith("{", branch):
            end = _balanced(body, branch, "{", "}")
        else:
            end = body.find(";", branch)
        sites.append((body[match.end() : close], match.start(), end))
    return sites


def reads_are_bounded(body: str) -> bool:
    sites = _if_sites(body)
    for read in re.finditer(r"\bdst2src_map\s*\[", body):
        inside = any(
            start < read.start() < end and _DST_BOUND.search(cond) for cond, start, end in sites
        )
        exited = any(
            end < read.start() and _DST_EXIT.search(cond) and "return" in body[start : end + 1]
            for cond, start, end in sites
        )
        if not (inside or exited):
            return False
    return True


def source_is_checked(body: str) -> bool:
    assigned = re.search(r"(\w+)\s*=\s*dst2src_map\s*\[", body)
    if assigned is None:
        return False
    row = re.escape(assigned.group(1))
    bounded_above = re.search(rf"\b{row}\s*(<|>=)\s*num_src_rows\b", body)
    bounded_below = re.search(rf"\b{row}\s*(<|>=)\s*0\b|\b0\s*(<=|>)\s*{row}\b", body)
    return bool(bounded_above and bounded_below and _ZERO.search(body))


def guard_in_text(text: str) -> bool:
    body = kernel_body(strip_comments(text))
    return body is not None and reads_are_bounded(body) and source_is_checked(body)


def guard_present(tree: Path) -> str | None:
    """Where the tree already guards the kernel, or None."""
    for directory, subdirs, files in os.walk(tree / SEARCH_DIR):
        subdirs.sort()
        for name in sorted(files):
            if not name.endswith(_SUFFIXES):
                continue
            path = Path(directory) / name
            text = path.read_text(encoding="utf-8", errors="replace")
            if KERNEL in text and guard_in_text(text):
                relative = path.relative_to(tree).as_posix()
                return f"{relative}: {KERNEL} already bounds both indices (upstream's own guard)"
    return None
