"""check's choice of units whose gencode the series changed, on a project written here.

The series' CMake diff is recorded the way the engine records it
(``.sparkbuild/applied/NAME/NNN.diff``); check reverse-applies it with ``git apply -R`` on
a copy of the CMake files, records the tree's CMake before and after with real cmake and
torch's CMake, and compares each source's gencode.  A generator run on the scratch copy
adds units without touching the tree.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sparkbuild.checks.check_plan import (
    applied_cmake_diffs,
    gencodes,
    scratch_copy,
    unpatched_copy,
)
from sparkbuild.checks.touched_units import gencode_changed
from sparkbuild.recipe import load_recipe
from sparkbuild.toolchain import tools
from sparkbuild.toolchain.cmake_recorder import RecordInputs, record_build

CMAKELISTS = """cmake_minimum_required(VERSION 3.26)
project(gen LANGUAGES CXX)
find_package(Torch REQUIRED)
find_package(Python REQUIRED COMPONENTS Interpreter)
string(REGEX MATCHALL "arch=compute_[0-9a-z]+" _flags "${CMAKE_CUDA_FLAGS}")
string(REGEX REPLACE "-gencode arch=[^ ]+ *" "" CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS}")
string(REPLACE "arch=compute_" "" TARGETS "${_flags}")
set(SUPPORTED "120")
set(FP4 "")
foreach(t ${TARGETS})
  if(t IN_LIST SUPPORTED)
    list(APPEND FP4 ${t})
  endif()
endforeach()
execute_process(COMMAND ${Python_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/csrc/gen.py)
file(GLOB GENERATED "csrc/generated_*.cu")
foreach(t ${FP4})
  set_property(SOURCE csrc/fp4.cu ${GENERATED} APPEND PROPERTY COMPILE_OPTIONS
    "$<$<COMPILE_LANGUAGE:CUDA>:-gencode;arch=compute_${t},code=sm_${t}>")
endforeach()
add_library(_C MODULE csrc/fp4.cu csrc/plain.cu ${GENERATED})
"""
SERIES_DIFF = """--- a/CMakeLists.txt
+++ b/CMakeLists.txt
@@ -7,3 +7,3 @@
 string(REPLACE "arch=compute_" "" TARGETS "${_flags}")
-set(SUPPORTED "120")
+set(SUPPORTED "120;121a")
 set(FP4 "")
"""
GENERATOR = """from pathlib import Path
Path(__file__).with_name("generated_a.cu").write_text("// generated\\n")
"""


def _tree(root: Path) -> Path:
    tree = root / "tree"
    (tree / "csrc").mkdir(parents=True)
    patched = CMAKELISTS.replace('set(SUPPORTED "120")', 'set(SUPPORTED "120;121a")')
    (tree / "CMakeLists.txt").write_text(patched, encoding="utf-8")
    (tree / "csrc" / "gen.py").write_text(GENERATOR, encoding="utf-8")
    for name in ("fp4.cu", "plain.cu"):
        (tree / "csrc" / name).write_text("// unit\n", encoding="utf-8")
    record = tree / ".sparkbuild" / "applied" / "cmake-sm121-archs" / "001.diff"
    record.parent.mkdir(parents=True)
    record.write_text(SERIES_DIFF, encoding="utf-8")
    return tree


def _inputs(tree: Path, binary: Path, *, generators: bool) -> RecordInputs:
    cmake = tools.find_cmake()
    includes = tools.torch_include_dirs()
    assert cmake is not None and includes, "cmake and torch are needed"
    return RecordInputs(
        tree=tree, binary_dir=binary, cmake=cmake.path, python=Path(sys.executable),
        python_version="3.11", python_include=Path("/py"), cuda_version="13.0",
        cuda_root=Path("/usr/local/cuda"), arch_list="12.1a", torch_version="2.13.0",
        torch_includes=tuple(includes), cxx_version="13.3",
        torch_cmake_dir=includes[0].parent / "share" / "cmake", run_generators=generators,
    )


def test_units_whose_gencode_the_series_moved_are_found(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "qwen38next.toml")
    diffs = applied_cmake_diffs(tree, recipe)
    assert len(diffs) == 1 and "CMakeLists.txt" in diffs[0]

    scratch = scratch_copy(tree, tmp_path / "work" / "src")
    after = record_build(_inputs(scratch, tmp_path / "work" / "after", generators=True))
    assert not (tree / "csrc" / "generated_a.cu").exists()  # the generator wrote in scratch
    assert (scratch / "csrc" / "generated_a.cu").is_file()

    before_tree = unpatched_copy(scratch, diffs, tmp_path / "work" / "before")
    assert before_tree is not None
    assert 'set(SUPPORTED "120")' in (before_tree / "CMakeLists.txt").read_text()
    assert (before_tree / "csrc").is_symlink()  # only the CMake files are copies
    assert 'set(SUPPORTED "120;121a")' in (tree / "CMakeLists.txt").read_text()
    before = record_build(_inputs(before_tree, tmp_path / "work" / "before-cmake",
                                  generators=False))

    now, then = gencodes(after, scratch), gencodes(before, before_tree)
    assert now["csrc/fp4.cu"] == ("arch=compute_121a,code=sm_121a",)
    assert then["csrc/fp4.cu"] == ()
    assert gencode_changed(then, now) == ["csrc/fp4.cu", "csrc/generated_a.cu"]
