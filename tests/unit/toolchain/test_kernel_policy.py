"""The kernel policy: which kernels are refused, worded once, and every judge (verify,
check, the code forecast, the unit watch) refusing exactly what it refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkbuild.checks.check import judge_unit
from sparkbuild.checks.check_plan import units_without_target_sass
from sparkbuild.checks.check_result import CheckResult
from sparkbuild.checks.code_forecast import CodeForecast
from sparkbuild.compile.unit_code_watch import ObjectReaders, object_refusal
from sparkbuild.jobplan.machine import MachineFacts, plan_build
from sparkbuild.toolchain.kernel_policy import (
    GUARD_STUB,
    Refusal,
    VerdictKind,
    because,
    coverage_refusals,
    kernel_names,
    refusals,
    refused,
)
from sparkbuild.toolchain.sass import (
    NATIVE,
    NO_CODE,
    PTX_ONLY,
    CoverageKind,
    FunctionFacts,
    KernelCode,
    coverage,
    coverage_at,
    summarize,
)
from sparkbuild.wheelhouse.verify import LibraryArchs, VerifyResult

MIXED = [KernelCode("_Z8native_kPf", ("sm_121a",)),
         KernelCode("_ZN2ns5ptx_kEPfi", (), ("compute_80",)),
         KernelCode("_Z8hopper_kPf", ("sm_90a",))]


@pytest.mark.parametrize(("kind", "allow_jit", "is_refused"), [
    (NATIVE, False, False), (NATIVE, True, False),
    (PTX_ONLY, False, True), (PTX_ONLY, True, False),
    (NO_CODE, False, True), (NO_CODE, True, True),
    (GUARD_STUB, False, True), (GUARD_STUB, True, True),
])
def test_the_verdict_of_each_kind(kind: VerdictKind, allow_jit: bool, is_refused: bool) -> None:
    assert refused(kind, allow_jit=allow_jit) is is_refused


def test_a_kind_the_policy_does_not_know_is_an_error_not_a_pass() -> None:
    read_back: Any = "trap"  # a kind from JSON, which mypy does not see
    with pytest.raises(ValueError, match="trap"):
        refused(read_back, allow_jit=True)


def test_no_code_is_refused_always_and_ptx_only_unless_allowed() -> None:
    found = (coverage(MIXED, "12.1a"),)
    assert because(coverage_refusals(found, allow_jit=False)) == (
        "1 kernel(s) with no code for 12.1a: _Z8hopper_kPf; 1 kernel(s) PTX only for 12.1a "
        "(compute_80, JIT-compiled at load): _ZN2ns5ptx_kEPfi")
    assert because(coverage_refusals(found, allow_jit=True)) == (
        "1 kernel(s) with no code for 12.1a: _Z8hopper_kPf")
    assert coverage_refusals((coverage(MIXED[:1], "12.1a"),), allow_jit=False) == []
    assert because([]) is None


def test_each_target_is_judged_on_its_own() -> None:
    # an 8.0 GPU loads neither the sm_121a nor the sm_90a code; the compute_80 PTX is allowed
    found = coverage_at(MIXED, ("12.1a", "8.0"))
    kinds = [(r.kind, r.at, r.kernels) for r in coverage_refusals(found, allow_jit=True)]
    assert kinds == [(NO_CODE, "12.1a", ("_Z8hopper_kPf",)),
                     (NO_CODE, "8.0", ("_Z8native_kPf", "_Z8hopper_kPf"))]


def test_guard_stubs_are_refused_first_and_whatever_allow_jit_says() -> None:
    found = refusals(coverage_at(MIXED[:1], ("12.1a",)), allow_jit=True,
                     stub_archs=("sm_121a",), guard_stubs=("_Z4trapv", "_Z4stubv"),
                     trap_only=("_Z4trapv",))
    assert found == [Refusal(GUARD_STUB, "sm_121a", ("_Z4trapv", "_Z4stubv"), trap_only=1)]
    assert found[0].describe() == ("2 kernel(s) for sm_121a only trap or print and exit "
                                   "(1 trap-only): _Z4trapv, _Z4stubv")
    both = refusals(coverage_at(MIXED, ("12.1a",)), allow_jit=False, stub_archs=("sm_121a",),
                    guard_stubs=("_Z4trapv",), trap_only=("_Z4trapv",))
    assert [r.kind for r in both] == [GUARD_STUB, NO_CODE, PTX_ONLY]


def test_long_names_are_cut_and_many_are_counted() -> None:
    names = [f"k{i}" for i in range(12)] + ["x" * 200]
    assert kernel_names(names[:2]) == "k0, k1"
    assert kernel_names(["x" * 200], width=10) == "x" * 10 + "..."
    shown = kernel_names(names, shown=10)
    assert shown.endswith("k9 and 3 more (--json names them all)")
    assert kernel_names(names).endswith("x" * 96 + "...")


# -- every judge refuses what the policy refuses ---------------------------------------

KERNEL = {NATIVE: KernelCode("k", ("sm_121a",)),
          PTX_ONLY: KernelCode("k", (), ("compute_80",)),
          NO_CODE: KernelCode("k", ("sm_90a",))}
GENCODE = {NATIVE: ("arch=compute_121a,code=sm_121a",),
           PTX_ONLY: ("arch=compute_80,code=compute_80",),
           NO_CODE: ("arch=compute_90a,code=sm_90a",)}
STUB = FunctionFacts("stub_k", "sm_121a", 4, 0, True, True)


def _verify_refuses(kernels: list[KernelCode], allow_jit: bool, stubs: tuple[str, ...] = ()
                    ) -> bool:
    library = LibraryArchs("w.whl", "lib.so", ("sm_121a",), (), sass_archs=("sm_121a",),
                           trap_only_kernels=stubs, guard_stub_kernels=stubs,
                           coverage=coverage_at(kernels, ("12.1a",)))
    result = VerifyResult(Path("/w"), 1, ("12.1a",), libraries=[library], allow_jit=allow_jit)
    return result.error is not None


def _watch_refuses(kernels: list[KernelCode], allow_jit: bool,
                   functions: tuple[FunctionFacts, ...] = ()) -> bool:
    readers = ObjectReaders(lambda _path: functions, lambda _path: kernels)
    return object_refusal(Path("/o.cu.o"), ("12.1a",), allow_jit, readers) is not None


def _check_refuses(kernels: list[KernelCode], allow_jit: bool,
                   functions: tuple[FunctionFacts, ...] = ()) -> bool:
    stub, uncovered = judge_unit(summarize(functions, "sm_121a"), coverage_at(kernels, ("12.1a",)),
                                 allow_jit=allow_jit)
    return stub is not None or uncovered is not None


def _forecast_and_check_refuse(kind: CoverageKind, allow_jit: bool) -> tuple[bool, bool]:
    lacking = units_without_target_sass({"csrc/u.cu": GENCODE[kind]}, ("12.1a",))
    forecast = CodeForecast("lacking" if lacking else "clear", 1, {"_C": lacking}
                            if lacking else {})
    plan = plan_build(
        MachineFacts(total_memory_bytes=64 << 30, available_memory_bytes=60 << 30, cores=4),
        job_memory_gib=6.0)
    check = CheckResult(Path("/t"), ("12.1a",), "13.0", [], [], plan, no_target_sass=lacking,
                        allow_jit=allow_jit)
    return bool(forecast.refusing(allow_jit=allow_jit)), bool(check.gencode_problems())


@pytest.mark.parametrize("allow_jit", [False, True])
@pytest.mark.parametrize("kind", [NATIVE, PTX_ONLY, NO_CODE])
def test_every_judge_refuses_a_kind_as_the_policy_does(kind: CoverageKind, allow_jit: bool) -> None:
    expected = refused(kind, allow_jit=allow_jit)
    assert _verify_refuses([KERNEL[kind]], allow_jit) is expected
    assert _watch_refuses([KERNEL[kind]], allow_jit) is expected
    assert _check_refuses([KERNEL[kind]], allow_jit) is expected
    assert _forecast_and_check_refuse(kind, allow_jit) == (expected, expected)


@pytest.mark.parametrize("allow_jit", [False, True])
def test_every_judge_of_machine_code_refuses_a_guard_stub(allow_jit: bool) -> None:
    assert _verify_refuses([KERNEL[NATIVE]], allow_jit, stubs=("stub_k",))
    assert _watch_refuses([KERNEL[NATIVE]], allow_jit, functions=(STUB,))
    assert _check_refuses([KERNEL[NATIVE]], allow_jit, functions=(STUB,))
    assert not _check_refuses([KERNEL[NATIVE]], allow_jit)


def test_check_fails_a_unit_on_the_stubs_the_policy_refuses_not_on_every_stub(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """check asks the policy: a stub the policy accepts (as it accepts those a rule names
    unreachable) does not fail the unit."""
    import sparkbuild.checks.check as check

    def accepting(found: object, **kwargs: object) -> list[Refusal]:
        return refusals(found, **{**kwargs, "unreachable": kwargs["guard_stubs"]})  # type: ignore[arg-type]

    summary = summarize((STUB,), "sm_121a")
    assert judge_unit(summary, coverage_at([KERNEL[NATIVE]], ("12.1a",)), allow_jit=False)[0]
    monkeypatch.setattr(check, "refusals", accepting)
    assert judge_unit(summary, coverage_at([KERNEL[NATIVE]], ("12.1a",)),
                      allow_jit=False) == (None, None)
