"""Guard stubs a library's own dispatcher never launches: accepted only when a rule named
before the compile covers them -- the project, the library's exact path in the wheel, the
kernel's mangled name read whole (its arch tag the template argument the dispatcher's branch
instantiates) and targets outside the dispatcher's branch all agree -- and refused otherwise."""

from __future__ import annotations

import pytest

from sparkbuild.flashinfer.jit_cache_wheel import JIT_CACHE_PROJECT
from sparkbuild.flashinfer.unreachable_stubs import MOE_FC_GEMM_SM75, rules_for
from sparkbuild.toolchain.kept_sass import LibraryCode
from sparkbuild.toolchain.kernel_policy import GUARD_STUB, refusals, unreachable_stubs
from sparkbuild.toolchain.sass import FunctionFacts, KernelCode
from sparkbuild.wheelhouse.verify import judged
from support.kernel_names import (
    PREFIX,
    SM75,
    SM75_AS_SUBSTITUTION,
    SM75_DEMANGLED,
    SM80_AFTER_AN_SM75_MMA,
    moe_fc_gemm,
)

SM80 = moe_fc_gemm("Sm80")
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
    (WHEEL, "fused_moe_120.so"),
    (WHEEL, "flashinfer_jit_cache/fused_moe_120.so"),
    (WHEEL, "flashinfer_jit_cache/jit_cache/sampling/fused_moe_120.so"),
    (WHEEL, "other/jit_cache/fused_moe_120/fused_moe_120.so"),
    (WHEEL, "x/flashinfer_jit_cache/jit_cache/fused_moe_120/fused_moe_120.so"),
    (WHEEL, LIBRARY + ".1"),
])
def test_the_rule_speaks_only_for_its_project_and_library(wheel: str, library: str) -> None:
    found = judged(wheel, library, _code(SM75), ["12.1a"])
    assert found.unreachable == ()
    assert found.refusals(allow_jit=False)[0].kernels == (SM75,)


@pytest.mark.parametrize("kernel", [
    SM75, moe_fc_gemm("Sm75", mode=1), SM75_AS_SUBSTITUTION,
    moe_fc_gemm("Sm75", arch="N7cutlass4arch4Sm75E"),  # spelt out, no substitution
])
def test_the_sm75_kernel_is_covered_however_its_arch_tag_is_spelt(kernel: str) -> None:
    assert MOE_FC_GEMM_SM75.covers(kernel)


@pytest.mark.parametrize("kernel", [
    *(moe_fc_gemm(tag) for tag in ("Sm80", "Sm89", "Sm90", "Sm100", "Sm120", "Sm70", "Sm750",
                                   "Sm7", "Sm75a")),
    SM80_AFTER_AN_SM75_MMA,                          # 4Sm75E in the Mma, Sm80 the arch tag
    moe_fc_gemm("Sm75", arch="NS_5archx4Sm75E"),     # cutlass::archx::Sm75
    moe_fc_gemm("Sm75", arch="NSP_4Sm75IiEE"),       # cutlass::arch::Sm75<int>
    moe_fc_gemm("Sm75", arch="NSP_4Sm75ENSP_4Sm80E"),  # six arguments
    moe_fc_gemm("Sm75", arch="4Sm75"),               # ::Sm75
    moe_fc_gemm("Sm75", arch="PNSP_4Sm75E"),         # cutlass::arch::Sm75*
    PREFIX + "NSP_4Sm80ENSP_4Sm75EEEEEvNT_6ParamsE",  # Sm80 fourth, Sm75 fifth
    SM75 + "x", SM75 + "i", SM75 + "Q", SM75 + ".cold", "x" + SM75,   # text after or before
    SM75.replace("vNT_6ParamsE", "vNT_7ParamsXE"),   # another parameter
    SM75.replace("vNT_6ParamsE", "iNT_6ParamsE"),    # another return type
    SM75.replace("_ZN7cutlass6KernelI", "_ZN7cutlass7Kernel2I"),   # another function
    SM75.replace("9MoeFCGemmI", "10MoeFCGemm2I"),    # another class template
    SM75_DEMANGLED,                                  # demangled: verify reads mangled names
    OTHER,
])
def test_any_other_kernel_is_not_covered(kernel: str) -> None:
    assert not MOE_FC_GEMM_SM75.covers(kernel)
    library = judged(WHEEL, LIBRARY, _code(SM75, kernel), ["12.1a"])
    (refusal,) = library.refusals(allow_jit=False)
    assert refusal.kernels == (kernel,)


def test_the_rule_says_its_kernel_exactly() -> None:
    said = MOE_FC_GEMM_SM75.to_dict()
    assert said["library"] == LIBRARY
    assert said["kernel"] == (
        "void cutlass::Kernel<cutlass::gemm::kernel::MoeFCGemm<_, _, _, cutlass::arch::Sm75, _> >"
        "(cutlass::gemm::kernel::MoeFCGemm<_, _, _, cutlass::arch::Sm75, _>::Params)")


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
