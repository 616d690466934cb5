"""What a Python file imports whatever runs: its unconditional module-level imports.

Read with ``ast``, never imported.  An import counts when it is a statement of the module's
own body (not inside ``try``, ``if``, a function or a class), so the file cannot be imported
without it.  Two readers share it: ``wheel --targets`` (:mod:`sparkbuild.checks.start_imports`,
before anything compiles) and ``install`` (:mod:`sparkbuild.node.start_check`, before
anything is installed).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class TopLevelImport:
    name: str
    """A dotted module name (``import a.b`` gives ``a.b``; ``from a.b import c`` gives
    ``a.b``, and ``a.b.c`` as a possible submodule)."""
    line: int
    module: bool
    """True when ``name`` must be a module; False for ``from M import N``'s ``M.N``, which
    may as well be a name ``M`` defines."""


def _from_base(node: ast.ImportFrom, package: str | None) -> str | None:
    """The absolute module a ``from ... import`` names (relative ones need ``package``,
    the importing file's package)."""
    if node.level == 0:
        return node.module
    if package is None:
        return None
    parts = package.split(".") if package else []
    if node.level - 1 > len(parts):
        return None
    base = parts[:len(parts) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])]) or None


def top_level_imports(source: bytes, filename: str,
                      package: str | None = None) -> list[TopLevelImport]:
    """The unconditional module-level imports of one file ([] when it does not parse:
    a file that cannot be compiled is not this check's finding).  ``package``: the
    file's package (``a.b`` for ``a/b/c.py`` and ``a/b/__init__.py``), to resolve
    relative imports; without it they are left out."""
    try:
        body = ast.parse(source, filename=filename).body
    except (SyntaxError, ValueError):
        return []
    found: list[TopLevelImport] = []
    for node in body:
        if isinstance(node, ast.Import):
            found += [TopLevelImport(alias.name, node.lineno, True) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, package)
            if base is None:
                continue
            if node.module:  # ``from . import x`` names no module of its own but the package
                found.append(TopLevelImport(base, node.lineno, True))
            found += [TopLevelImport(f"{base}.{alias.name}", node.lineno, False)
                      for alias in node.names if alias.name != "*"]
    return found


_REFUSALS = frozenset({"ImportError", "ModuleNotFoundError"})


def _raised_name(node: ast.Raise) -> str | None:
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return exc.id if isinstance(exc, ast.Name) else None


def _statements_under_ifs(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of ``body`` and, recursively, of its ``if``/``else`` branches (not
    of ``try``, functions or classes: a refusal there is caught, or runs only if called)."""
    found: list[ast.stmt] = []
    for node in body:
        found.append(node)
        if isinstance(node, ast.If):
            found += _statements_under_ifs([*node.body, *node.orelse])
    return found


def import_refusals(source: bytes, filename: str) -> list[tuple[int, str]]:
    """Where a file refuses to be imported: ``raise ImportError(...)`` (or
    ModuleNotFoundError) in its module body or an ``if`` there, with the text of its
    message (every string constant in it) -- vLLM 0.20.0's ``vllm/vllm_flash_attn/__init__.py``
    raises one unless ``_vllm_fa2_C`` or ``_vllm_fa3_C`` was built."""
    try:
        body = ast.parse(source, filename=filename).body
    except (SyntaxError, ValueError):
        return []
    return [(node.lineno, " ".join(c.value for c in ast.walk(node)
                                   if isinstance(c, ast.Constant) and isinstance(c.value, str)))
            for node in _statements_under_ifs(body)
            if isinstance(node, ast.Raise) and _raised_name(node) in _REFUSALS]
