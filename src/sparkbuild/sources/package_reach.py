"""Which modules of a package a start reaches, and how each module imports another.

Read with ``ast``, never imported.  Every import statement of a file is classified:

* ``top``: a statement of the module's own body, so the file cannot be imported without it;
* ``guarded``: at module level, but inside ``try``, ``if`` or ``with`` (an optional
  extension: ``with contextlib.suppress(ImportError): import vllm._qutlass_C``);
* ``lazy``: inside a function or a lambda, run only when that function is called.

``importlib.import_module("a.b")`` with a constant name is an import of ``a.b``, of the
kind its place gives it (at module level it runs whenever the module is imported).

:func:`reached` follows the ``top`` and ``guarded`` imports from some root modules through
the package: what a start of those roots loads.  A ``lazy`` import is recorded but not
followed: whether the function runs is not something the file says.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

ImportKind = Literal["top", "guarded", "lazy"]
_RANK: dict[ImportKind, int] = {"top": 0, "guarded": 1, "lazy": 2}


@dataclass(frozen=True)
class ImportSite:
    """One import of ``name`` by ``module``, at ``path:line``."""

    module: str
    name: str
    kind: ImportKind
    path: str
    """Relative to the tree."""
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class PackageImports:
    """Every module of the package (dotted name -> tree-relative file) and its imports."""

    modules: dict[str, str] = field(default_factory=dict)
    sites: dict[str, list[ImportSite]] = field(default_factory=dict)
    """Importing module -> its imports, in file order."""

    def importers_of(self, names: set[str]) -> list[ImportSite]:
        """Every import site of a module in ``names`` (or of a name inside one)."""
        found = []
        for sites in self.sites.values():
            found += [site for site in sites
                      if site.name in names or site.name.rpartition(".")[0] in names]
        return found


def _module_name(relative: Path) -> tuple[str, str]:
    """(dotted module name, its package) of a tree-relative ``.py`` file."""
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def _from_base(node: ast.ImportFrom, package: str) -> str | None:
    if node.level == 0:
        return node.module
    parts = package.split(".") if package else []
    if node.level - 1 > len(parts):
        return None
    base = parts[:len(parts) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])]) or None


def _dynamic_name(node: ast.Call) -> str | None:
    """``importlib.import_module("a.b")`` or ``import_module("a.b")`` with a constant."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else (
        func.id if isinstance(func, ast.Name) else None)
    if called != "import_module" or not node.args:
        return None
    first = node.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(
        first.value, str) and not first.value.startswith(".") else None


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, package: str, path: str) -> None:
        self.module, self.package, self.path = module, package, path
        self.depth = 0
        """Functions entered."""
        self.guards = 0
        """try/if/with blocks entered at module level."""
        self.found: list[ImportSite] = []

    @property
    def kind(self) -> ImportKind:
        return "lazy" if self.depth else ("guarded" if self.guards else "top")

    def _add(self, name: str, line: int) -> None:
        self.found.append(ImportSite(self.module, name, self.kind, self.path, line))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = _from_base(node, self.package)
        if base is None:
            return
        self._add(base, node.lineno)
        for alias in node.names:
            if alias.name != "*":
                self._add(f"{base}.{alias.name}", node.lineno)

    def visit_Call(self, node: ast.Call) -> None:
        name = _dynamic_name(node)
        if name is not None:
            self._add(name, node.lineno)
        self.generic_visit(node)

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def _guarded(self, node: ast.AST) -> None:
        self.guards += 1
        self.generic_visit(node)
        self.guards -= 1

    visit_Try = visit_If = visit_With = visit_AsyncWith = _guarded
    visit_TryStar = _guarded


def _type_checking(node: ast.stmt) -> ast.If | None:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): what only a type checker reads."""
    if not isinstance(node, ast.If):
        return None
    test = node.test
    named = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    return node if named else None


def _file_imports(source: bytes, module: str, package: str, path: str) -> list[ImportSite]:
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        return []
    collector = _Collector(module, package, path)
    for node in tree.body:
        checked = _type_checking(node)
        if checked is not None:
            collector.guards += 1  # its else branch runs, as any guarded block
            for other in checked.orelse:
                collector.visit(other)
            collector.guards -= 1
            continue  # what only a type checker imports never runs
        collector.visit(node)
    return collector.found


def read_package(tree: Path, package: str) -> PackageImports:
    """Every ``.py`` file of ``package`` (a top-level directory of ``tree``) and its imports."""
    found = PackageImports()
    root = tree / package
    if not root.is_dir():
        return found
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(tree)
        module, parent = _module_name(relative)
        try:
            source = path.read_bytes()
        except OSError:
            continue
        found.modules[module] = relative.as_posix()
        found.sites[module] = _file_imports(source, module, parent, relative.as_posix())
    return found


def _known(imports: PackageImports, name: str) -> list[str]:
    """The package's modules an import of ``name`` loads: the module and its packages."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)
            if ".".join(parts[:i]) in imports.modules]


@dataclass(frozen=True)
class Reach:
    """The modules a start of the roots loads, each with the import that brought it in."""

    roots: tuple[str, ...]
    via: dict[str, ImportSite | None]
    """Reached module -> the import that reached it first (None for a root)."""

    def chain(self, module: str) -> list[str]:
        """``root -> ... -> module``, each step by the import that made it."""
        steps = [module]
        site = self.via.get(module)
        while site is not None and len(steps) < 64:
            steps.append(site.module)
            site = self.via.get(site.module)
        return list(reversed(steps))


def reached(imports: PackageImports, roots: tuple[str, ...], *,
            follow_lazy_in_roots: bool = False) -> Reach:
    """The modules the roots load at import (``top`` and ``guarded`` imports, followed);
    with ``follow_lazy_in_roots``, also what the roots' own functions import (the roots are
    the code that runs: a model's methods, a platform's ``import_kernels``)."""
    present = tuple(root for root in roots if root in imports.modules)
    via: dict[str, ImportSite | None] = dict.fromkeys(present)
    todo = list(via)
    while todo:
        module = todo.pop(0)
        for site in imports.sites.get(module, []):
            if site.kind == "lazy" and not (follow_lazy_in_roots and module in present):
                continue
            for name in _known(imports, site.name):
                if name not in via:
                    via[name] = site
                    todo.append(name)
    return Reach(present, via)


def strongest(sites: list[ImportSite]) -> ImportSite | None:
    """The import of ``sites`` that binds most (top, then guarded, then lazy)."""
    return min(sites, key=lambda site: _RANK[site.kind], default=None)
