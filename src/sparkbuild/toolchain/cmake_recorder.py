"""Ask a tree's own CMakeLists.txt what it would compile, without configuring a build.

A real configure of vLLM needs a CUDA build of torch and clones about ten repositories
from GitHub, so it cannot run here or on an air-gapped machine.  Yet the per-file flags
-- which arch each kernel is compiled for, the ``-D`` switches, the include directories,
torch's header hot-fix -- are decided by CMake code in the tree, and reproducing that
logic in Python would go stale with the next vLLM release.  So sparkbuild runs the
tree's CMakeLists.txt in CMake's script mode (``cmake -P``), with the commands that need
a configured project (``add_library``, ``target_*``, ``FetchContent_*``, ...) replaced by
functions that record their arguments.  The tree's own arch-list code
(``cuda_archs_loose_intersection``, ``set_gencode_flags_for_srcs``) runs for real.

What is not executed: generator scripts (they write into the source tree), external
projects under ``cmake/external_projects/`` (their targets are not the series'), and the
fetching of sources (CUTLASS comes from ``VLLM_CUTLASS_SRC_DIR`` or
``FETCHCONTENT_SOURCE_DIR_CUTLASS`` when given).  A ``FATAL_ERROR`` is recorded and ends
the file or function that raised it, so that everything declared before it is reported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkbuild.errors import ToolchainError
from sparkbuild.proc import run

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

RECORDER = r"""
# Written by sparkbuild (cmake_record.py): run a CMakeLists.txt in script mode, recording.
set(CMAKE_SOURCE_DIR "${SB_TREE}")
set(CMAKE_CURRENT_SOURCE_DIR "${SB_TREE}")
set(CMAKE_BINARY_DIR "${SB_BINARY_DIR}")
set(CMAKE_CURRENT_BINARY_DIR "${SB_BINARY_DIR}")
set(FETCHCONTENT_BASE_DIR "${SB_BINARY_DIR}/_deps")
set(CMAKE_BUILD_TYPE "${SB_BUILD_TYPE}")
set(CMAKE_SYSTEM_PROCESSOR "${SB_PROCESSOR}")
set(CMAKE_CXX_COMPILER_ID "GNU")
set(CMAKE_CXX_COMPILER_VERSION "${SB_CXX_VERSION}")
set(VLLM_PYTHON_EXECUTABLE "${SB_PYTHON}")
set(VLLM_TARGET_DEVICE "cuda")
file(WRITE "${SB_OUT}" "")

function(_sb_emit kind name key value)
  string(REPLACE "\n" " " value "${value}")
  string(REPLACE "\t" " " value "${value}")
  file(APPEND "${SB_OUT}" "${kind}\t${name}\t${key}\t${value}\n")
endfunction()

foreach(_sb_cmd project enable_language install add_custom_target add_custom_command
        add_dependencies target_link_libraries set_target_properties target_link_options
        add_executable)
  cmake_language(EVAL CODE "function(${_sb_cmd})\nendfunction()")
endforeach()

function(add_library name)
  _sb_emit(target "${name}" sources "${ARGN}")
  set_property(GLOBAL APPEND PROPERTY SB_TARGETS "${name}")
  set_property(GLOBAL PROPERTY "SB_SOURCES_${name}" "${ARGN}")
endfunction()
function(Python_add_library name)
  cmake_parse_arguments(PARSE_ARGV 1 A "MODULE;SHARED;STATIC;WITH_SOABI" "USE_SABI" "")
  _sb_emit(target "${name}" sabi "${A_USE_SABI}")
  add_library(${name} ${A_UNPARSED_ARGUMENTS})
endfunction()
function(target_compile_definitions name)
  _sb_emit(target "${name}" definitions "${ARGN}")
endfunction()
function(target_compile_options name)
  _sb_emit(target "${name}" options "${ARGN}")
endfunction()
function(target_include_directories name)
  _sb_emit(target "${name}" includes "${ARGN}")
endfunction()
function(include_directories)
  _sb_emit(directory "." includes "${ARGN}")
endfunction()
function(add_compile_definitions)
  _sb_emit(directory "." definitions "${ARGN}")
endfunction()
function(add_compile_options)
  _sb_emit(directory "." options "${ARGN}")
endfunction()
function(set_source_files_properties)
  cmake_parse_arguments(PARSE_ARGV 0 A "" "" "PROPERTIES")
  list(LENGTH A_PROPERTIES n)
  set(i 0)
  while(i LESS n)
    math(EXPR j "${i} + 1")
    list(GET A_PROPERTIES ${i} key)
    list(GET A_PROPERTIES ${j} value)
    set_property(SOURCE ${A_UNPARSED_ARGUMENTS} APPEND PROPERTY "${key}" "${value}")
    math(EXPR i "${i} + 2")
  endwhile()
endfunction()

macro(find_package _sb_name)
  if("${_sb_name}" STREQUAL "Torch")
    set(Torch_FOUND TRUE)
    set(Torch_VERSION "${SB_TORCH_VERSION}")
    set(TORCH_INCLUDE_DIRS "${SB_TORCH_INCLUDES}")
    set(CUDA_FOUND TRUE)
    set(CUDA_VERSION "${SB_CUDA_VERSION}")
    set(CUDA_TOOLKIT_ROOT_DIR "${SB_CUDA_ROOT}")
    set(CMAKE_CUDA_COMPILER_VERSION "${SB_CUDA_VERSION}")
    set(CMAKE_CUDA_FLAGS "${SB_GENCODE}")
    _sb_emit(directory "." system_includes "${SB_TORCH_INCLUDES}")
  elseif("${_sb_name}" STREQUAL "Python")
    set(Python_FOUND TRUE)
    set(Python_EXECUTABLE "${SB_PYTHON}")
    string(REPLACE "." ";" _sb_pyver "${SB_PYTHON_VERSION}")
    list(GET _sb_pyver 0 Python_VERSION_MAJOR)
    list(GET _sb_pyver 1 Python_VERSION_MINOR)
    set(Python_VERSION "${SB_PYTHON_VERSION}")
    set(Python_INCLUDE_DIRS "${SB_PYTHON_INCLUDE}")
    _sb_emit(directory "." system_includes "${SB_PYTHON_INCLUDE}")
  else()
    set(${_sb_name}_FOUND FALSE)
  endif()
endmacro()

# Defined inside a function so that include(FetchContent) can be overridden again.
function(_sb_define_fetch_stubs)
  function(FetchContent_Declare name)
    cmake_parse_arguments(PARSE_ARGV 1 A "" "SOURCE_DIR;GIT_REPOSITORY;GIT_TAG;URL" "")
    string(TOUPPER "${name}" upper)
    set(dir "${A_SOURCE_DIR}")
    if(DEFINED FETCHCONTENT_SOURCE_DIR_${upper})
      set(dir "${FETCHCONTENT_SOURCE_DIR_${upper}}")
    endif()
    _sb_emit(fetch "${name}" declared "${A_GIT_REPOSITORY}${A_URL}@${A_GIT_TAG}")
    set_property(GLOBAL PROPERTY "SB_FETCH_SOURCE_${name}" "${dir}")
  endfunction()
  macro(FetchContent_MakeAvailable)
    foreach(_sb_name ${ARGN})
      get_property(_sb_dir GLOBAL PROPERTY "SB_FETCH_SOURCE_${_sb_name}")
      set(${_sb_name}_SOURCE_DIR "${_sb_dir}")
      set(${_sb_name}_POPULATED TRUE)
      string(TOUPPER "${_sb_name}" _sb_upper)
      if(_sb_upper STREQUAL "CUTLASS" AND _sb_dir)
        set(CUTLASS_DIR "${_sb_dir}")
        set(CUTLASS_INCLUDE_DIR "${_sb_dir}/include")
        set(CUTLASS_TOOLS_UTIL_INCLUDE_DIR "${_sb_dir}/tools/util/include")
      endif()
      _sb_emit(fetch "${_sb_name}" available "${_sb_dir}")
    endforeach()
  endmacro()
  macro(FetchContent_Populate _sb_name)
    _sb_emit(fetch "${_sb_name}" available "")
  endmacro()
endfunction()
_sb_define_fetch_stubs()

# run_python passes expressions holding ';', which a macro cannot forward intact.
function(_sb_define_utils_overrides)
  function(run_python OUT EXPR ERR_MSG)
    _execute_process(
      COMMAND "${SB_PYTHON}" "-c" "${EXPR}"
      OUTPUT_VARIABLE out RESULT_VARIABLE rc ERROR_VARIABLE err
      OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${ERR_MSG}: ${err}")
    endif()
    set(${OUT} "${out}" PARENT_SCOPE)
  endfunction()
endfunction()

# Generator scripts write into the source tree: skipped; everything else runs.
macro(execute_process)
  set(_sb_args "${ARGV}")
  if(_sb_args MATCHES "\\.py(;|$)")
    _sb_emit(skipped "execute_process" command "${ARGV}")
    set(_sb_take FALSE)
    foreach(_sb_arg IN LISTS _sb_args)
      if(_sb_take)
        set(${_sb_arg} 0)
        set(_sb_take FALSE)
      elseif(_sb_arg STREQUAL "RESULT_VARIABLE")
        set(_sb_take TRUE)
      endif()
    endforeach()
  else()
    _execute_process(${ARGV})
  endif()
endmacro()

macro(message _sb_mode)
  if("${_sb_mode}" STREQUAL "FATAL_ERROR" OR "${_sb_mode}" STREQUAL "SEND_ERROR")
    set(_sb_text "${ARGN}")
    string(REPLACE ";" "" _sb_text "${_sb_text}")
    _sb_emit(fatal "message" text "${_sb_text}")
    _message(WARNING "sparkbuild: the real configure would stop here: ${_sb_text}")
    return()
  else()
    _message(${ARGV})
  endif()
endmacro()

macro(include _sb_file)
  if("${_sb_file}" MATCHES "external_projects/")
    _sb_emit(skipped "include" file "${_sb_file}")
  else()
    _include(${ARGV})
    if("${_sb_file}" MATCHES "utils\\.cmake$")
      _sb_define_utils_overrides()
    elseif("${_sb_file}" STREQUAL "FetchContent")
      _sb_define_fetch_stubs()
    endif()
  endif()
endmacro()

_include("${SB_TREE}/CMakeLists.txt")

get_property(_sb_targets GLOBAL PROPERTY SB_TARGETS)
foreach(_sb_t IN LISTS _sb_targets)
  get_property(_sb_srcs GLOBAL PROPERTY "SB_SOURCES_${_sb_t}")
  foreach(_sb_s IN LISTS _sb_srcs)
    foreach(_sb_p COMPILE_OPTIONS COMPILE_FLAGS COMPILE_DEFINITIONS INCLUDE_DIRECTORIES)
      get_property(_sb_v SOURCE "${_sb_s}" PROPERTY ${_sb_p})
      if(_sb_v)
        _sb_emit(source "${_sb_s}" "${_sb_p}" "${_sb_v}")
      endif()
    endforeach()
  endforeach()
endforeach()
foreach(_sb_v CMAKE_CUDA_STANDARD CMAKE_CUDA_FLAGS CUDA_SUPPORTED_ARCHS CUDA_ARCHS)
  _sb_emit(variable "${_sb_v}" value "${${_sb_v}}")
endforeach()
"""

SCOPE_KEYWORDS = frozenset({"PRIVATE", "PUBLIC", "INTERFACE", "BEFORE", "AFTER", "SYSTEM"})


@dataclass(frozen=True)
class RecordInputs:
    """What the recorded configure is told about this machine (what find_package says)."""

    tree: Path
    binary_dir: Path
    cmake: Path
    python: Path
    python_version: str
    python_include: Path
    cuda_version: str
    cuda_root: Path
    gencode: str
    """What torch's CMake puts in CMAKE_CUDA_FLAGS for TORCH_CUDA_ARCH_LIST."""
    torch_version: str
    torch_includes: tuple[Path, ...]
    cxx_version: str
    build_type: str = "RelWithDebInfo"
    """vLLM's setup.py default."""
    processor: str = "x86_64"
    fetch_sources: Mapping[str, Path] = field(default_factory=dict)


@dataclass
class TargetRecord:
    name: str
    sources: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    definitions: list[str] = field(default_factory=list)
    includes: list[str] = field(default_factory=list)
    sabi: str = ""


@dataclass
class BuildRecord:
    """Everything the tree's CMake declared, as CMake lists (generator expressions kept)."""

    targets: dict[str, TargetRecord] = field(default_factory=dict)
    source_properties: dict[str, dict[str, str]] = field(default_factory=dict)
    directory: dict[str, list[str]] = field(default_factory=dict)
    variables: dict[str, str] = field(default_factory=dict)
    fetches: dict[str, dict[str, str]] = field(default_factory=dict)
    fatals: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def targets_of(self, source: str) -> list[TargetRecord]:
        return [target for target in self.targets.values() if source in target.sources]

    def sources(self) -> set[str]:
        return {source for target in self.targets.values() for source in target.sources}


def cmake_list(value: str) -> list[str]:
    return [item for item in value.split(";") if item]


def without_keywords(items: list[str]) -> list[str]:
    return [item for item in items if item not in SCOPE_KEYWORDS]


def _record_target(record: BuildRecord, name: str, key: str, value: str) -> None:
    target = record.targets.setdefault(name, TargetRecord(name))
    if key == "sources":
        target.sources.extend(cmake_list(value))
    elif key == "sabi":
        target.sabi = value
    elif key in ("options", "definitions", "includes"):
        getattr(target, key).extend(without_keywords(cmake_list(value)))


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
        elif kind == "source":
            record.source_properties.setdefault(name, {})[key] = value
        elif kind == "directory":
            record.directory.setdefault(key, []).extend(without_keywords(cmake_list(value)))
        elif kind == "variable":
            record.variables[name] = value
        elif kind == "fetch":
            record.fetches.setdefault(name, {})[key] = value
        elif kind == "fatal":
            record.fatals.append(value)
        elif kind == "skipped":
            record.skipped.append(f"{name}: {value}")
    return record


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
        "SB_GENCODE": inputs.gencode,
        "SB_TORCH_VERSION": inputs.torch_version,
        "SB_TORCH_INCLUDES": ";".join(os.fspath(p) for p in inputs.torch_includes),
        "SB_CXX_VERSION": inputs.cxx_version,
        "SB_BUILD_TYPE": inputs.build_type,
        "SB_PROCESSOR": inputs.processor,
    }
    for name, path in inputs.fetch_sources.items():
        values[f"FETCHCONTENT_SOURCE_DIR_{name.upper()}"] = path
    return [f"-D{key}={os.fspath(value)}" for key, value in values.items()]


def record_build(inputs: RecordInputs) -> BuildRecord:
    """Run the recorder over ``inputs.tree``; its output and log land in binary_dir."""
    inputs.binary_dir.mkdir(parents=True, exist_ok=True)
    script = inputs.binary_dir / "sparkbuild-record.cmake"
    script.write_text(RECORDER, encoding="utf-8")
    log = inputs.binary_dir / "record.log"
    result = run(
        [inputs.cmake, *_defines(inputs), "-P", script],
        cwd=inputs.tree, log=log, echo=False, check=False, timeout=600,
    )
    out = inputs.binary_dir / "record.tsv"
    if result.returncode != 0 or not out.is_file():
        tail = "\n".join(result.output.strip().splitlines()[-15:])
        raise ToolchainError(
            "could not read the tree's CMakeLists.txt in script mode:\n" + tail,
            where=f"full log: {log}",
            hint="the tree's CMake uses a command sparkbuild does not record yet; "
            "report it with the log",
        )
    return parse_record(out.read_text(encoding="utf-8"))
