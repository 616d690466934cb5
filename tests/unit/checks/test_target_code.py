"""What the recorded CMake compiles of one extension target at the target
(sparkbuild.checks.target_code), and the code forecast's naming of a target that compiles
no code (sparkbuild.checks.code_forecast): a tiny recorder output, parsed as the recorder's."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.checks.check_plan import gencodes
from sparkbuild.checks.code_forecast import followed_projects, lacking_by_target
from sparkbuild.checks.target_code import native_for, target_arch_fact
from sparkbuild.toolchain import sass
from sparkbuild.toolchain.cmake_recorder import BuildRecord, parse_record

SPARK = "-gencode;arch=compute_121a,code=sm_121a"
PTX_80 = "-gencode;arch=compute_80,code=compute_80"
FA_CMAKE = """\
include(FetchContent)
FetchContent_Declare(vllm-flash-attn GIT_REPOSITORY https://example.invalid/fa.git GIT_TAG v1)
FetchContent_MakeAvailable(vllm-flash-attn)
# the project's own CMake defines _vllm_fa2_C (install COMPONENT _vllm_fa2_C)
install(CODE "" COMPONENT _vllm_fa2_C)
"""


def _recorder_output(tree: Path) -> str:
    """What cmake_recorder.cmake prints (kind, name, key, value, tab-separated)."""
    rows = [
        ("target", "_C", "sources", f"{tree}/csrc/a.cu;{tree}/csrc/b.cu;{tree}/csrc/ops.cpp"),
        ("source", f"{tree}/csrc/a.cu", "COMPILE_OPTIONS", SPARK),
        ("source", f"{tree}/csrc/b.cu", "COMPILE_OPTIONS", SPARK),
        ("target", "_partial_C", "sources", f"{tree}/csrc/p1.cu;{tree}/csrc/p2.cu"),
        ("source", f"{tree}/csrc/p1.cu", "COMPILE_OPTIONS", SPARK),
        ("source", f"{tree}/csrc/p2.cu", "COMPILE_OPTIONS", PTX_80),
        ("target", "_fa3_C", "sources", f"{tree}/fa/h1.cu;{tree}/fa/h2.cu;{tree}/fa/api.cpp"),
        ("target", "_host_C", "sources", f"{tree}/csrc/host.cpp"),
        ("custom", "triton_kernels", "runs", "OFF"),
        ("install", "triton_kernels", "destination", "vllm/third_party/triton_kernels"),
        ("custom", "_flashmla_C", "runs", "OFF"),
        ("custom", "_built_by_script_C", "runs", "ON"),
        ("declare", "vllm-flash-attn", f"declare@{tree}/cmake/fa.cmake",
         "GIT_REPOSITORY;https://example.invalid/fa.git;GIT_TAG;v1"),
        ("done", "-", "-", "-"),
    ]
    return "".join("\t".join(row) + "\n" for row in rows)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "cmake").mkdir()
    (tmp_path / "cmake" / "fa.cmake").write_text(FA_CMAKE, encoding="utf-8")
    return tmp_path


@pytest.fixture
def record(tree: Path) -> BuildRecord:
    return parse_record(_recorder_output(tree))


@pytest.mark.parametrize(("target", "fact", "units", "native"), [
    ("_C", "native", 2, 2),  # the .cpp is host code, no CUDA unit
    ("_partial_C", "partial", 2, 1),
    ("_fa3_C", "no_code", 2, 0),  # no arch list gives its units a -gencode
    ("_host_C", "host", 0, 0),
    ("triton_kernels", "python", 0, 0),  # a custom target that only installs
    ("_flashmla_C", "empty", 0, 0),
    ("_built_by_script_C", "host", 0, 0),  # a custom target that runs a command
    ("_vllm_fa2_C", "fetched", 0, 0),  # named where a fetched project is made available
    ("_nowhere_C", "undefined", 0, 0),
])
def test_each_target_is_classified_by_what_it_compiles_at_the_target(
        tree: Path, record: BuildRecord, target: str, fact: str, units: int,
        native: int) -> None:
    assert target_arch_fact(record, tree, target, ("12.1a",), gencodes(record, tree)) == (
        fact, units, native)


def test_the_classification_follows_the_target_arch(tree: Path, record: BuildRecord) -> None:
    # at 8.0 the PTX of compute_80 is no native code either, and sm_121a none at all
    assert target_arch_fact(record, tree, "_C", ("8.0",), gencodes(record, tree))[0] == "partial"


def test_a_target_a_file_defines_is_not_taken_for_a_fetched_one(tree: Path) -> None:
    (tree / "cmake" / "fa.cmake").write_text(
        FA_CMAKE + "add_library(_vllm_fa2_C MODULE x.cu)\n", encoding="utf-8")
    record = parse_record(_recorder_output(tree))
    assert target_arch_fact(record, tree, "_vllm_fa2_C", ("12.1a",), {})[0] == "undefined"


def test_native_for_needs_sass_of_every_target_arch() -> None:
    assert native_for(("arch=compute_121a,code=sm_121a",), ("12.1a",))
    assert not native_for(("arch=compute_80,code=compute_80",), ("12.1a",))
    assert not native_for(("arch=compute_121a,code=sm_121a",), ("12.1a", "9.0a"))


def test_the_forecast_names_every_unit_of_a_target_that_compiles_no_code(
        tree: Path, record: BuildRecord) -> None:
    units, lacking = lacking_by_target(record, tree, ("12.1a",), ())
    assert units == 6
    fa3 = lacking["_fa3_C"]
    assert [(c.unit, c.kind) for c in fa3] == [("fa/h1.cu", sass.NO_CODE),
                                               ("fa/h2.cu", sass.NO_CODE)]
    assert [c.unit for c in lacking["_partial_C"]] == ["csrc/p2.cu"]
    assert "_C" not in lacking
    _, narrowed = lacking_by_target(record, tree, ("12.1a",), ("_C",))
    assert narrowed == {}  # _fa3_C is not built


def test_followed_projects_are_those_whose_cmake_names_an_extension(tmp_path: Path) -> None:
    fa, cutlass, missing = tmp_path / "fa", tmp_path / "cutlass", tmp_path / "missing"
    fa.mkdir()
    cutlass.mkdir()
    (fa / "CMakeLists.txt").write_text("add_library(_vllm_fa2_C MODULE a.cu)\n")
    (cutlass / "CMakeLists.txt").write_text("project(cutlass) # not _vllm_fa2_Cx\n")
    sources = {"vllm-flash-attn": fa, "cutlass": cutlass, "gone": missing}
    names = ["vllm._C", "vllm.vllm_flash_attn._vllm_fa2_C"]
    assert followed_projects(sources, names) == ("vllm-flash-attn",)
    assert followed_projects(sources, []) == ()


def test_the_record_keeps_custom_targets_followed_projects_and_installs() -> None:
    record = parse_record("".join("\t".join(row) + "\n" for row in [
        ("custom", "_x_C", "runs", "OFF"), ("custom", "_x_C", "runs", "ON"),
        ("custom", "_x_C", "runs", "OFF"), ("followed", "VLLM-Flash-Attn", "dir", "/d/fa"),
        ("install", "_y_C", "destination", "vllm/a"), ("install", "_y_C", "destination",
                                                         "vllm/a"),
        ("install", "_y_C", "destination", "vllm/b")]))
    assert record.custom_targets == {"_x_C": True}  # once it runs something, it does
    assert record.followed == {"vllm-flash-attn": "/d/fa"}
    assert record.installs == {"_y_C": ["vllm/a", "vllm/b"]}
