"""``wheel --targets``: the extensions the package imports whatever runs, never left out.

vLLM 0.20.0's ``vllm/platforms/cuda.py`` imports ``vllm._C`` and ``vllm._C_stable_libtorch``
at module level, and every ``LLM`` or server start resolves the CUDA platform through it. A
wheel built with ``--targets _C`` installs, imports (``import vllm`` does not reach the
platform) and passes ``pip check``, then fails at the first start with ``No module named
'vllm._C_stable_libtorch'``, after a build of some 14 minutes. So before anything compiles,
the package's Python files are read (``ast``, no import): an extension of the tree's
setup.py that some module imports unconditionally at its top level (not inside ``try``,
``if``, a function or a class) and that ``--targets`` leaves out is refused, with the file
and line that import it.

So is a build that leaves out every extension a module's own refusal names: a build with
``--targets _C,_C_stable_libtorch`` installs, and its first start fails in the model's
import with ``vllm.vllm_flash_attn requires the CUDA flash attention
extensions (_vllm_fa2_C or _vllm_fa3_C)``, raised at module level by
``vllm/vllm_flash_attn/__init__.py`` (under an ``if``), which the CUDA attention path
imports.  A ``raise ImportError`` of a module body, or of an ``if`` there, whose message
names extensions of setup.py, is read as "this module needs one of them".
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sparkbuild.checks.ext_targets import required_targets
from sparkbuild.console import warn
from sparkbuild.errors import UsageError
from sparkbuild.sources.module_imports import import_refusals, top_level_imports

_EXTENSION = re.compile(r"""CMakeExtension\(\s*(?:name\s*=\s*)?["']([\w.]+)["']""")


def setup_extensions(tree: Path) -> list[str]:
    """The dotted names of the CMake extensions the tree's setup.py lists, in its order."""
    try:
        setup = (tree / "setup.py").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return list(dict.fromkeys(_EXTENSION.findall(setup)))


@dataclass(frozen=True)
class LeftOut:
    """What ``--targets`` leaves out that a start needs, and where the package says so."""

    names: tuple[str, ...]
    """One extension imported at module level, or every extension a refusal names."""
    refused: bool
    """True for a module's own ``raise ImportError`` (it needs one of ``names``)."""
    where: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.names[0] if len(self.names) == 1 else f"one of {', '.join(self.names)}"


def _package_sources(tree: Path, packages: set[str]) -> Iterator[tuple[str, bytes]]:
    """(tree-relative path, bytes) of every ``.py`` file of ``packages``."""
    for package in sorted(packages):
        for path in sorted((tree / package).rglob("*.py")):
            try:
                yield path.relative_to(tree).as_posix(), path.read_bytes()
            except OSError:
                continue


def _left_out(tree: Path, targets: tuple[str, ...]) -> list[LeftOut]:
    """One reading of the package's files: the extensions ``targets`` leaves out that
    some module imports unconditionally at module level, and the refusals (a module-level
    ``raise ImportError`` whose message names extensions) of which it leaves out all."""
    if not targets:
        return []
    kept = set(required_targets(tree, targets))
    every = setup_extensions(tree)
    left = {name for name in every if name.rsplit(".", 1)[-1] not in kept}
    lasts = {name.rsplit(".", 1)[-1]: name for name in every}
    left_lasts = [name.rsplit(".", 1)[-1].encode() for name in left]
    imports: dict[str, LeftOut] = {}
    refusals: dict[tuple[str, ...], LeftOut] = {}
    for relative, source in _package_sources(tree, {name.split(".")[0] for name in every}):
        if not any(last in source for last in left_lasts):
            continue  # cheap: most files name none of the left-out extensions
        for imported in top_level_imports(source, relative):
            if imported.name in left:
                imports.setdefault(imported.name, LeftOut((imported.name,), refused=False)
                                   ).where.append(f"{relative}:{imported.line}")
        if b"ImportError" not in source:
            continue  # a refusal counts only when it names a left-out extension
        for line, message in import_refusals(source, relative):
            named = tuple(name for last, name in lasts.items()
                          if re.search(rf"\b{last}\b", message))
            if named and all(name in left for name in named):
                refusals.setdefault(named, LeftOut(named, refused=True)
                                    ).where.append(f"{relative}:{line}")
    return [*imports.values(), *refusals.values()]


def left_out_at_start(tree: Path, targets: tuple[str, ...]) -> dict[str, list[str]]:
    """What ``targets`` leaves out that the package needs whatever runs, each with where:
    an extension imported unconditionally at module level, or every extension a module's
    own import refusal names (``one of A, B``); {} when ``targets`` is empty."""
    return {found.label: found.where for found in _left_out(tree, targets)}


def refuse_left_out_at_start(tree: Path, targets: tuple[str, ...], *,
                             allow: bool = False) -> None:
    """Refuse ``--targets`` that would give a wheel the package cannot start from; with
    ``allow`` (``--allow-unstartable``: a part of a build) say so and go on."""
    left = _left_out(tree, targets)
    if not left:
        return
    names = [found.names[0].rsplit(".", 1)[-1] for found in left]
    lines = [f"{found.label} ({'refused without it' if found.refused else 'imported'} at "
             f"{', '.join(found.where)})" for found in left]
    if allow:
        warn("--allow-unstartable: this wheel cannot start (a part of a build): it leaves "
             "out " + "; ".join(lines))
        return
    raise UsageError(
        f"--targets leaves out {len(left)} extension(s) the package imports at module "
        "level, so the wheel would install and then fail at its first start:\n  "
        + "\n  ".join(lines),
        where=str(tree / left[0].where[0]),
        hint=f"add them: --targets {','.join([*targets, *names])} (or, for a part of a "
        "build that no node installs, --allow-unstartable)")
