"""The CMake recorder on a small project written here: what it runs, what it records,
and what it runs only on request (generators), with the real cmake and torch's CMake."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from sparkbuild.errors import ToolchainError
from sparkbuild.toolchain import tools
from sparkbuild.toolchain.cmake_recorder import RecordInputs, record_build
from sparkbuild.toolchain.compile_flags import unit_command

CMAKELISTS = r"""
cmake_minimum_required(VERSION 3.26)
project(tiny LANGUAGES CXX)
set(CMAKE_CUDA_STANDARD 20)
include(${CMAKE_CURRENT_LIST_DIR}/cmake/utils.cmake)
find_package(Torch REQUIRED)
find_package(Python REQUIRED COMPONENTS Interpreter)
tiny_take_archs(CUDA_ARCH_LIST)
run_python(JOINED "print(';'.join(['a', 'b']))" "python failed")
set(FLAGS "--expt-relaxed-constexpr")
list(APPEND FLAGS "-DJOINED_COUNT=${JOINED}")
tiny_arch_pick(KERNEL_ARCHS "12.0f" "${CUDA_ARCH_LIST}")
set(SRCS "csrc/kernel.cu" "csrc/other.cu")
foreach(arch ${KERNEL_ARCHS})
  string(REPLACE "." "" stripped "${arch}")
  set_property(SOURCE "csrc/kernel.cu" APPEND PROPERTY COMPILE_OPTIONS
    "$<$<COMPILE_LANGUAGE:CUDA>:-gencode;arch=compute_${stripped},code=sm_${stripped}>")
endforeach()
set_source_files_properties("csrc/other.cu" PROPERTIES COMPILE_FLAGS "--use_fast_math")
execute_process(COMMAND ${Python_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/generate.py
  RESULT_VARIABLE gen_rc)
if(NOT gen_rc EQUAL 0)
  message(FATAL_ERROR "generator failed")
endif()
include(FetchContent)
FetchContent_Declare(cutlass GIT_REPOSITORY https://example.invalid/cutlass.git GIT_TAG v9)
FetchContent_MakeAvailable(cutlass)
Python_add_library(_tiny MODULE USE_SABI 3.11 WITH_SOABI ${SRCS})
target_include_directories(_tiny PRIVATE csrc ${CUTLASS_INCLUDE_DIR})
target_compile_options(_tiny PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${FLAGS}>)
target_compile_definitions(_tiny PRIVATE TINY=1)
include(cmake/external_projects/extra.cmake)
message(FATAL_ERROR "needs a newer compiler")
add_library(after_the_stop MODULE csrc/late.cu)
"""

UTILS = r"""
function(tiny_arch_pick OUT SRC TGT)
  # the family entry 12.0f selects any 12.x target, the way vLLM's helper does
  set(picked)
  foreach(t ${TGT})
    if(t MATCHES "^12\\.")
      list(APPEND picked ${t})
    endif()
  endforeach()
  set(${OUT} ${picked} PARENT_SCOPE)
endfunction()
# move the gencode flags torch set out of CMAKE_CUDA_FLAGS, as "12.1"-style archs
macro(tiny_take_archs OUT)
  string(REGEX MATCHALL "code=sm_[0-9]+" _codes "${CMAKE_CUDA_FLAGS}")
  string(REGEX REPLACE "-gencode arch=[^ ]+ *" "" CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS}")
  set(${OUT})
  foreach(_code ${_codes})
    string(REGEX REPLACE "code=sm_([0-9]+)([0-9])" "\\1.\\2" _arch "${_code}")
    list(APPEND ${OUT} "${_arch}")
  endforeach()
endmacro()
"""


EXTRA = r"""
include(FetchContent)
FetchContent_Populate(extra SOURCE_DIR "${FETCHCONTENT_BASE_DIR}/extra-src"
  GIT_REPOSITORY https://example.invalid/extra.git GIT_TAG 0123abcd)
file(READ "${extra_SOURCE_DIR}/version.txt" EXTRA_VERSION)
add_library(_extra MODULE csrc/extra_a.cu)
target_sources(_extra PRIVATE csrc/extra_b.cu ${extra_SOURCE_DIR}/kernels.cu)
set_target_properties(_extra PROPERTIES COMPILE_DEFINITIONS "EXTRA=1")
get_target_property(EXTRA_DEFS _extra COMPILE_DEFINITIONS)
get_property(EXTRA_DEFS_SET TARGET _extra PROPERTY COMPILE_DEFINITIONS SET)
get_property(EXTRA_PLAIN TARGET _extra PROPERTY COMPILE_DEFINITIONS)
target_compile_options(_extra PRIVATE "-DEXTRA_DEFS=${EXTRA_DEFS}"
  "-DEXTRA_SET=${EXTRA_DEFS_SET}" "-DEXTRA_PLAIN=${EXTRA_PLAIN}")
dependency_defined_command(_extra FROM_A_FETCHED_PROJECT)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "cmake" / "external_projects").mkdir(parents=True)
    (tree / "cmake" / "external_projects" / "extra.cmake").write_text(EXTRA, encoding="utf-8")
    (tree / "csrc").mkdir()
    (tree / "CMakeLists.txt").write_text(CMAKELISTS, encoding="utf-8")
    (tree / "cmake" / "utils.cmake").write_text(UTILS, encoding="utf-8")
    (tree / "generate.py").write_text(
        "from pathlib import Path\nPath(__file__).with_name('GENERATED').write_text('x')\n",
        encoding="utf-8")
    return tree


def _inputs(tree: Path, tmp_path: Path, cutlass: Path | None = None) -> RecordInputs:
    cmake = tools.find_cmake()
    assert cmake is not None
    return RecordInputs(
        tree=tree, binary_dir=tmp_path / "bin", cmake=cmake.path, python=Path(sys.executable),
        python_version="3.11", python_include=Path("/py/include"), cuda_version="13.0",
        cuda_root=Path("/cuda"), arch_list="12.1", gencode="-gencode arch=compute_121,code=sm_121",
        torch_version="2.13.0", torch_includes=(Path("/torch/include"),), cxx_version="12.2",
        fetch_sources={"cutlass": cutlass} if cutlass else {},
    )


def test_recorder_runs_the_trees_logic_and_records_targets(project: Path, tmp_path: Path) -> None:
    cutlass = tmp_path / "cutlass"
    record = record_build(_inputs(project, tmp_path, cutlass))
    target = record.targets["_tiny"]
    assert target.sources == ["csrc/kernel.cu", "csrc/other.cu"]
    assert target.sabi == "3.11"
    assert target.includes == ["csrc", f"{cutlass}/include"]
    assert target.definitions == ["TINY=1"]
    assert record.fetches["cutlass"]["declared"] == "https://example.invalid/cutlass.git@v9"
    assert record.fatals == ["needs a newer compiler"]
    assert "after_the_stop" not in record.targets
    assert any("generate.py" in item for item in record.skipped)
    assert not (project / "GENERATED").exists()
    # cmake/external_projects/*.cmake are read too: fetches, targets, target_sources.
    (extra,) = [d for d in record.declarations if d.name == "extra"]
    assert extra.method == "populate" and "GIT_TAG" in extra.args
    assert extra.where.endswith("extra.cmake:3")
    deps = tmp_path / "bin" / "_deps" / "extra-src"
    assert record.targets["_extra"].sources == [
        "csrc/extra_a.cu", "csrc/extra_b.cu", f"{deps}/kernels.cu"]
    assert record.targets["_extra"].kind == "MODULE"
    assert record.targets["_extra"].options == [
        "-DEXTRA_DEFS=EXTRA=1", "-DEXTRA_SET=1", "-DEXTRA_PLAIN=EXTRA=1"]
    assert "dependency_defined_command" in record.unknown_commands
    assert any(f"{deps}/version.txt" in item for item in record.skipped)
    assert record.variables["CMAKE_CUDA_STANDARD"] == "20"

    command = unit_command(record, target, "csrc/kernel.cu", tree=project, nvcc=Path("nvcc"),
                           obj=tmp_path / "k.o", build_type="Release", extra_system_includes=[])
    assert command.gencode == ("arch=compute_121,code=sm_121",)
    assert "-DJOINED_COUNT=a;b" not in command.argv
    assert "-DJOINED_COUNT=a" in command.argv  # the ';' run_python printed splits the list
    assert "-DPy_LIMITED_API=0x030B0000" in command.argv
    other = unit_command(record, target, "csrc/other.cu", tree=project, nvcc=Path("nvcc"),
                         obj=tmp_path / "o.o", build_type="Release", extra_system_includes=[])
    assert other.gencode == ()
    assert "--use_fast_math" in other.argv


def test_a_recorder_failure_is_a_clear_toolchain_error(project: Path, tmp_path: Path) -> None:
    (project / "CMakeLists.txt").write_text("this is not cmake (\n", encoding="utf-8")
    with pytest.raises(ToolchainError, match=r"could not read the tree's CMakeLists\.txt") as err:
        record_build(_inputs(project, tmp_path))
    assert "record.log" in (err.value.where or "")


def test_generators_run_on_request_and_torch_cmake_gives_the_cuda_flags(
    project: Path, tmp_path: Path
) -> None:
    """torch's own share/cmake decides CMAKE_CUDA_FLAGS: the gencode of the arch list and
    the flags torch's cuda.cmake appends; its exported targets give interface defines."""
    includes = tools.torch_include_dirs()
    assert includes, "torch must be installed for this test"
    inputs = replace(_inputs(project, tmp_path), arch_list="12.1a", gencode="",
                     torch_cmake_dir=includes[0].parent / "share" / "cmake",
                     run_generators=True, stop_at_fatal=False)
    record = record_build(inputs)
    assert (project / "GENERATED").read_text() == "x"
    assert "after_the_stop" in record.targets  # stop_at_fatal=False: the run goes on
    target = record.targets["_tiny"]
    command = unit_command(record, target, "csrc/kernel.cu", tree=project, nvcc=Path("nvcc"),
                           obj=tmp_path / "k.o", build_type="Release", extra_system_includes=[])
    # tiny_take_archs moved torch's gencode out of CMAKE_CUDA_FLAGS; 12.1a is kept as 12.1
    assert command.gencode == ("arch=compute_121,code=sm_121",)
    for flag in ("--expt-relaxed-constexpr", "--expt-extended-lambda",
                 "-DONNX_NAMESPACE=onnx_c2", "-Xcudafe"):
        assert flag in command.argv, flag
    assert "torch_cpu" in record.imported


LANGUAGES = r"""
cmake_minimum_required(VERSION 3.26)
project(langs LANGUAGES CXX CUDA)
if(DEFINED CMAKE_CUDA_COMPILER_VERSION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0)
  set(SUPPORTED "8.0;12.0")
else()
  set(SUPPORTED "8.0;8.6;8.9;9.0")
endif()
add_library(_langs MODULE csrc/kernel.cu)
target_compile_definitions(_langs PRIVATE "SUPPORTED=${SUPPORTED}")
message(FATAL_ERROR "none is supported " "(${SUPPORTED})" " of " ${SUPPORTED})
"""


def test_project_languages_give_the_cuda_version_and_message_keeps_lists(
    tmp_path: Path,
) -> None:
    """project(... LANGUAGES CUDA) tells the tree its nvcc version, as the real configure
    does (the mini-vllm example read no version and stopped on 8.0-9.0); a FATAL_ERROR's
    text joins the arguments as message() does, a quoted list keeping its ';'."""
    tree = tmp_path / "tree"
    (tree / "csrc").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text(LANGUAGES, encoding="utf-8")
    record = record_build(_inputs(tree, tmp_path))
    assert record.targets["_langs"].definitions == ["SUPPORTED=8.0", "12.0"]
    assert record.fatals == ["none is supported (8.0;12.0) of 8.012.0"]


def test_pybind11_add_module_is_a_module_target(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "csrc").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.26)\nproject(p LANGUAGES CXX)\n"
        "pybind11_add_module(_p MODULE NO_EXTRAS csrc/a.cu csrc/b.cpp)\n", encoding="utf-8")
    record = record_build(_inputs(tree, tmp_path))
    assert record.targets["_p"].kind == "MODULE"
    assert record.targets["_p"].sources == ["csrc/a.cu", "csrc/b.cpp"]


FOLLOWING = r"""
cmake_minimum_required(VERSION 3.26)
project(f LANGUAGES CXX)
add_custom_target(_empty_C)
add_custom_target(_runs_C COMMAND echo built)
add_custom_target(_installs_C)
install(DIRECTORY python/pkg/ DESTINATION pkg/third_party/tool COMPONENT _installs_C)
install(CODE "message(x)" ALL_COMPONENTS)
include(FetchContent)
FetchContent_Declare(fa GIT_REPOSITORY https://example.invalid/fa.git GIT_TAG v1)
FetchContent_MakeAvailable(fa)
FetchContent_Declare(other GIT_REPOSITORY https://example.invalid/other.git GIT_TAG v1)
FetchContent_MakeAvailable(other)
"""
FETCHED = r"""
file(GLOB FA_UNITS "csrc/*.cu")
add_library(_fa2_C MODULE ${FA_UNITS} csrc/api.cpp)
"""


def test_a_followed_fetched_project_defines_its_targets_from_its_own_directory(
        tmp_path: Path) -> None:
    """SB_FOLLOW_FETCHED reads a fetched project's CMakeLists.txt where FetchContent makes it
    available: its relative sources and globs are its directory's, not the tree's; an
    add_custom_target is recorded with whether it runs anything, install() by component."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text(FOLLOWING, encoding="utf-8")
    fetched = {}
    for name in ("fa", "other"):
        root = tmp_path / name
        (root / "csrc").mkdir(parents=True)
        (root / "CMakeLists.txt").write_text(FETCHED.replace("_fa2_C", f"_{name}_C"))
        (root / "csrc" / "k1.cu").write_text("// k1\n")
        (root / "csrc" / "k2.cu").write_text("// k2\n")
        fetched[name] = root
    inputs = replace(_inputs(tree, tmp_path), fetch_sources=fetched, follow_fetched=("FA",))
    record = record_build(inputs)
    fa = fetched["fa"]
    assert sorted(record.targets["_fa_C"].sources) == sorted(
        [f"{fa}/csrc/k1.cu", f"{fa}/csrc/k2.cu", f"{fa}/csrc/api.cpp"])
    assert "_other_C" not in record.targets  # not followed
    assert record.followed == {"fa": str(fa)}
    assert record.custom_targets == {"_empty_C": False, "_runs_C": True, "_installs_C": False}
    assert record.installs == {"_installs_C": ["pkg/third_party/tool"]}
