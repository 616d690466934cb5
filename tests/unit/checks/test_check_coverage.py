"""check's coverage per kernel and per unit's gencode: pure parts, no process started."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.checks.check import target_code
from sparkbuild.checks.check_plan import GencodeCoverage, units_without_target_sass
from sparkbuild.checks.check_result import CheckResult, UnitOutcome
from sparkbuild.errors import CommandFailed
from sparkbuild.jobplan.machine import MachineFacts, plan_build
from sparkbuild.toolchain.compile_flags import gencode_codes
from sparkbuild.toolchain.kernel_policy import because, coverage_refusals
from sparkbuild.toolchain.sass import KernelCode, coverage

MARLIN = "csrc/quantization/gptq_marlin/gptq_marlin.cu"
FP4 = "csrc/quantization/fp4/nvfp4_quant_kernels.cu"
GENCODES = {
    # vLLM's `8.0+PTX` at 12.1a: sm_80 SASS and compute_80 PTX
    MARLIN: ("arch=compute_80,code=sm_80", "arch=compute_80,code=compute_80"),
    FP4: ("arch=compute_121a,code=sm_121a",),
    "csrc/family.cu": ("arch=compute_120f,code=[sm_120f,compute_120f]",),
    "csrc/hopper.cu": ("arch=compute_90a,code=sm_90a",),
    "csrc/ptx_only.cu": ("arch=compute_80,code=compute_80",),
    "csrc/by_cmake_architectures.cu": (),
    "csrc/unevaluated.cu": ("?",),
}


@pytest.mark.parametrize(("gencode", "expected"), [
    (("arch=compute_80,code=[sm_80,compute_80]",), (("sm_80",), ("compute_80",))),
    (('arch=compute_90,code="sm_90,compute_90"',), (("sm_90",), ("compute_90",))),
    (("arch=compute_80,code=compute_80", "arch=compute_121a,code=sm_121a"),
     (("sm_121a",), ("compute_80",))),
    (("arch=compute_121a",), ((), ())),
])
def test_what_a_gencode_embeds(gencode: tuple[str, ...],
                               expected: tuple[tuple[str, ...], tuple[str, ...]]) -> None:
    assert gencode_codes(gencode) == expected


def test_a_bracketed_code_list_gives_its_sass_to_the_target() -> None:
    assert target_code(("arch=compute_120f,code=[sm_120f,compute_120f]",), "sm_121a") == "sm_120f"


def test_units_whose_gencode_gives_the_target_no_sass_are_known_before_compiling() -> None:
    lacking = units_without_target_sass(GENCODES, ("12.1a",))
    assert [(u.unit, u.kind, u.code) for u in lacking] == [
        ("csrc/hopper.cu", "none", None),
        ("csrc/ptx_only.cu", "ptx", "compute_80"),
        (MARLIN, "ptx", "compute_80"),
    ]
    assert lacking[2].describe() == (f"{MARLIN}: PTX only (compute_80) for 12.1a "
                                     "[arch=compute_80,code=sm_80 arch=compute_80,code=compute_80]")
    assert lacking[0].to_dict() == {"unit": "csrc/hopper.cu", "target": "12.1a",
                                    "gencode": ["arch=compute_90a,code=sm_90a"],
                                    "coverage": "none", "ptx_arch": None}
    # at 8.0 the Marlin unit is native, the 12.x ones have nothing
    at_80 = {u.unit: u.kind for u in units_without_target_sass(GENCODES, ("8.0",))}
    assert MARLIN not in at_80 and at_80[FP4] == "none"


MIXED_OBJECT = [KernelCode("_Z8native_kPf", ("sm_121a",)),
                KernelCode("_ZN2ns5ptx_kEPfi", (), ("compute_80",)),
                KernelCode("_Z8hopper_kPf", ("sm_90a",))]


def _result(units: list[UnitOutcome], lacking: list[GencodeCoverage], *, allow_jit: bool
            ) -> CheckResult:
    plan = plan_build(
        MachineFacts(total_memory_bytes=64 << 30, available_memory_bytes=60 << 30, cores=4),
        job_memory_gib=6.0, nvcc_threads=None, arch_count=1, requested_jobs=None)
    return CheckResult(Path("/t"), ("12.1a",), "13.0", [], units, plan,
                       no_target_sass=lacking, allow_jit=allow_jit)


def test_check_reports_coverage_per_unit_and_fails_on_a_ptx_only_unit() -> None:
    covered = (coverage(MIXED_OBJECT[:2], "12.1a"),)
    why = because(coverage_refusals(covered, allow_jit=False))
    unit = UnitOutcome("csrc/mixed.cu", "failed", why or "", coverage=covered,
                       coverage_failure=why)
    lacking = units_without_target_sass({MARLIN: GENCODES[MARLIN]}, ("12.1a",))
    result = _result([unit], lacking, allow_jit=False)
    error = result.error
    assert isinstance(error, CommandFailed)
    assert "csrc/mixed.cu: 1 kernel(s) PTX only" in error.what and "_ZN2ns5ptx_kEPfi" in error.what
    assert f"1 unit(s) of the build get no SASS for the target from their gencode: {MARLIN}" in (
        error.what)
    assert "failed to compile" not in error.what
    report = result.to_dict()
    assert report["coverage"] == {"12.1a": {"native": 1, "ptx": 1, "none": 0}}
    assert report["units"][0]["coverage"][0]["not_native"] == [
        {"kernel": "_ZN2ns5ptx_kEPfi", "coverage": "ptx", "ptx_arch": "compute_80"}]
    assert report["no_target_sass"][0]["unit"] == MARLIN
    summary = "\n".join(result.summary())
    assert "kernels 12.1a: 1 native, 1 ptx (compute_80), 0 none" in summary
    assert f"no SASS from the gencode: {MARLIN}: PTX only (compute_80)" in summary


def test_with_allow_jit_ptx_units_pass_and_a_unit_with_no_code_still_fails() -> None:
    covered = (coverage(MIXED_OBJECT[:2], "12.1a"),)
    unit = UnitOutcome("csrc/mixed.cu", "ok", "compiled", coverage=covered)
    ptx = units_without_target_sass({MARLIN: GENCODES[MARLIN]}, ("12.1a",))
    assert _result([unit], ptx, allow_jit=True).error is None
    none = units_without_target_sass({"csrc/hopper.cu": GENCODES["csrc/hopper.cu"]}, ("12.1a",))
    error = _result([unit], none, allow_jit=True).error
    assert error is not None and "csrc/hopper.cu: no code for 12.1a" in error.what


def test_with_unit_only_the_named_units_gencode_fails_the_check() -> None:
    lacking = units_without_target_sass(GENCODES, ("12.1a",))
    plan = plan_build(
        MachineFacts(total_memory_bytes=64 << 30, available_memory_bytes=60 << 30, cores=4),
        job_memory_gib=6.0, nvcc_threads=None, arch_count=1, requested_jobs=None)
    named = CheckResult(Path("/t"), ("12.1a",), "13.0", [],
                        [UnitOutcome(FP4, "ok", "compiled")], plan, selection="named",
                        no_target_sass=lacking)
    assert named.error is None
    assert len(named.to_dict()["no_target_sass"]) == 3  # reported all the same
    series = CheckResult(Path("/t"), ("12.1a",), "13.0", [],
                         [UnitOutcome(FP4, "ok", "compiled")], plan, no_target_sass=lacking)
    assert series.error is not None and MARLIN in series.error.what
