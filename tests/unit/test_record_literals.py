"""Every status, kind, role and backend of a record is a ``Literal`` or an enum, never ``str``:
mypy then knows its values, and a comparison with a value it cannot take is an error.

Read from the source with :mod:`ast` (no module is imported): each class decorated with
``dataclass`` or based on ``Record``, and each of its annotated fields of those names whose
annotation is ``str``, alone or in a union (``str | None``, ``Optional[str]``).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "sparkbuild"
NAMES = frozenset({"status", "kind", "role", "backend"})


def _name(node: ast.expr) -> str | None:
    """``dataclass``, ``dataclasses.dataclass``, ``dataclass(frozen=True)``: the last part."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _is_record(node: ast.ClassDef) -> bool:
    return ("dataclass" in map(_name, node.decorator_list)
            or "Record" in map(_name, node.bases))


def _members(annotation: ast.expr) -> list[ast.expr]:
    """The types a union annotation joins (``A | B``, ``Optional[A]``, ``Union[A, B]``)."""
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return [*_members(annotation.left), *_members(annotation.right)]
    if isinstance(annotation, ast.Subscript) and _name(annotation.value) in ("Optional",
                                                                              "Union"):
        inner = annotation.slice
        return [m for e in (inner.elts if isinstance(inner, ast.Tuple) else [inner])
                for m in _members(e)]
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return _members(ast.parse(annotation.value, mode="eval").body)
    return [annotation]


def bare_str_fields(source: str) -> list[str]:
    """``Class.field`` (line) for each status/kind/role/backend field of a record in
    ``source`` that is annotated ``str``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ClassDef) and _is_record(node)):
            continue
        for item in node.body:
            if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                    and item.target.id in NAMES
                    and any(isinstance(m, ast.Name) and m.id == "str"
                            for m in _members(item.annotation))):
                found.append(f"{node.name}.{item.target.id} (line {item.lineno})")
    return found


def test_the_check_finds_a_bare_str_in_every_form_a_record_spells_it() -> None:
    source = '''
from dataclasses import dataclass
import dataclasses

@dataclass(frozen=True)
class A:
    status: str
    kind: str | None = None
    name: str = ""

@dataclasses.dataclass
class B:
    role: "Optional[str]"
    backend: Union[int, str]

class C(Record):
    kind: str

class NotARecord:
    status: str

@dataclass
class Typed:
    status: Status
    kind: Literal["a", "b"] | None = None
'''
    assert bare_str_fields(source) == [
        "A.status (line 7)", "A.kind (line 8)", "B.role (line 13)", "B.backend (line 14)",
        "C.kind (line 17)"]


def test_no_status_kind_role_or_backend_of_a_record_is_a_bare_str() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 100
    found = [f"{path.relative_to(PACKAGE)}: {where}" for path in modules
             for where in bare_str_fields(path.read_text(encoding="utf-8"))]
    assert found == []
