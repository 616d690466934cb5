"""No function of ``src/sparkbuild`` takes more than eight parameters: the facts of a build
travel as one frozen object, not one by one through the layers.

Read from the source with :mod:`ast`: positional and keyword-only parameters count (``self``
and ``cls`` do not, nor ``*args`` and ``**kwargs``), methods and nested functions too."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "sparkbuild"
MOST = 8


def parameter_count(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = function.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    return len([name for name in names if name not in ("self", "cls")])


def too_long(root: Path) -> list[str]:
    """``path:line name (count)`` of every function under ``root`` over :data:`MOST`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                count = parameter_count(node)
                if count > MOST:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({count})")
    return found


def test_no_function_takes_more_than_eight_parameters() -> None:
    assert too_long(PACKAGE) == []


def test_the_count_sees_every_kind_of_parameter(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "def ok(a, b, /, c, *args, d, e, f, g, h, **kwargs): ...\n"
        "class C:\n"
        "    def method(self, a, b, c, d, e, f, g, h): ...\n"
        "    async def nine(self, a, b, c, /, d, e, *, f, g, h, i): ...\n"
        "def outer():\n"
        "    def inner(cls, a, b, c, d, e, f, g, h, i): ...\n")
    assert too_long(tmp_path) == ["m.py:4 nine (9)", "m.py:6 inner (9)"]
