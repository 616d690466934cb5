"""Before a node installs a wheelhouse: can its built package start at all?

A wheelhouse of vLLM 0.20.0 built with ``--targets _C`` verifies, installs, passes
``pip check`` and ``import vllm``, and then fails at the first start with
``No module named 'vllm._C_stable_libtorch'``: ``vllm/platforms/cuda.py`` imports it at
module level and every start resolves the CUDA platform.  ``wheel --targets`` refuses
such a build (:mod:`sparkbuild.checks.start_imports`), but a node installs wheelhouses from
anywhere: ones no such check judged, and parts built with ``--allow-unstartable``.

So ``install`` reads each built wheel's Python files from the verified archive (``ast``,
no import, no process) and follows, from the modules a start imports, every unconditional
module-level import into the wheel's own packages: a module reached that way and absent
from the wheel (no ``.py``, no package directory, no compiled extension of that name) is
an import that fails at every start, so the wheelhouse is refused before the venv is
touched.  The start modules are the wheel's top-level packages, the modules of its console
scripts, and those the recipe names (``[node] start_modules``, recorded in the manifest as
``build.start_modules``: vLLM resolves its platform module at run time, so the recipes
name ``vllm.platforms.cuda``).  Only what is certainly imported is followed (not inside
``try``, ``if``, a function or a class), so a finding is a certain failure, never a guess.

vLLM 0.20.0's own wheel from the index reaches no missing module; with
``_C_stable_libtorch.abi3.so`` taken out it reaches exactly one, through
``vllm/platforms/cuda.py:22``.
"""

from __future__ import annotations

import configparser
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from sparkbuild.errors import VerifyError
from sparkbuild.sources.module_imports import top_level_imports

_NATIVE = (".so", ".pyd")


def _is_metadata(name: str) -> bool:
    return name.split("/", 1)[0].endswith((".dist-info", ".data"))


def _prefixes(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts) + 1)]


def provided_modules(names: Iterable[str]) -> set[str]:
    """The dotted modules an archive's file list provides: ``.py`` files, package
    directories (namespace packages included) and compiled extensions (``x.abi3.so``,
    ``x.cpython-312-x86_64-linux-gnu.so``)."""
    found: set[str] = set()
    for name in names:
        if _is_metadata(name):
            continue
        parts = PurePosixPath(name).parts
        found.update(".".join(parts[:end]) for end in range(1, len(parts)))
        leaf = parts[-1]
        if leaf.endswith(".py") and leaf != "__init__.py":
            found.add(".".join([*parts[:-1], leaf[:-3]]))
        elif leaf.endswith(_NATIVE):
            found.add(".".join([*parts[:-1], leaf.split(".", 1)[0]]))
    return found


def _python_files(names: Iterable[str]) -> dict[str, str]:
    """Module -> the member that holds its code (``a/b/__init__.py`` for package ``a.b``)."""
    files: dict[str, str] = {}
    for name in names:
        if name.endswith(".py") and not _is_metadata(name):
            parts = PurePosixPath(name).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = name
    return files


def console_modules(archive: zipfile.ZipFile, names: Iterable[str]) -> list[str]:
    """The modules the wheel's console scripts start from (``entry_points.txt``)."""
    points = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/entry_points.txt")]
    if not points:
        return []
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(archive.read(points[0]).decode("utf-8", "replace"))
    if not parser.has_section("console_scripts"):
        return []
    return sorted({value.split(":", 1)[0].strip() for value in
                   parser["console_scripts"].values()})


def unresolved_start_imports(wheel: Path, start_modules: Iterable[str] = ()
                             ) -> dict[str, list[str]]:
    """Modules of the wheel's own packages that a start certainly imports and the wheel
    lacks, each with where (``path:line``, or ``start module`` for a named one)."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
        provided, files = provided_modules(names), _python_files(names)
        packages = {n.split("/", 1)[0] for n in names
                    if n.count("/") == 1 and n.endswith("/__init__.py")}
        missing: dict[str, list[str]] = {}
        seen: set[str] = set()
        queue: list[str] = []

        def reach(name: str, where: str) -> None:
            for prefix in _prefixes(name):  # importing a.b.c imports a and a.b first
                if prefix not in provided:
                    missing.setdefault(prefix, []).append(where)
                    return
                if prefix not in seen:
                    seen.add(prefix)
                    queue.append(prefix)

        for module in [*sorted(packages), *console_modules(archive, names), *start_modules]:
            if module.split(".", 1)[0] in packages:
                reach(module, "start module")
        while queue:
            module = queue.pop()
            member = files.get(module)
            if member is None:  # a compiled extension or a namespace directory
                continue
            package = module if member.endswith("/__init__.py") else module.rpartition(".")[0]
            for imported in top_level_imports(archive.read(member), member, package):
                if imported.name.split(".", 1)[0] not in packages:
                    continue
                # from M import N follows N only where N is a submodule (else a name M binds)
                if imported.module or imported.name in provided:
                    reach(imported.name, f"{member}:{imported.line}")
    return missing


def start_modules_of(manifest: Mapping[str, Any]) -> list[str]:
    """The start modules a wheelhouse's recipe named (``[node] start_modules``)."""
    settings = manifest.get("build") or {}
    named = settings.get("start_modules") if isinstance(settings, dict) else None
    return [str(m) for m in named] if isinstance(named, list) else []


def refuse_unstartable(wheels: Iterable[Path], start_modules: Iterable[str] = ()) -> None:
    """Raise :class:`VerifyError` for the first built wheel a start of which certainly
    imports a module of its own package that it does not hold (nothing is installed yet)."""
    named = list(start_modules)
    for wheel in wheels:
        missing = unresolved_start_imports(wheel, named)
        if not missing:
            continue
        lines = [f"{name} (imported at {', '.join(where)})" for name, where in missing.items()]
        raise VerifyError(
            f"{wheel.name} lacks {len(missing)} module(s) that its package imports whenever "
            "it starts, so it would install and then fail at its first start:\n  "
            + "\n  ".join(lines),
            where=str(wheel),
            hint="a wheel built with --targets that left an extension out (a part, "
            "--allow-unstartable): rebuild the wheelhouse with those targets "
            "(`sparkbuild wheel --targets ...`) or without --targets; nothing was installed")
