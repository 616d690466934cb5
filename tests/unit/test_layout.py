"""The package's shape: seven stages over two shared layers, and imports that only run down.

Read from the source with :mod:`ast` (no module is imported): every ``import`` and
``from ... import`` of a ``sparkbuild`` module, at any depth (a function's lazy import
counts too, and so does one under ``TYPE_CHECKING``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "sparkbuild"

TOP_LEVEL = frozenset({
    "__init__", "__main__", "cli", "pipeline", "errors", "proc", "console", "recipe",
    "recipe_keys", "recipe_model", "recipe_schema", "resources", "settings", "records",
    "doc_tables",
})
"""The only modules allowed at the top of the package."""

FOUNDATION = frozenset({"errors", "proc", "console", "resources", "settings", "records",
                        "doc_tables", "__init__"})
"""Top-level modules every room may use."""

RECIPE = frozenset({"recipe", "recipe_keys", "recipe_model", "recipe_schema"})
"""Top-level modules of the recipe: every room but the store may use them, and they may use
the store (its readers of user files); no store module loads them."""

RANK = {
    "foundation": 0,
    "store": 1,
    "recipe": 1,
    "toolchain": 2,
    "sources": 3,
    "patches": 4,
    "vendoring": 5,
    "bundle": 6,
    "jobplan": 7,
    "team": 8,
    "checks": 9,
    "flashinfer": 10,
    "compile": 11,
    "wheelhouse": 12,
    "node": 13,
    "pipeline": 14,
    "cli": 15,
    "__main__": 16,
}
"""A room may import from its own rank or a lower one, never a higher one."""


def room_of(module: str) -> str:
    """``sparkbuild.checks.check`` -> ``build``; ``sparkbuild.errors`` -> ``foundation``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "foundation"
    head = parts[1]
    if head in FOUNDATION:
        return "foundation"
    return "recipe" if head in RECIPE else head


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, own: str) -> list[tuple[int, str]]:
    """(line, module) of every sparkbuild import in ``path``, the module named ``own``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names
                      if alias.name.split(".")[0] == "sparkbuild"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] != "sparkbuild":
                continue
            if target == "sparkbuild":  # `from sparkbuild import errors` (or `__version__`)
                found += [(node.lineno, "sparkbuild" if alias.name.startswith("_")
                           else f"sparkbuild.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, target))
    return found


def upward_imports(modules: dict[Path, str]) -> list[str]:
    """Each import of a room ranked above the importing module's room."""
    upward = []
    for path, own in sorted(modules.items()):
        here = room_of(own)
        for line, target in imported_modules(path, own):
            if RANK[room_of(target)] > RANK[here]:
                upward.append(f"{path.name}:{line}: {own} ({here}) imports {target}")
    return upward


ROOMS = ("store", "toolchain", "sources", "patches", "vendoring", "bundle", "jobplan", "team",
         "checks", "flashinfer", "compile", "wheelhouse", "node")
"""Every subpackage of sparkbuild, in import order."""

FORBIDDEN_NAMES = frozenset({"build", "vendor", "_vendor", "dist", "out", "lib"})
"""Names tools take for output or bundled third-party code (gitignore templates, linguist,
dependency viewers): no package of sparkbuild is called so."""

LARGEST_SHARE = 0.15
"""No room holds more than this share of the package's lines."""

LAYOUT_DOC = PACKAGE.parents[1] / "docs" / "layout.md"


def test_only_the_named_modules_stay_at_the_top() -> None:
    top = {path.stem for path in PACKAGE.glob("*.py")}
    assert top <= TOP_LEVEL, f"modules at the top of sparkbuild: {sorted(top - TOP_LEVEL)}"
    rooms = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    assert rooms == set(ROOMS)
    assert [room for room in sorted(RANK, key=RANK.__getitem__) if room in rooms] == list(ROOMS)


def test_no_store_module_loads_the_recipe() -> None:
    """The store sits beneath the recipe (the recipe reads its files with the store's
    readers): importing a store module loads no recipe module (a type named under
    ``TYPE_CHECKING`` loads nothing)."""
    recipe = {f"sparkbuild.{name}" for name in RECIPE}
    loading = {module_name(path): sorted(loaded_with(module_name(path)) & recipe)
               for path in sorted((PACKAGE / "store").glob("*.py"))}
    assert {name: found for name, found in loading.items() if found} == {}
    assert "sparkbuild.recipe" in loaded_with("sparkbuild.flashinfer.model_config")


def room_docstring(package: Path) -> str:
    init = package / "__init__.py"
    return ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""


@pytest.mark.parametrize("room", ROOMS)
def test_each_room_says_what_it_does(room: str) -> None:
    docstring = room_docstring(PACKAGE / room)
    assert len(docstring.split()) > 20, f"{room}/__init__.py needs a docstring"
    assert "hands" in docstring, f"{room}/__init__.py must say what it hands on"


def unlisted_in_docstring(package: Path) -> list[str]:
    """The modules and subpackages of ``package`` its docstring does not name
    (as ``:mod:`.name``` or with the package's dotted path)."""
    docstring = room_docstring(package)
    parts = package.parts
    dotted = ".".join(parts[len(parts) - 1 - parts[::-1].index("sparkbuild"):])
    missing = []
    for child in sorted(package.iterdir()):
        name = child.stem if child.suffix == ".py" else child.name
        is_module = child.suffix == ".py" or (child / "__init__.py").is_file()
        if name.startswith("__") or not is_module:
            continue
        if f":mod:`.{name}`" not in docstring and f"{dotted}.{name}" not in docstring:
            missing.append(f"{dotted}.{name}")
    return missing


def test_every_module_is_named_in_its_rooms_docstring() -> None:
    packages = [init.parent for init in PACKAGE.rglob("__init__.py") if init.parent != PACKAGE]
    missing = [name for package in packages for name in unlisted_in_docstring(package)]
    assert not missing, "modules their package's docstring does not name: " + ", ".join(missing)


def test_every_module_is_named_in_the_layout_page() -> None:
    page = LAYOUT_DOC.read_text(encoding="utf-8")
    missing = [str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py"))
               if path.name != "__init__.py" and path.parent != PACKAGE
               and f"`{path.relative_to(PACKAGE).as_posix()}`" not in page]
    assert not missing, "modules docs/layout.md does not name (as `room/module.py`): " + \
        ", ".join(missing)


def test_no_package_has_a_name_tools_skip() -> None:
    named = sorted(str(init.parent.relative_to(PACKAGE)) for init in PACKAGE.rglob("__init__.py")
                   if init.parent.name in FORBIDDEN_NAMES)
    assert named == [], f"packages named like output or third-party code: {named}"


def code_lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_room_holds_more_than_its_share() -> None:
    total = sum(code_lines(path) for path in PACKAGE.rglob("*.py"))
    shares = {room: sum(code_lines(path) for path in (PACKAGE / room).rglob("*.py")) / total
              for room in ROOMS}
    over = {room: f"{share:.1%}" for room, share in shares.items() if share > LARGEST_SHARE}
    assert not over, f"rooms over {LARGEST_SHARE:.0%} of src/sparkbuild's lines: {over}"


def test_the_docstring_check_sees_an_unnamed_module(tmp_path: Path) -> None:
    """The rule must be able to fail: a module its room's docstring leaves out."""
    room = tmp_path / "sparkbuild" / "room"
    room.mkdir(parents=True)
    (room / "__init__.py").write_text('"""Holds :mod:`.named`."""\n')
    (room / "named.py").write_text("")
    (room / "unnamed.py").write_text("")
    assert [name.rsplit(".", 1)[1] for name in unlisted_in_docstring(room)] == ["unnamed"]


def test_no_import_runs_back_up() -> None:
    modules = {path: module_name(path) for path in PACKAGE.rglob("*.py")}
    upward = upward_imports(modules)
    assert not upward, "imports that run back up:\n" + "\n".join(upward)


def test_the_checker_sees_upward_imports(tmp_path: Path) -> None:
    """The rule must be able to fail: a lazy, a relative and a plain upward import."""
    lazy = tmp_path / "cache.py"
    lazy.write_text("def f() -> None:\n"
                    "    from sparkbuild.wheelhouse.verify import verify_wheelhouse\n")
    relative = tmp_path / "fetch.py"
    relative.write_text("from ..patches import engine\nfrom . import git\n")
    plain = tmp_path / "check.py"
    plain.write_text("import sparkbuild.cli\nfrom sparkbuild import pipeline\n")
    found = upward_imports({lazy: "sparkbuild.store.cache", relative: "sparkbuild.sources.fetch",
                            plain: "sparkbuild.checks.check"})
    assert [line.split(" imports ")[1] for line in found] == [
        "sparkbuild.wheelhouse.verify", "sparkbuild.cli", "sparkbuild.pipeline",
        "sparkbuild.patches"]


def runtime_imports(path: Path, own: str) -> set[str]:
    """The sparkbuild modules ``path`` imports when it is itself imported: top-level
    statements only (a function's lazy import and ``if TYPE_CHECKING:`` do not count)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    top: list[ast.stmt] = [node for node in tree.body
           if isinstance(node, (ast.Import, ast.ImportFrom, ast.Try))
           or (isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test))]
    module = ast.Module(body=top, type_ignores=[])
    probe = path.with_name(f".{path.name}.probe")
    probe.write_text(ast.unparse(module), encoding="utf-8")
    try:
        return {target for _line, target in imported_modules(probe, own)}
    finally:
        probe.unlink()


def module_path(module: str) -> Path | None:
    relative = Path(*module.split(".")[1:])
    for candidate in (PACKAGE / relative.with_suffix(".py"), PACKAGE / relative / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def loaded_with(module: str) -> set[str]:
    """Every sparkbuild module that importing ``module`` loads (its packages' too)."""
    seen: set[str] = set()
    pending = [module]
    while pending:
        name = pending.pop()
        parts = name.split(".")
        for end in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
            prefix = ".".join(parts[:end])
            path = module_path(prefix) if prefix != "sparkbuild" else PACKAGE / "__init__.py"
            if prefix in seen or path is None:
                continue
            seen.add(prefix)
            pending.extend(runtime_imports(path, prefix))
    return seen


@pytest.mark.parametrize("reader", ["sparkbuild.wheelhouse.verify",
                                    "sparkbuild.node.install"])
def test_reading_a_wheelhouse_loads_no_git_or_archive_code(reader: str) -> None:
    """verify and install run on air-gapped nodes: reading a lock or a manifest must not
    drag in the git, archive or patch machinery."""
    loaded = loaded_with(reader)
    assert "sparkbuild.wheelhouse.lock" in loaded and "sparkbuild.wheelhouse.manifest" in loaded
    heavy = sorted(m for m in loaded if m.startswith(("sparkbuild.sources.git",
                                                      "sparkbuild.sources.archive",
                                                      "sparkbuild.sources.fetch",
                                                      "sparkbuild.patches",
                                                      "sparkbuild.checks",
                                                      "sparkbuild.compile")))
    assert heavy == []
