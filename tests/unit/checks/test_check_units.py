"""check's pure parts: reading the CMake record, building nvcc commands, choosing units,
and telling a missing dependency from a broken tree."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from corpus.builders import write_tree
from sparkbuild.checks.check import (
    classify,
    header_provider,
    missing_headers,
    target_code,
)
from sparkbuild.checks.check_plan import CheckPlan, unit_key
from sparkbuild.checks.check_result import CheckResult, UnitOutcome
from sparkbuild.checks.touched_units import IncludeGraph, cuda_units, gencode_changed, select_units
from sparkbuild.errors import CommandFailed, ToolchainError
from sparkbuild.jobplan.machine import MachineFacts, plan_build
from sparkbuild.toolchain.cmake_recorder import gencode_for, parse_record
from sparkbuild.toolchain.compile_flags import (
    UnitCommand,
    UnsupportedGenex,
    evaluate_genex,
    sabi_definition,
    source_gencode,
    unit_command,
)
from sparkbuild.toolchain.sass import SassFunction, SassSummary, parse_sass, summarize

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
    assert "nvidia-cusparse" in (header_provider("cusparse.h", record, Path("/cuda")) or "")
    assert "torch" in (header_provider("torch/csrc/stable/tensor.h", record, Path("/c")) or "")
    assert header_provider("nvfp4_utils.cuh", record, Path("/cuda")) is None


# -- choosing units by their gencode, and judging the machine code -------------------------


def test_units_whose_gencode_moved_are_chosen() -> None:
    before = {"a.cu": ("arch=compute_120,code=sm_120",), "b.cu": ("arch=compute_90a,code=sm_90a",),
              "gone.cu": ("arch=compute_120,code=sm_120",)}
    after = {"a.cu": ("arch=compute_121a,code=sm_121a",), "b.cu": ("arch=compute_90a,code=sm_90a",),
             "new.cu": ("arch=compute_121a,code=sm_121a",)}
    assert gencode_changed(before, after) == ["a.cu", "new.cu"]
    assert cuda_units({"a.cu", "bind.cpp", "k.cuh", "x/y.cu"}) == ["a.cu", "x/y.cu"]


def test_a_recorded_source_is_named_relative_to_the_scratch_tree() -> None:
    root = Path("/w/src")
    assert unit_key("/w/src/csrc/marlin/sm80_kernel_a.cu", root) == "csrc/marlin/sm80_kernel_a.cu"
    assert unit_key("csrc/a.cu", root) == "csrc/a.cu"
    assert unit_key("/w/cmake/_deps/q-src/gemm.cu", root) == "/w/cmake/_deps/q-src/gemm.cu"


@pytest.mark.parametrize(
    ("gencode", "expected"),
    [
        (("arch=compute_121a,code=sm_121a",), "sm_121a"),
        (("arch=compute_121f,code=sm_121f",), "sm_121f"),
        (("arch=compute_120f,code=sm_120f", "arch=compute_121a,code=sm_121a"), "sm_121a"),
        (("arch=compute_120f,code=sm_120f",), "sm_120f"),
        (("arch=compute_121,code=sm_121",), "sm_121"),
        (("arch=compute_90a,code=sm_90a",), None),
        (("arch=compute_121,code=compute_121",), None),
    ],
)
def test_the_sass_read_is_the_code_that_runs_on_the_target(
    gencode: tuple[str, ...], expected: str | None
) -> None:
    assert target_code(gencode, "sm_121a") == expected


def _result(units: list[UnitOutcome], stops: list[str] | None = None) -> CheckResult:
    plan = plan_build(
        MachineFacts(total_memory_bytes=64 << 30, available_memory_bytes=60 << 30, cores=4),
        job_memory_gib=6.0, nvcc_threads=None, arch_count=1, requested_jobs=None)
    return CheckResult(Path("/t"), ("12.1a",), "13.0", [], units, plan, stops or [])


TRAP = SassSummary("sm_121", 4, 44, 0, ("_Z6kernelv", "_Z7kernel2v"))
REAL = SassSummary("sm_121a", 4, 11952, 384, ())


def test_a_unit_that_compiled_with_real_kernels_passes() -> None:
    result = _result([UnitOutcome("csrc/fp4.cu", "ok", "compiled", sass=REAL)])
    assert result.error is None
    sass = result.to_dict()["units"][0]["sass"]
    assert sass == {"arch": "sm_121a", "functions": 4, "instructions": 11952,
                    "block_scaled_mma": 384, "trap_only_kernels": [], "guard_stub_kernels": []}


def test_trap_only_kernels_fail_the_check_and_are_named() -> None:
    result = _result([UnitOutcome("csrc/fp4.cu", "failed", "trap", sass=TRAP,
                                  guard_stubs=TRAP.trap_only_kernels)])
    error = result.error
    assert isinstance(error, CommandFailed)
    assert "_Z6kernelv" in error.what and "_Z7kernel2v" in error.what
    sass = result.to_dict()["units"][0]["sass"]
    assert sass["trap_only_kernels"] == ["_Z6kernelv", "_Z7kernel2v"]
    assert sass["guard_stub_kernels"] == ["_Z6kernelv", "_Z7kernel2v"]


def _function(name: str, body: str, arch: str = "sm_121") -> SassFunction:
    lines = [f"        Function : {name}"]
    lines += [f"        /*{16 * i:04x}*/  {text} ;" for i, text in enumerate(body.split("|"))]
    (function,) = parse_sass("\n".join(["\tarch = " + arch, *lines]))
    return function


def test_guard_stubs_are_kernels_that_only_print_and_trap_or_exit() -> None:
    printf_exit = _function("_Z4stubv", "LDC R1, c[0x0][0x37c]|CALL.ABS.NOINC R2|EXIT")
    printf_trap = _function("_Z4trapv", "CALL.ABS.NOINC R2|BPT.TRAP 0x1|EXIT")
    real = _function("_Z4realv", "LDG.E R2, desc[UR4][R2.64]|STG.E desc[UR4][R4.64], R2|EXIT")
    helper = _function("_Z6helperv", "CALL.ABS.NOINC R2|RET.REL.NODEC R20 0x0")
    empty = _function("_Z5emptyv", "EXIT")
    other = _function("_Z5otherv", "CALL.ABS.NOINC R2|EXIT", arch="sm_90a")
    functions = [printf_exit, printf_trap, real, helper, empty, other]
    assert summarize(functions, "sm_121").guard_stub_kernels == ("_Z4stubv", "_Z4trapv")
    assert printf_trap.is_trap_only and not printf_exit.is_trap_only


def test_a_check_that_compiled_nothing_is_not_a_pass() -> None:
    assert isinstance(_result([]).error, ToolchainError)
    only_not_built = _result([UnitOutcome("csrc/sm100.cu", "not-built", "no arch")])
    assert only_not_built.error is not None
    assert "no unit was compiled" in only_not_built.error.what


def test_a_unit_skipped_for_headers_fails_and_says_how_to_get_them() -> None:
    result = _result([UnitOutcome("a.cu", "ok", "compiled", sass=REAL),
                      UnitOutcome("b.cu", "skipped-missing-headers", "cutlass/cutlass.h")])
    error = result.error
    assert isinstance(error, ToolchainError)
    assert "VLLM_CUTLASS_SRC_DIR" in (error.hint or "")
    assert "nvidia-cutlass" in (error.hint or "")


def test_a_configure_that_would_stop_is_not_a_pass() -> None:
    result = _result([UnitOutcome("a.cu", "ok", "compiled", sass=REAL)],
                     ["GCC >= 13 is required to build vLLM with CUDA (found 12.2.0)"])
    error = result.error
    assert isinstance(error, ToolchainError)
    assert "GCC >= 13" in error.what and "CXX" in (error.hint or "")


RECORD_MORE = "\n".join([
    "target\t_C\tkind\tMODULE",
    "target\t_C\tsources\t/w/src/csrc/gen/sm80_kernel_a.cu;csrc/b.cu",
    "target\t_C\tsources\tcsrc/b.cu;csrc/c.cu",
    "target\t_C\tlinks\tPRIVATE;torch;CUDA::cudart",
    "tprop\t_C\tCOMPILE_OPTIONS\t-DFROM_PROPERTY",
    "imported\ttorch\tkind\tSHARED;IMPORTED",
    "tprop\ttorch\tINTERFACE_LINK_LIBRARIES\ttorch_cpu_library",
    "tprop\ttorch_cpu_library\tINTERFACE_COMPILE_DEFINITIONS\t"
    "$<TARGET_PROPERTY:torch_cpu,INTERFACE_COMPILE_DEFINITIONS>",
    "tprop\ttorch_cpu\tINTERFACE_COMPILE_DEFINITIONS\tUSE_DISTRIBUTED;USE_C10D_GLOO",
    "declare\tcutlass\tdeclare@/nonexistent/CMakeLists.txt\tGIT_REPOSITORY;https://x;GIT_TAG;v1",
    "generator\t/w/src/csrc/gen/generate_kernels.py\tcommand\t [==[COMMAND]==]",
    "unknown\tpybind11_add_module\targs\t_C;MODULE;a.cu",
    "variable\tCMAKE_CUDA_FLAGS\tvalue\t -DONNX_NAMESPACE=onnx_c2 --expt-extended-lambda "
    "-gencode arch=compute_121a,code=sm_121a",
    "done\t.\t.\t.",
])


def test_record_of_targets_links_properties_and_torchs_interface() -> None:
    record = parse_record(RECORD_MORE)
    target = record.targets["_C"]
    assert target.kind == "MODULE"
    assert target.sources == ["/w/src/csrc/gen/sm80_kernel_a.cu", "csrc/b.cu", "csrc/c.cu"]
    assert target.links == ["torch", "CUDA::cudart"]
    assert target.properties == {"COMPILE_OPTIONS": "-DFROM_PROPERTY"}
    assert set(record.imported) == {"torch", "torch_cpu_library", "torch_cpu"}
    (declaration,) = record.declarations
    assert (declaration.name, declaration.method) == ("cutlass", "declare")
    assert declaration.args == ("GIT_REPOSITORY", "https://x", "GIT_TAG", "v1")
    assert record.generators == ["/w/src/csrc/gen/generate_kernels.py"]
    assert record.unknown_commands == ["pybind11_add_module"]
    assert record.complete
    command = unit_command(record, target, "csrc/b.cu", tree=Path("/t"), nvcc=Path("nvcc"),
                           obj=Path("/w/b.o"), build_type="Release", extra_system_includes=[])
    for flag in ("-D_C_EXPORTS", "-DUSE_DISTRIBUTED", "-DUSE_C10D_GLOO", "-DFROM_PROPERTY",
                 "--expt-extended-lambda", "-DONNX_NAMESPACE=onnx_c2"):
        assert flag in command.argv, flag
    assert command.gencode == ("arch=compute_121a,code=sm_121a",)
    assert source_gencode(record, target, "csrc/b.cu") == command.gencode
    assert not parse_record("target\t_C\tsources\ta.cu\n").complete


@pytest.mark.parametrize(("archs", "native"), [
    (("12.1a",), "sm_121a"), (("12.1a", "9.0a"), "sm_121a"), (("9.0a", "12.1a"), "sm_121a"),
    (("8.0+PTX", "12.1f"), "sm_121f"), (("12.1",), "sm_121"),
])
def test_check_reads_the_sparks_code_whatever_the_order_of_the_archs(
        archs: tuple[str, ...], native: str) -> None:
    plan = types.SimpleNamespace(archs=archs)
    assert CheckPlan.native_code.fget(plan) == native  # type: ignore[attr-defined]


def test_a_trap_without_exit_is_a_guard_stub_too() -> None:
    # The example's FP4 kernel at plain sm_121: printf and a trap, nothing after it.
    trap_only = _function("_Z4trapv", "CALL.ABS.NOINC R2|BPT.TRAP 0x1")
    assert trap_only.is_trap_only and trap_only.is_guard_stub
    assert summarize([trap_only], "sm_121").guard_stub_kernels == ("_Z4trapv",)
