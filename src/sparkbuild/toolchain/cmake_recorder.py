"""Ask a tree's own CMake what it would build and fetch, without configuring a build.

A real configure of vLLM needs a CUDA build of torch and clones about ten repositories
from GitHub, so it cannot run here or on an air-gapped machine.  Yet the per-file flags
and the list of dependencies are decided by CMake code in the tree, and reproducing that
logic in Python would go stale with the next vLLM release.  So sparkbuild runs the tree's
CMakeLists.txt in CMake's script mode (``cmake -P build_tools/cmake_recorder.cmake``),
with the commands that need a configured project (``add_library``, ``target_*``,
``FetchContent_*``, ...) replaced by functions that record their arguments.  The tree's
own code (arch lists, ``set_gencode_flags_for_srcs``, ``cmake/external_projects/*``) runs
for real, and so do the parts of torch's installed CMake that decide the CUDA flags.  This
is sparkbuild's one CMake evaluator: ``check`` reads compile commands from it and
``vendor`` reads the FetchContent sources.

Configure-time generators (the tree's Python scripts run by ``execute_process``) run only
when ``run_generators`` is set, which callers do on a scratch copy of the tree: they write
next to themselves.  A ``FATAL_ERROR`` is recorded; with ``stop_at_fatal`` it ends the file
or function that raised it, as the real configure would stop there.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from sparkbuild.errors import ToolchainError
from sparkbuild.proc import run
from sparkbuild.records import one_of
from sparkbuild.resources import build_tools_dir
from sparkbuild.toolchain import tools

if TYPE_CHECKING:
    from collections.abc import Mapping

RECORDER_SCRIPT = "cmake_recorder.cmake"
SCOPE_KEYWORDS = frozenset({"PRIVATE", "PUBLIC", "INTERFACE", "BEFORE", "AFTER", "SYSTEM"})
_COMMAND_CALL = re.compile(r"^[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*\(", re.MULTILINE)
_CMAKE_SKIP_DIRS = frozenset({".git", ".sparkbuild", "build", "_deps", ".deps", "CMakeFiles",
                              "tests", "docs"})
"""Not the tree's own CMake code: builds and what a configure writes into the tree.  vLLM's
setup.py sets ``FETCHCONTENT_BASE_DIR`` to the tree's ``.deps``, where the configure
writes each dependency's binary directory (CUTLASS's ``cmake_install.cmake``, its
package config files); counted, they made every kept plan and forecast of a warm rebuild
miss (vendor 27.6 s and forecast 14.0 s of a 153 s warm rebuild)."""


@dataclass(frozen=True)
class RecordInputs:
    """What the recorded configure is told about the machine (what find_package says)."""

    tree: Path
    binary_dir: Path
    cmake: Path
    python: Path
    python_version: str
    python_include: Path
    cuda_version: str
    cuda_root: Path
    arch_list: str
    """TORCH_CUDA_ARCH_LIST, e.g. ``12.1a``."""
    torch_version: str
    torch_includes: tuple[Path, ...]
    cxx_version: str
    torch_cmake_dir: Path | None = None
    """torch's ``share/cmake``: when given, torch's own CMake decides CMAKE_CUDA_FLAGS."""
    gencode: str = ""
    """CMAKE_CUDA_FLAGS when torch's CMake is not at hand (see :func:`gencode_for`)."""
    build_type: str = "RelWithDebInfo"
    """vLLM's setup.py default."""
    processor: str = "x86_64"
    device: str = "cuda"
    """VLLM_TARGET_DEVICE."""
    run_generators: bool = False
    stop_at_fatal: bool = True
    cpuinfo: Path | None = None
    """A file read in place of /proc/cpuinfo (the CPU features of the assumed machine)."""
    fetch_sources: Mapping[str, Path] = field(default_factory=dict)
    defines: Mapping[str, str] = field(default_factory=dict)
    """More ``-D`` values, as CMAKE_ARGS would pass them."""
    env: Mapping[str, str] = field(default_factory=dict)
    clear_env: tuple[str, ...] = ()
    """Environment variables the recorded configure must not see."""
    follow_fetched: tuple[str, ...] = ()
    """Fetched projects (FetchContent names) whose own CMakeLists.txt is read once they are
    made available: those that define extension targets of the tree."""


TargetKind = Literal["STATIC", "SHARED", "MODULE", "OBJECT", "INTERFACE"]
"""What ``add_library`` makes (the recorder writes the same words)."""
TARGET_KINDS: tuple[TargetKind, ...] = ("STATIC", "SHARED", "MODULE", "OBJECT", "INTERFACE")


@dataclass
class TargetRecord:
    name: str
    sources: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    definitions: list[str] = field(default_factory=list)
    includes: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    kind: TargetKind = "STATIC"
    sabi: str = ""


@dataclass(frozen=True)
class FetchDeclaration:
    """One FetchContent_Declare, or FetchContent_Populate with its full signature."""

    name: str
    method: str
    """``declare`` or ``populate``."""
    where: str
    """``FILE:LINE`` of the call."""
    args: tuple[str, ...]


@dataclass
class BuildRecord:
    """Everything the tree's CMake declared, as CMake lists (generator expressions kept)."""

    targets: dict[str, TargetRecord] = field(default_factory=dict)
    imported: dict[str, dict[str, str]] = field(default_factory=dict)
    """Imported targets (torch's) and their properties."""
    source_properties: dict[str, dict[str, str]] = field(default_factory=dict)
    directory: dict[str, list[str]] = field(default_factory=dict)
    variables: dict[str, str] = field(default_factory=dict)
    fetches: dict[str, dict[str, str]] = field(default_factory=dict)
    declarations: list[FetchDeclaration] = field(default_factory=list)
    fatals: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    generators: list[str] = field(default_factory=list)
    unknown_commands: list[str] = field(default_factory=list)
    toolchain_problems: list[str] = field(default_factory=list)
    custom_targets: dict[str, bool] = field(default_factory=dict)
    """``add_custom_target`` names -> whether the target runs anything (COMMAND/DEPENDS)."""
    followed: dict[str, str] = field(default_factory=dict)
    """Fetched projects whose CMakeLists.txt was read -> their source directory."""
    installs: dict[str, list[str]] = field(default_factory=dict)
    """``install(... DESTINATION D COMPONENT C)``: component -> its destinations."""
    complete: bool = False
    """The run reached the end of the recorder script (no CMake error cut it short)."""

    def targets_of(self, source: str) -> list[TargetRecord]:
        return [target for target in self.targets.values() if source in target.sources]

    def sources(self) -> set[str]:
        return {source for target in self.targets.values() for source in target.sources}


def cmake_list(value: str) -> list[str]:
    return [item for item in value.split(";") if item]


def without_keywords(items: list[str]) -> list[str]:
    return [item for item in items if item not in SCOPE_KEYWORDS]


def gencode_for(archs: tuple[str, ...]) -> str:
    """``-gencode`` flags for a TORCH_CUDA_ARCH_LIST, for when torch's CMake is not at hand
    (``vendor`` on a machine without torch).  ``check`` always uses torch's own CMake."""
    flags = []
    for arch in archs:
        base = arch.replace("+PTX", "").replace(".", "")
        flags.append(f"-gencode arch=compute_{base},code=sm_{base}")
        if arch.endswith("+PTX"):
            flags.append(f"-gencode arch=compute_{base},code=compute_{base}")
    return " ".join(flags)


def _record_target(record: BuildRecord, name: str, key: str, value: str) -> None:
    target = record.targets.setdefault(name, TargetRecord(name))
    if key == "sources":
        target.sources.extend(s for s in cmake_list(value) if s not in target.sources)
    elif key == "sabi":
        target.sabi = value
    elif key == "kind":
        target.kind = one_of(value, TARGET_KINDS) or target.kind
    elif key in ("options", "definitions", "includes", "links"):
        getattr(target, key).extend(without_keywords(cmake_list(value)))


def call_line(path: Path, command: str, name: str, args: tuple[str, ...]) -> int | None:
    """The line of ``command(name ...)`` in ``path`` that matches ``args`` best.

    CMake tells a function the file it was called from, not the line; the call is found
    in the text: of several calls for ``name``, the one that names the same source kind
    (GIT_REPOSITORY, URL or SOURCE_DIR) as the recorded arguments."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    pattern = re.compile(rf"{command}\s*\(\s*\"?{re.escape(name)}\b", re.IGNORECASE)
    kinds = [k for k in ("GIT_REPOSITORY", "URL", "SOURCE_DIR") if k in args]
    best: int | None = None
    for match in pattern.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        rest = re.sub(r"#[^\n]*", "", text[match.end():match.end() + 4000])
        call = rest[:rest.find(")")]
        if kinds and kinds[0] in call:
            return line
        best = best or line
    return best


def _record_declaration(record: BuildRecord, name: str, key: str, value: str) -> None:
    method, _, file = key.partition("@")
    args = tuple(value.split(";"))
    command = "FetchContent_Declare" if method == "declare" else "FetchContent_Populate"
    line = call_line(Path(file), command, name, args)
    where = f"{file}:{line}" if line else file
    record.declarations.append(FetchDeclaration(name, method, where, args))


def _record_property(record: BuildRecord, name: str, key: str, value: str) -> None:
    if name in record.targets:
        record.targets[name].properties[key] = value
    else:
        record.imported.setdefault(name, {})[key] = value


def parse_record(text: str) -> BuildRecord:
    """Read the recorder's tab-separated lines: ``kind name key value``."""
    record = BuildRecord()
    for line in text.splitlines():
        parts = line.split("\t", 3)
        if len(parts) != 4:
            continue
        kind, name, key, value = parts
        if kind == "target":
            _record_target(record, name, key, value)
        elif kind == "tprop":
            _record_property(record, name, key, value)
        elif kind == "imported":
            record.imported.setdefault(name, {})
        elif kind == "source":
            record.source_properties.setdefault(name, {})[key] = value
        elif kind == "directory":
            record.directory.setdefault(key, []).extend(without_keywords(cmake_list(value)))
        elif kind == "variable":
            record.variables[name] = value
        elif kind == "fetch":
            record.fetches.setdefault(name, {})[key] = value
        elif kind == "declare":
            _record_declaration(record, name, key, value)
        elif kind == "fatal":
            record.fatals.append(value)
        elif kind == "skipped":
            record.skipped.append(f"{name}: {value}")
        elif kind == "generator":
            record.generators.append(name)
        elif kind == "unknown":
            record.unknown_commands.append(name)
        elif kind == "toolchain":
            record.toolchain_problems.append(value)
        elif kind == "custom":
            record.custom_targets[name] = record.custom_targets.get(name, False) or value == "ON"
        elif kind == "followed":
            record.followed[name.lower()] = value
        elif kind == "install":
            destinations = record.installs.setdefault(name, [])
            if value not in destinations:
                destinations.append(value)
        elif kind == "done":
            record.complete = True
    return record


def cmake_files(tree: Path) -> list[Path]:
    """CMakeLists.txt and *.cmake files of the tree itself (not tests, docs or builds).

    Linked directories are followed (``check``'s unpatched copy is mostly links into the
    scratch tree), each real directory once."""
    found: list[Path] = []
    seen: set[Path] = set()
    for root, dirs, files in os.walk(tree, followlinks=True):
        real = Path(root).resolve()
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if d not in _CMAKE_SKIP_DIRS)
        found += [Path(root, name) for name in sorted(files)
                  if name == "CMakeLists.txt" or name.endswith(".cmake")]
    return found


def called_commands(tree: Path) -> list[str]:
    """Names of every command the tree's own CMake files call (CMakeLists.txt, *.cmake)."""
    names: set[str] = set()
    for path in cmake_files(tree):
        names.update(_COMMAND_CALL.findall(path.read_text(encoding="utf-8", errors="replace")))
    names -= {"if", "elseif", "else", "endif", "foreach", "endforeach", "while", "endwhile",
              "function", "endfunction", "macro", "endmacro", "block", "endblock"}
    return sorted(names)


def _defines(inputs: RecordInputs) -> list[str]:
    values: dict[str, str | Path] = {
        "SB_TREE": inputs.tree,
        "SB_OUT": inputs.binary_dir / "record.tsv",
        "SB_BINARY_DIR": inputs.binary_dir,
        "SB_PYTHON": inputs.python,
        "SB_PYTHON_VERSION": inputs.python_version,
        "SB_PYTHON_INCLUDE": inputs.python_include,
        "SB_CUDA_VERSION": inputs.cuda_version,
        "SB_CUDA_ROOT": inputs.cuda_root,
        "SB_ARCH_LIST": inputs.arch_list,
        "SB_GENCODE": inputs.gencode,
        "SB_TORCH_VERSION": inputs.torch_version,
        "SB_TORCH_INCLUDES": ";".join(os.fspath(p) for p in inputs.torch_includes),
        "SB_TORCH_CMAKE_DIR": inputs.torch_cmake_dir or "",
        "SB_CXX_VERSION": inputs.cxx_version,
        "SB_BUILD_TYPE": inputs.build_type,
        "SB_PROCESSOR": inputs.processor,
        "SB_DEVICE": inputs.device,
        "SB_RUN_GENERATORS": "ON" if inputs.run_generators else "OFF",
        "SB_STOP_AT_FATAL": "ON" if inputs.stop_at_fatal else "OFF",
        "SB_CPUINFO": inputs.cpuinfo or "",
        "SB_CALLED_COMMANDS": ";".join(called_commands(inputs.tree)),
        "SB_CLEAR_ENV": ";".join(inputs.clear_env),
        "SB_FOLLOW_FETCHED": ";".join(name.lower() for name in inputs.follow_fetched),
        **inputs.defines,
    }
    for name, path in inputs.fetch_sources.items():
        values[f"FETCHCONTENT_SOURCE_DIR_{name.upper()}"] = path
    return [f"-D{key}={os.fspath(value)}" for key, value in values.items()]


def find_recorder_cmake() -> Path:
    """cmake for the recorder: vLLM's CMake files ask for 3.26 or newer."""
    cmake = tools.find_cmake()
    if cmake is None or (cmake.version is not None and cmake.version < tools.MIN_CMAKE):
        found = f"cmake {cmake.version} at {cmake.path}" if cmake else "no cmake"
        raise ToolchainError(f"cmake {tools.MIN_CMAKE} or newer is needed to read the tree's "
                             f"CMake; found {found}", hint="pip install 'cmake>=3.26'")
    return cmake.path


def record_build(inputs: RecordInputs, *, partial_ok: bool = False) -> BuildRecord:
    """Run the recorder over ``inputs.tree``; its output and log land in binary_dir.

    A CMake error that ends the run raises :class:`ToolchainError`, unless ``partial_ok``:
    then what was recorded before it is returned, with ``complete`` False.
    """
    inputs.binary_dir.mkdir(parents=True, exist_ok=True)
    log = inputs.binary_dir / "record.log"
    out = inputs.binary_dir / "record.tsv"
    result = run(
        [inputs.cmake, *_defines(inputs), "-P", build_tools_dir() / RECORDER_SCRIPT],
        cwd=inputs.tree, env=dict(inputs.env), log=log, echo=False, check=False, timeout=900,
    )
    record = parse_record(out.read_text(encoding="utf-8")) if out.is_file() else BuildRecord()
    if record.toolchain_problems:
        raise ToolchainError(record.toolchain_problems[0], where=f"full log: {log}",
                             hint="report the torch version; check needs torch's CUDA flags")
    if (result.returncode != 0 or not record.complete) and not partial_ok:
        tail = "\n".join(result.output.strip().splitlines()[-15:])
        raise ToolchainError(
            "could not read the tree's CMakeLists.txt in script mode:\n" + tail,
            where=f"full log: {log}",
            hint="the tree's CMake uses a command sparkbuild does not record yet; "
            "report it with the log",
        )
    return record
