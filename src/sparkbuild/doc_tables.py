"""A markdown page's generated tables: each between a start marker and an end marker.

A start marker is an HTML comment that opens with ``start`` and closes with ``-->`` at the
end of its line; what it says in between (its text) names the table (``[build]: written by
...``, ``... for you``).  The table stands on the lines after it, up to ``end``.
``settings.py`` writes docs/environment.md this way and ``recipe_schema.py`` the key tables
of docs/recipes.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

CLOSE = "-->\n"
"""How a start marker's line ends."""


def _split(page: str, start: str, end: str) -> tuple[list[tuple[str, str]], str]:
    """([(the text before a start marker, the text between it and its end)], the rest)."""
    found, rest = [], page
    while start in rest:
        head, _, rest = rest.partition(start)
        between, _, rest = rest.partition(end)
        found.append((head, between))
    return found, rest


def tables(page: str, start: str, end: str) -> list[tuple[str, str]]:
    """(the marker's text, the table as the page has it, stripped) of each, in order."""
    return [(between.partition(CLOSE)[0], between.partition(CLOSE)[2].strip())
            for _, between in _split(page, start, end)[0]]


def rewritten(page: str, start: str, end: str, table_for: Callable[[str], str]) -> str:
    """``page`` with what stands between each start marker and its end replaced by
    ``table_for(the marker's text)`` (the rest of the marker line, the table, its newline)."""
    found, rest = _split(page, start, end)
    return "".join([*(head + start + table_for(between.partition(CLOSE)[0]) + end
                      for head, between in found), rest])


def rewrite_main(argv: list[str], usage: str, rewrite: Callable[[str], str]) -> int:
    """``python -m sparkbuild.MODULE PAGE``: the page written anew by ``rewrite``; 2 with
    ``usage: USAGE`` unless exactly one page is named."""
    if len(argv) != 1:
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    page = Path(argv[0])
    page.write_text(rewrite(page.read_text(encoding="utf-8")), encoding="utf-8")
    return 0
