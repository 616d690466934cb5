"""check's pure parts: reading the CMake record, building nvcc commands, choosing units,
and telling a missing dependency from a broken tree."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the corpus package

from corpus.builders import write_tree
from sparkbuild.build.check import classify, header_provider, missing_headers
from sparkbuild.build.touched_units import IncludeGraph, select_units
from sparkbuild.toolchain.cmake_recorder import gencode_for, parse_record
from sparkbuild.toolchain.compile_flags import (
    UnitCommand,
    UnsupportedGenex,
    evaluate_genex,
    sabi_definition,
    unit_command,
)

RECORD = "\n".join([
    "target\t_C\tsabi\t3",
    "target\t_C\tsources\tcsrc/a.cu;csrc/b.cu;csrc/bind.cpp",
    "target\t_C\tincludes\tPRIVATE;csrc",
    "target\t_C\toptions\tPRIVATE;$<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr;-DENABLE_FP8>",
    "target\t_C\tdefinitions\tPRIVATE;-DTORCH_EXTENSION_NAME=_C",
    "target\t_C\tdefinitions\tPRIVATE;USE_CUDA",
    "source\tcsrc/a.cu\tCOMPILE_OPTIONS\t"
    "$<$<COMPILE_LANGUAGE:CUDA>:-gencode;arch=compute_121,code=sm_121>",
    "source\tcsrc/b.cu\tCOMPILE_OPTIONS\t"
    "$<$<COMPILE_LANGUAGE:CUDA>:-gencode;arch=compute_120f,code=sm_120f>;"
    "$<$<COMPILE_LANGUAGE:CXX>:-Wall>",
    "directory\t.\tincludes\tBEFORE;/build/torch_patched_headers",
    "directory\t.\tsystem_includes\t/torch/include;/torch/include/torch/csrc/api/include",
    "fetch\tcutlass\tdeclared\thttps://github.com/nvidia/cutlass.git@v4.7.1",
    "fetch\tcutlass\tavailable\t",
    "fatal\tmessage\ttext\tGCC >= 13 is required",
    "skipped\texecute_process\tcommand\tCOMMAND;python;gen.py",
    "variable\tCMAKE_CUDA_STANDARD\tvalue\t20",
    "variable\tCMAKE_CUDA_FLAGS\tvalue\t",
    "",
])


def test_record_is_parsed_per_target_and_source() -> None:
    record = parse_record(RECORD)
    target = record.targets["_C"]
    assert target.sources == ["csrc/a.cu", "csrc/b.cu", "csrc/bind.cpp"]
    assert target.includes == ["csrc"]
    assert target.definitions == ["-DTORCH_EXTENSION_NAME=_C", "USE_CUDA"]
    assert target.sabi == "3"
    assert record.fetches["cutlass"] == {
        "declared": "https://github.com/nvidia/cutlass.git@v4.7.1", "available": ""}
    assert record.fatals == ["GCC >= 13 is required"]
    assert record.skipped == ["execute_process: COMMAND;python;gen.py"]
    assert record.targets_of("csrc/b.cu") == [target]
    assert record.sources() == {"csrc/a.cu", "csrc/b.cu", "csrc/bind.cpp"}


@pytest.mark.parametrize(
    ("text", "language", "expected"),
    [
        ("$<$<COMPILE_LANGUAGE:CUDA>:-gencode;arch=compute_121,code=sm_121>", "CUDA",
         "-gencode;arch=compute_121,code=sm_121"),
        ("$<$<COMPILE_LANGUAGE:CUDA>:--use_fast_math>", "CXX", ""),
        ("$<$<COMPILE_LANGUAGE:CXX,CUDA>:-g>", "CUDA", "-g"),
        ("a;$<$<NOT:$<COMPILE_LANGUAGE:CXX>>:b>;c", "CUDA", "a;b;c"),
        ("$<$<BOOL:OFF>:x>$<$<AND:1,1>:y>", "CUDA", "y"),
        ("plain;-O2", "CUDA", "plain;-O2"),
    ],
)
def test_generator_expressions_of_the_compile_language_family(
    text: str, language: str, expected: str
) -> None:
    assert evaluate_genex(text, language) == expected


def test_unknown_generator_expression_is_refused() -> None:
    with pytest.raises(UnsupportedGenex, match="TARGET_PROPERTY"):
        evaluate_genex("$<TARGET_PROPERTY:torch,INCLUDE_DIRECTORIES>", "CUDA")


def test_sabi_definitions_match_findpython() -> None:
    assert sabi_definition("3") == ["-DPy_LIMITED_API=3"]
    assert sabi_definition("3.11") == ["-DPy_LIMITED_API=0x030B0000"]
    assert sabi_definition("") == []


def test_unit_command_is_what_the_ninja_generator_would_run() -> None:
    record = parse_record(RECORD)
    command = unit_command(
        record, record.targets["_C"], "csrc/a.cu", tree=Path("/t"), nvcc=Path("/cuda/bin/nvcc"),
        obj=Path("/w/a.o"), build_type="RelWithDebInfo", extra_system_includes=[Path("/nv/inc")],
    )
    argv = list(command.argv)
    assert argv[:2] == ["/cuda/bin/nvcc", "-forward-unknown-to-host-compiler"]
    assert argv[-6:] == ["-x", "cu", "-c", "/t/csrc/a.cu", "-o", "/w/a.o"]
    for flag in ("-DTORCH_EXTENSION_NAME=_C", "-DUSE_CUDA", "-DPy_LIMITED_API=3",
                 "-I/build/torch_patched_headers", "-I/t/csrc", "-std=c++20", "-O2",
                 "-DNDEBUG", "-Xcompiler=-fPIC", "--expt-relaxed-constexpr", "-DENABLE_FP8"):
        assert flag in argv, flag
    assert argv.index("-I/build/torch_patched_headers") < argv.index("-I/t/csrc")
    assert argv[argv.index("/torch/include") - 1] == "-isystem"
    assert argv[argv.index("/nv/inc") - 1] == "-isystem"
    assert command.gencode == ("arch=compute_121,code=sm_121",)
    other = unit_command(
        record, record.targets["_C"], "csrc/b.cu", tree=Path("/t"), nvcc=Path("nvcc"),
        obj=Path("/w/b.o"), build_type="Release", extra_system_includes=[],
    )
    assert other.gencode == ("arch=compute_120f,code=sm_120f",)
    assert "-Wall" not in other.argv
    assert "-O3" in other.argv


def test_gencode_for_torch_arch_list() -> None:
    assert gencode_for(("12.1",)) == "-gencode arch=compute_121,code=sm_121"
    assert gencode_for(("12.0", "12.1+PTX")) == (
        "-gencode arch=compute_120,code=sm_120 -gencode arch=compute_121,code=sm_121 "
        "-gencode arch=compute_121,code=compute_121")


def _tree(tmp_path: Path) -> Path:
    files = {
        "csrc/quantization/fp4/nvfp4_utils.cuh": '#include "../../vec.cuh"\n',
        "csrc/quantization/fp4/e2m1.cuh": "",
        "csrc/vec.cuh": "",
        "csrc/quantization/fp4/kernels.cu": '#include "nvfp4_utils.cuh"\n',
        "csrc/kv_cache.cu": '#  include "quantization/fp4/nvfp4_utils.cuh"\n',
        "csrc/sm100_only.cu": '#include "quantization/fp4/nvfp4_utils.cuh"\n',
        "csrc/unrelated.cu": '#include "vec.cuh"\n#include <cuda_fp8.h>\n',
        "csrc/moe/guard.cu": "",
    }
    return write_tree(tmp_path, files)


def test_units_including_a_touched_header_are_selected(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    built = {"csrc/quantization/fp4/kernels.cu", "csrc/kv_cache.cu", "csrc/unrelated.cu",
             "csrc/moe/guard.cu"}
    touched = ["CMakeLists.txt", "csrc/quantization/fp4/e2m1.cuh",
               "csrc/quantization/fp4/nvfp4_utils.cuh", "csrc/moe/guard.cu"]
    units, not_built = select_units(tree, touched, built, [tree / "csrc"])
    assert units == ["csrc/kv_cache.cu", "csrc/moe/guard.cu", "csrc/quantization/fp4/kernels.cu"]
    assert not_built == ["csrc/sm100_only.cu"]


def test_a_header_reached_through_another_header_selects_the_unit(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    units, _ = select_units(tree, ["csrc/vec.cuh"], {"csrc/unrelated.cu",
                            "csrc/quantization/fp4/kernels.cu"}, [tree / "csrc"])
    assert units == ["csrc/quantization/fp4/kernels.cu", "csrc/unrelated.cu"]
    graph = IncludeGraph([tree / "csrc"])
    closure = graph.closure(tree / "csrc/kv_cache.cu")
    assert (tree / "csrc/vec.cuh").resolve() in closure


NVCC_MISSING_CUTLASS = """In file included from csrc/quantization/fp4/nvfp4_quant_entry.cu:21:
csrc/cutlass_extensions/common.hpp:3:10: fatal error: cutlass/cutlass.h: No such file or directory
    3 | #include "cutlass/cutlass.h"
compilation terminated.
"""
NVCC_MISSING_OWN = 'x.cu(3): catastrophic error: cannot open source file "e2m1.cuh"\n'
PTXAS_FAILURE = ("ptxas /tmp/x.ptx, line 1467; error   : Instruction 'cvt with .e2m1x2' not "
                 "supported on .target 'sm_121'\nptxas fatal   : Ptx assembly aborted\n")


def _command(gencode: str) -> UnitCommand:
    return UnitCommand("csrc/x.cu", "_C", ("nvcc",), (gencode,))


def test_missing_headers_are_found_in_gcc_and_edg_messages() -> None:
    assert missing_headers(NVCC_MISSING_CUTLASS) == ["cutlass/cutlass.h"]
    assert missing_headers(NVCC_MISSING_OWN) == ["e2m1.cuh"]
    assert missing_headers(PTXAS_FAILURE) == []


def test_missing_cutlass_is_a_skip_that_names_the_header_and_the_pin() -> None:
    record = parse_record(RECORD)
    status, reason, missing = classify(_command("arch=compute_121,code=sm_121"), 1,
                                       NVCC_MISSING_CUTLASS, record, Path("/cuda"), "sm_121")
    assert status == "skipped-missing-headers"
    assert missing == ("cutlass/cutlass.h",)
    assert "cutlass/cutlass.h" in reason and "v4.7.1" in reason
    assert "VLLM_CUTLASS_SRC_DIR" in reason


def test_a_header_missing_from_the_tree_is_a_failure() -> None:
    record = parse_record(RECORD)
    status, reason, _ = classify(_command("arch=compute_121,code=sm_121"), 1, NVCC_MISSING_OWN,
                                 record, Path("/cuda"), "sm_121")
    assert status == "failed"
    assert "e2m1.cuh" in reason


def test_a_ptxas_error_fails_with_its_first_line() -> None:
    status, reason, _ = classify(_command("arch=compute_121,code=sm_121"), 255, PTXAS_FAILURE,
                                 parse_record(RECORD), Path("/cuda"), "sm_121")
    assert status == "failed"
    assert "cvt with .e2m1x2" in reason


def test_a_unit_not_compiled_natively_for_the_target_says_so() -> None:
    status, reason, _ = classify(_command("arch=compute_120f,code=sm_120f"), 0, "",
                                 parse_record(RECORD), Path("/cuda"), "sm_121")
    assert status == "ok"
    assert "not native sm_121" in reason


def test_header_providers() -> None:
    record = parse_record(RECORD)
    assert "cuBLAS" in (header_provider("cublas_v2.h", record, Path("/cuda")) or "")
    assert "torch" in (header_provider("torch/csrc/stable/tensor.h", record, Path("/c")) or "")
    assert header_provider("nvfp4_utils.cuh", record, Path("/cuda")) is None
