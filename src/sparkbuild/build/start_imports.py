"""``wheel --targets``: the extensions the package imports whatever runs, never left out.

vLLM 0.20.0's ``vllm/platforms/cuda.py`` imports ``vllm._C`` and ``vllm._C_stable_libtorch``
at module level, and every ``LLM`` or server start resolves the CUDA platform through it.
A wheel built with ``--targets _C`` installs, imports (``import vllm`` does not reach the
platform) and passes ``pip check``, then fails at the first start with ``No module named
'vllm._C_stable_libtorch'`` (measured on the device machine, session 14, after a 859 s
build).  So before anything compiles, the package's Python files are read (``ast``, no
import): an extension of the tree's setup.py that some module imports unconditionally at
its top level (not inside ``try``, ``if``, a function or a class) and that ``--targets``
leaves out is refused, with the file and line that import it.

So is a build that leaves out every extension a module's own refusal names: session 15's
device build (``--targets _C,_C_stable_libtorch``) installed, and its first start failed
in the model's import with ``vllm.vllm_flash_attn requires the CUDA flash attention
extensions (_vllm_fa2_C or _vllm_fa3_C)``, raised at module level by
``vllm/vllm_flash_attn/__init__.py`` (under an ``if``), which the CUDA attention path
imports.  A ``raise ImportError`` of a module body, or of an ``if`` there, whose message
names extensions of setup.py, is read as "this module needs one of them".
"""

from __future__ import annotations

import re
from pathlib import Path

from sparkbuild.build.ext_targets import required_targets
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


def module_level_imports(tree: Path, modules: list[str]) -> dict[str, list[str]]:
    """For each dotted module name in ``modules``: where the package imports it at module
    level, unconditionally (``path:line``, relative to ``tree``)."""
    wanted = set(modules)
    packages = sorted({name.split(".")[0] for name in modules})
    lasts = {name.rsplit(".", 1)[-1].encode() for name in modules}
    found: dict[str, list[str]] = {}
    for package in packages:
        for path in sorted((tree / package).rglob("*.py")):
            try:
                source = path.read_bytes()
            except OSError:
                continue
            if not any(last in source for last in lasts):
                continue  # cheap: most files name none of them
            for imported in top_level_imports(source, str(path)):
                if imported.name in wanted:
                    where = f"{path.relative_to(tree).as_posix()}:{imported.line}"
                    found.setdefault(imported.name, []).append(where)
    return found


def refusals_without(tree: Path, extensions: list[str]) -> dict[str, list[str]]:
    """Modules of the package that refuse to be imported (``raise ImportError`` at module
    level, under ``if`` or not) with a message naming some of ``extensions`` by their last
    part: ``"one of A, B"`` -> where (``path:line``)."""
    lasts = {name.rsplit(".", 1)[-1]: name for name in extensions}
    found: dict[str, list[str]] = {}
    for package in sorted({name.split(".")[0] for name in extensions}):
        for path in sorted((tree / package).rglob("*.py")):
            try:
                source = path.read_bytes()
            except OSError:
                continue
            if b"ImportError" not in source or not any(k.encode() in source for k in lasts):
                continue
            where = path.relative_to(tree).as_posix()
            for line, message in import_refusals(source, str(path)):
                named = [lasts[last] for last in lasts if re.search(rf"\b{last}\b", message)]
                if named:
                    label = named[0] if len(named) == 1 else f"one of {', '.join(named)}"
                    found.setdefault(label, []).append(f"{where}:{line}")
    return found


def left_out_at_start(tree: Path, targets: tuple[str, ...]) -> dict[str, list[str]]:
    """What ``targets`` leaves out that the package needs whatever runs, each with where:
    an extension imported unconditionally at module level, or every extension a module's
    own import refusal names (``one of A, B``); {} when ``targets`` is empty."""
    if not targets:
        return {}
    kept = set(required_targets(tree, targets))
    every = setup_extensions(tree)
    left = [name for name in every if name.rsplit(".", 1)[-1] not in kept]
    found = module_level_imports(tree, left)
    refused = refusals_without(tree, every)
    for label, where in refused.items():
        names = label.removeprefix("one of ").split(", ")
        if all(name in left for name in names):
            found[label] = where
    return found


def _first_name(label: str) -> str:
    return label.removeprefix("one of ").split(", ")[0].rsplit(".", 1)[-1]


def refuse_left_out_at_start(tree: Path, targets: tuple[str, ...], *,
                             allow: bool = False) -> None:
    """Refuse ``--targets`` that would give a wheel the package cannot start from; with
    ``allow`` (``--allow-unstartable``: a part of a build) say so and go on."""
    left = left_out_at_start(tree, targets)
    if not left:
        return
    names = [_first_name(label) for label in left]
    lines = [f"{name} ({'refused without it' if name.startswith('one of ') else 'imported'} "
             f"at {', '.join(where)})" for name, where in left.items()]
    if allow:
        warn("--allow-unstartable: this wheel cannot start (a part of a build): it leaves "
             "out " + "; ".join(lines))
        return
    raise UsageError(
        f"--targets leaves out {len(left)} extension(s) the package imports at module "
        "level, so the wheel would install and then fail at its first start:\n  "
        + "\n  ".join(lines),
        where=str(tree / next(iter(left.values()))[0]),
        hint=f"add them: --targets {','.join([*targets, *names])} (or, for a part of a "
        "build that no node installs, --allow-unstartable)")
