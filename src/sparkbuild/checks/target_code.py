"""What the recorded CMake compiles of one extension target at the recipe's target archs.

One classification for the extension set (:mod:`sparkbuild.compile.extension_set`) and the
code forecast (:mod:`sparkbuild.checks.code_forecast`): CUDA units with native code for the
target (``partial``: some lack it, which the forecast names unit by unit), CUDA units none of
which the tree's arch lists give a ``-gencode`` for the target (vllm-flash-attn's FA3 at
12.1a: ``FA3_ARCHS`` is empty, so its 192 units would compile for no arch the tree means),
host code only, Python files only (a custom target that installs), nothing (an empty custom
target), defined by a fetched project whose CMake was not read, or no target at all.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from sparkbuild.checks.check_plan import unit_key
from sparkbuild.checks.touched_units import cuda_units
from sparkbuild.toolchain import sass
from sparkbuild.toolchain.compile_flags import gencode_codes

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sparkbuild.toolchain.cmake_recorder import BuildRecord

ArchFact = Literal["native", "partial", "no_code", "host", "python", "empty", "fetched",
                   "undefined"]


def native_for(codes: tuple[str, ...], archs: Sequence[str]) -> bool:
    """The gencode values give every target arch native machine code."""
    sass_codes, ptx = gencode_codes(codes)
    return all(sass.classify_kernel(sass.KernelCode("unit", sass_codes, ptx),
                                    sass.target_name(arch)).kind == sass.NATIVE
               for arch in archs)


def _defined_by_fetched(record: BuildRecord, target: str) -> bool:
    """A file that declares a dependency and adds its project (``FetchContent_MakeAvailable``)
    names the target without defining it (no ``CALL(target`` there): the fetched project's
    CMake does (vllm_flash_attn.cmake names ``_vllm_fa2_C``; CMakeLists.txt, which names
    ``_C`` too, defines it for other devices)."""
    for declaration in record.declarations:
        path = Path(declaration.where.rsplit(":", 1)[0])
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        name = re.escape(target)
        if ("FetchContent_MakeAvailable" in text
                and re.search(rf"(?<![\w.]){name}(?![\w.])", text)
                and not re.search(rf"\w+\(\s*{name}(?![\w.])", text)):
            return True  # named, made available, and no call of this file defines it
    return False


def target_arch_fact(record: BuildRecord, tree: Path, target: str, archs: Sequence[str],
                     codes: Mapping[str, tuple[str, ...]]) -> tuple[ArchFact, int, int]:
    """(what the target compiles, its CUDA units, how many of them are native)."""
    if target in record.targets:
        units = [unit_key(s, tree) for s in cuda_units(set(record.targets[target].sources))]
        if not units:
            return "host", 0, 0
        given = [unit for unit in units if codes.get(unit)]
        per_source = any(codes.values())
        if not given and per_source:
            return "no_code", len(units), 0
        native = sum(1 for unit in given if native_for(codes[unit], archs))
        fact: ArchFact = "native" if native == len(units) or not per_source else "partial"
        return fact, len(units), native
    if target in record.custom_targets:
        if record.custom_targets[target]:
            return "host", 0, 0
        return ("python" if record.installs.get(target) else "empty"), 0, 0
    if _defined_by_fetched(record, target):
        return "fetched", 0, 0
    return "undefined", 0, 0
