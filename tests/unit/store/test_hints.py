"""Hints that send the user to another command say everything that command needs."""

from __future__ import annotations

import ast
from pathlib import Path

from sparkbuild.store.cache import FILL_HINT
from sparkbuild.store.url_reader import OFFLINE_HINT

SRC = Path(__file__).resolve().parents[3] / "src" / "sparkbuild"


def _text(node: ast.expr) -> str:
    """The literal text of a string expression (f-string holes dropped)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(part) for part in node.values)
    if isinstance(node, ast.BinOp):
        return _text(node.left) + _text(node.right)
    if isinstance(node, ast.IfExp):
        return _text(node.body) + " | " + _text(node.orelse)
    return ""


def hints() -> list[tuple[str, str]]:
    """(where, text) of every ``hint=`` argument and ``*_HINT`` constant under src/."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "hint":
                found.append((f"{path.name}:{node.value.lineno}", _text(node.value)))
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id.endswith("HINT") for t in node.targets
            ):
                found.append((f"{path.name}:{node.lineno}", _text(node.value)))
    return found


def test_every_hint_naming_vendor_says_it_needs_a_prepared_tree() -> None:
    naming = [(where, text) for where, text in hints() if "sparkbuild vendor" in text]
    assert len(naming) >= 2  # FILL_HINT and the offline build's missing-entries hint
    for where, text in naming:
        assert "--tree TREE" in text and "sparkbuild prepare" in text, (where, text)


def test_the_offline_hint_carries_the_fill_hint() -> None:
    assert FILL_HINT in OFFLINE_HINT
    assert "sparkbuild wheel` without --offline" in FILL_HINT
