"""Guard stubs a library's own dispatcher never launches: accepted only when a rule named
before the compile covers them -- the project, the library, the kernel's whole mangled name
and targets outside the dispatcher's branch all agree -- and refused otherwise."""

from __future__ import annotations

import pytest

from sparkbuild.flashinfer.jit_cache_wheel import JIT_CACHE_PROJECT
from sparkbuild.flashinfer.unreachable_stubs import MOE_FC_GEMM_SM75, rules_for
from sparkbuild.toolchain.kept_sass import LibraryCode
from sparkbuild.toolchain.kernel_policy import GUARD_STUB, refusals, unreachable_stubs
from sparkbuild.toolchain.sass import FunctionFacts, KernelCode
from sparkbuild.wheelhouse.verify import judged


def _moe_fc_gemm(arch_tag: str) -> str:
    """A MoeFCGemm kernel's mangled name, shaped as fused_moe_120.so holds them (cut)."""
    return ("_ZN7cutlass6KernelINS_4gemm6kernel9MoeFCGemmINS1_11threadblock12MmaPipelinedINS1_9"
            "GemmShapeILi128ELi128ELi64EEEEENS4_37GemmBatchedIdentityThreadblockSwizzleENS12_"
            f"4{arch_tag}ELNS2_17GroupScheduleModeE0EEEEEvNT_6ParamsE")


SM75 = _moe_fc_gemm("Sm75")
SM80 = _moe_fc_gemm("Sm80")
OTHER = "_ZN7cutlass6KernelINS_4gemm6kernel7GemmSm75EEEvNT_6ParamsE"
WHEEL = "flashinfer_jit_cache-0.6.18+cu130-py3-none-linux_x86_64.whl"
LIBRARY = "flashinfer_jit_cache/jit_cache/fused_moe_120/fused_moe_120.so"


def _code(*stubs: str) -> LibraryCode:
    functions = tuple(FunctionFacts(name, "sm_121a", 12, 0, True, True) for name in stubs)
    kernels = tuple(KernelCode(name, ("sm_121a",)) for name in stubs)
    return LibraryCode(("sm_121a",), functions, kernels)


def test_the_sm75_moe_stubs_are_accepted_and_listed_with_their_rule() -> None:
    library = judged(WHEEL, LIBRARY, _code(SM75), ["12.1a"])
    assert library.trap_only_kernels == (SM75,)  # the fact stays
    assert library.refusals(allow_jit=False) == []
    assert library.unreachable == ((MOE_FC_GEMM_SM75, (SM75,)),)
    assert library.to_dict()["unreachable_stubs"][0]["kernels"] == [SM75]
    assert "7.5 <= SM < 8.0" in library.unreachable_lines()[0]


def test_a_stub_of_the_branch_that_runs_here_is_refused() -> None:
    library = judged(WHEEL, LIBRARY, _code(SM75, SM80), ["12.1a"])
    (refusal,) = library.refusals(allow_jit=False)
    assert refusal.kind == GUARD_STUB and refusal.kernels == (SM80,)
    assert refusal.trap_only == 1


def test_a_stub_of_another_kernel_class_is_refused() -> None:
    (refusal,) = judged(WHEEL, LIBRARY, _code(OTHER), ["12.1a"]).refusals(allow_jit=False)
    assert refusal.kernels == (OTHER,)


@pytest.mark.parametrize(("wheel", "library"), [
    ("vllm-0.29.0-cp38-abi3-linux_aarch64.whl", LIBRARY),
    (WHEEL, "flashinfer_jit_cache/jit_cache/fused_moe_100/fused_moe_100.so"),
    ("not a wheel", LIBRARY),
])
def test_the_rule_speaks_only_for_its_project_and_library(wheel: str, library: str) -> None:
    found = judged(wheel, library, _code(SM75), ["12.1a"])
    assert found.unreachable == ()
    assert found.refusals(allow_jit=False)[0].kernels == (SM75,)


def test_a_target_inside_the_branch_keeps_the_stub_refused() -> None:
    rules = [MOE_FC_GEMM_SM75]
    assert unreachable_stubs(rules, JIT_CACHE_PROJECT, LIBRARY, ["7.5"], [SM75]) == {}
    assert unreachable_stubs(rules, JIT_CACHE_PROJECT, LIBRARY, ["12.1a", "7.5"], [SM75]) == {}
    assert unreachable_stubs(rules, JIT_CACHE_PROJECT, LIBRARY, [], [SM75]) == {}
    assert unreachable_stubs(rules, JIT_CACHE_PROJECT, LIBRARY, ["9.0a", "12.1a"],
                             [SM75]) == {MOE_FC_GEMM_SM75: (SM75,)}


def test_refusals_leave_out_only_what_is_named_unreachable() -> None:
    (refusal,) = refusals((), allow_jit=False, stub_archs=("sm_121a",),
                          guard_stubs=(SM75, SM80), trap_only=(SM75, SM80),
                          unreachable=(SM75,))
    assert refusal.kernels == (SM80,) and refusal.trap_only == 1
    assert refusals((), allow_jit=False, guard_stubs=(SM75,), trap_only=(SM75,),
                    unreachable=(SM75,)) == []


def test_the_rule_is_named_with_its_module_before_the_compile() -> None:
    assert rules_for("fused_moe_120") == (MOE_FC_GEMM_SM75,)
    assert rules_for("fp4_quantization_121") == ()


def test_verify_lists_an_accepted_stub_once_and_refuses_the_rest() -> None:
    from pathlib import Path

    from sparkbuild.wheelhouse.verify import VerifyResult

    library = judged(WHEEL, LIBRARY, _code(SM75, SM80), ["12.1a"])
    result = VerifyResult(Path("wh"), 1, ("12.1a",), libraries=[library])
    lines = result.summary()
    assert sum(line.startswith("    UNREACHABLE 1 guard stub(s)") for line in lines) == 1
    assert [line for line in lines if line.startswith("    TRAP-ONLY")] == [
        f"    TRAP-ONLY {SM80}"]
    assert result.error is not None and SM80[:60] in str(result.error)
