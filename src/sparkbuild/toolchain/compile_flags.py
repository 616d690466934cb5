"""Turn a recorded CMake declaration into the nvcc command line CMake would generate.

CMake's Ninja generator builds a CUDA object as ``nvcc -forward-unknown-to-host-compiler
DEFINES INCLUDES FLAGS -x cu -c SRC -o OBJ`` where DEFINES hold ``<target>_EXPORTS`` for a
shared library or module and the interface definitions of the libraries it links (torch's
``USE_DISTRIBUTED``, ...), FLAGS are CMAKE_CUDA_FLAGS (what torch's CMake put there), the
build type's flags, the language standard, ``-Xcompiler=-fPIC`` for a module, then the
target's and the source's COMPILE_OPTIONS with generator expressions evaluated for the CUDA
language.  This module does the same from a :class:`BuildRecord`, so that ``check``
compiles a unit the way the real build will.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.toolchain.cmake_recorder import cmake_list

if TYPE_CHECKING:
    from sparkbuild.toolchain.cmake_recorder import BuildRecord, TargetRecord

BUILD_TYPE_FLAGS = {
    "Release": ["-O3", "-DNDEBUG"],
    "RelWithDebInfo": ["-O2", "-g", "-DNDEBUG"],
    "MinSizeRel": ["-O1", "-DNDEBUG"],
    "Debug": ["-g"],
}
"""CMake's defaults for nvcc (Modules/Compiler/NVIDIA-CUDA.cmake)."""


class UnsupportedGenex(ValueError):
    """A generator expression this evaluator does not know."""


def _apply(content: str, language: str) -> str:
    head, sep, body = content.partition(":")
    if head == "COMPILE_LANGUAGE" and sep:
        return "1" if language in body.split(",") else "0"
    if head in ("0", "1") and sep:
        return body if head == "1" else ""
    if head == "BOOL" and sep:
        return "0" if body.upper() in ("", "0", "OFF", "NO", "FALSE", "N", "IGNORE") else "1"
    if head == "NOT" and sep:
        return "1" if body == "0" else "0"
    if head in ("AND", "OR") and sep:
        values = body.split(",")
        return "1" if (all if head == "AND" else any)(v == "1" for v in values) else "0"
    raise UnsupportedGenex(f"$<{content}>")


def _parse(text: str, start: int, language: str) -> tuple[str, int]:
    """Evaluate the expression whose content starts at ``start``; return it and the end."""
    parts: list[str] = []
    index = start
    while index < len(text):
        if text.startswith("$<", index):
            value, index = _parse(text, index + 2, language)
            parts.append(value)
        elif text[index] == ">":
            return _apply("".join(parts), language), index + 1
        else:
            parts.append(text[index])
            index += 1
    raise UnsupportedGenex(f"unterminated generator expression in {text!r}")


def evaluate_genex(text: str, language: str) -> str:
    """Evaluate the COMPILE_LANGUAGE family of generator expressions in ``text``."""
    out: list[str] = []
    index = 0
    while index < len(text):
        if text.startswith("$<", index):
            value, index = _parse(text, index + 2, language)
            out.append(value)
        else:
            out.append(text[index])
            index += 1
    return "".join(out)


def evaluated_list(items: list[str], language: str) -> list[str]:
    """A CMake list property as the generator sees it: joined, evaluated, split."""
    return cmake_list(evaluate_genex(";".join(items), language))


def _absolute(path: str, tree: Path) -> str:
    return path if Path(path).is_absolute() else os.fspath(tree / path)


def _definition_flags(items: list[str]) -> list[str]:
    return [f"-D{item.removeprefix('-D')}" for item in items]


def sabi_definition(sabi: str) -> list[str]:
    """``Python_add_library(... USE_SABI 3.11)`` defines Py_LIMITED_API like FindPython."""
    if not sabi:
        return []
    major, _, minor = sabi.partition(".")
    if not minor:
        return [f"-DPy_LIMITED_API={major}"]
    return [f"-DPy_LIMITED_API=0x{int(major):02X}{int(minor):02X}0000"]


_TARGET_PROPERTY = re.compile(r"\$<TARGET_PROPERTY:([^,>]+),[A-Z_]+>")


def linked_interface(record: BuildRecord, target: TargetRecord, prop: str) -> list[str]:
    """``prop`` (INTERFACE_COMPILE_DEFINITIONS, ...) of every imported target ``target``
    links, followed through INTERFACE_LINK_LIBRARIES and ``$<TARGET_PROPERTY:...>``."""
    found: list[str] = []
    seen: set[str] = set()
    pending = [name for name in target.links if name in record.imported]
    while pending:
        name = pending.pop(0)
        if name in seen:
            continue
        seen.add(name)
        props = record.imported.get(name, {})
        for item in cmake_list(props.get(prop, "")):
            if "$<" not in item and item not in found:
                found.append(item)
        text = ";".join(props.values())
        pending += [n for n in _TARGET_PROPERTY.findall(text) if n in record.imported]
        pending += [n for n in cmake_list(props.get("INTERFACE_LINK_LIBRARIES", ""))
                    if n in record.imported]
    return found


@dataclass(frozen=True)
class UnitCommand:
    source: str
    target: str
    argv: tuple[str, ...]
    gencode: tuple[str, ...]
    """The ``arch=...,code=...`` values nvcc will compile for."""


def gencode_of(flags: list[str]) -> tuple[str, ...]:
    found = []
    for index, flag in enumerate(flags):
        if flag in ("-gencode", "--generate-code") and index + 1 < len(flags):
            found.append(flags[index + 1])
        elif flag.startswith(("-gencode=", "--generate-code=")):
            found.append(flag.split("=", 1)[1])
    return tuple(found)


def _includes(record: BuildRecord, target: TargetRecord, source: str, tree: Path) -> list[str]:
    local = [*record.directory.get("includes", []), *target.includes]
    props = record.source_properties.get(source, {})
    local += cmake_list(props.get("INCLUDE_DIRECTORIES", ""))
    flags = [f"-I{_absolute(path, tree)}" for path in evaluated_list(local, "CUDA")]
    for path in record.directory.get("system_includes", []):
        flags += ["-isystem", path]
    return flags


def _options(record: BuildRecord, target: TargetRecord, source: str) -> list[str]:
    props = record.source_properties.get(source, {})
    options = evaluated_list(record.directory.get("options", []), "CUDA")
    options += evaluated_list(target.options, "CUDA")
    options += evaluated_list(cmake_list(target.properties.get("COMPILE_OPTIONS", "")), "CUDA")
    options += linked_interface(record, target, "INTERFACE_COMPILE_OPTIONS")
    options += evaluated_list(cmake_list(props.get("COMPILE_OPTIONS", "")), "CUDA")
    options += shlex.split(props.get("COMPILE_FLAGS", ""))
    return options


def unit_command(
    record: BuildRecord,
    target: TargetRecord,
    source: str,
    *,
    tree: Path,
    nvcc: Path,
    obj: Path,
    build_type: str,
    extra_system_includes: list[Path],
) -> UnitCommand:
    """The nvcc command CMake's Ninja generator would run for ``source`` in ``target``."""
    props = record.source_properties.get(source, {})
    exports = [f"{target.name}_EXPORTS"] if target.kind in ("SHARED", "MODULE") else []
    definitions = [*exports, *record.directory.get("definitions", []), *target.definitions]
    definitions += cmake_list(target.properties.get("COMPILE_DEFINITIONS", ""))
    definitions += linked_interface(record, target, "INTERFACE_COMPILE_DEFINITIONS")
    definitions += cmake_list(props.get("COMPILE_DEFINITIONS", ""))
    standard = record.variables.get("CMAKE_CUDA_STANDARD") or "17"
    flags = [
        *cmake_list(record.variables.get("CMAKE_CUDA_FLAGS", "").replace(" ", ";")),
        *BUILD_TYPE_FLAGS.get(build_type, []),
        f"-std=c++{standard}",
        "-Xcompiler=-fPIC",
        *_options(record, target, source),
    ]
    argv = [
        os.fspath(nvcc), "-forward-unknown-to-host-compiler",
        *_definition_flags(evaluated_list(definitions, "CUDA")),
        *sabi_definition(target.sabi),
        *_includes(record, target, source, tree),
        *[flag for path in extra_system_includes for flag in ("-isystem", os.fspath(path))],
        *flags,
        "-x", "cu", "-c", _absolute(source, tree), "-o", os.fspath(obj),
    ]
    return UnitCommand(source, target.name, tuple(argv), gencode_of(flags))


def source_gencode(record: BuildRecord, target: TargetRecord, source: str) -> tuple[str, ...]:
    """The ``arch=...,code=...`` values the build compiles ``source`` for (no paths needed)."""
    flags = cmake_list(record.variables.get("CMAKE_CUDA_FLAGS", "").replace(" ", ";"))
    return gencode_of([*flags, *_options(record, target, source)])


_CODE_VALUE = re.compile(r"code=(\[[^\]]*\]|\"[^\"]*\"|'[^']*'|[^,\s]+)")


def gencode_codes(gencode: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(SASS targets, PTX virtual archs) that ``-gencode`` values make nvcc embed:
    ``arch=compute_80,code=[sm_80,compute_80]`` -> (``sm_80``,), (``compute_80``,)."""
    sass: list[str] = []
    ptx: list[str] = []
    for value in gencode:
        found = _CODE_VALUE.search(value)
        if found is None:
            continue
        for code in re.split(r"[,\s]+", found.group(1).strip("[]\"'")):
            if code.startswith("sm_") and code not in sass:
                sass.append(code)
            elif code.startswith("compute_") and code not in ptx:
                ptx.append(code)
    return tuple(sass), tuple(ptx)
