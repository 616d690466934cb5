"""The guard stubs of flashinfer's modules that no sm_12x GPU launches, named before the
compile: each with the dispatcher's code that says so, read from flashinfer-python 0.6.18
(``FI/`` is its package, ``FI/data/csrc/`` its sources; ``TL/`` below is
``FI/data/csrc/nv_internal/tensorrt_llm``).

verify accepts a guard stub only when one of these rules names it
(:class:`sparkbuild.toolchain.kernel_policy.UnreachableStubs`); ``flashinfer-aot --list``
prints them beside their module, so they are known before anything compiles.
"""

from __future__ import annotations

from sparkbuild.flashinfer.jit_cache_wheel import (
    JIT_CACHE_DIR,
    JIT_CACHE_PACKAGE,
    JIT_CACHE_PROJECT,
)
from sparkbuild.toolchain.kernel_policy import ClassTemplateKernel, UnreachableStubs


def module_library(module: str) -> str:
    """A module's library, its path inside the jit-cache wheel."""
    return f"{JIT_CACHE_PACKAGE}/{JIT_CACHE_DIR}/{module}/{module}.so"


MOE_FC_GEMM_SM75 = UnreachableStubs(
    project=JIT_CACHE_PROJECT,
    library=module_library("fused_moe_120"),
    kernel=ClassTemplateKernel(
        function=("cutlass", "Kernel"),
        template=("cutlass", "gemm", "kernel", "MoeFCGemm"),
        arity=5, position=3, argument=("cutlass", "arch", "Sm75")),
    selected_for=(75, 80),
    what=("cutlass::Kernel<cutlass::gemm::kernel::MoeFCGemm<Mma, Epilogue, Swizzle, "
          "cutlass::arch::Sm75, GroupScheduleMode>>: its KernelArch argument Sm75"),
    why=("MoeGemmRunner::dispatchToArch takes the Sm75 instantiation only for 75 <= sm < 80 "
         "(TL/kernels/cutlass_kernels/moe_gemm/moe_gemm_template_dispatch.h:784-796) and "
         "sm >= 90 to the TMA warp-specialized grouped GEMM, Sm89 (FP8) or Sm80 (:824-965), "
         "but every branch is compiled; MoeFCGemm::operator() runs a kernel only when its "
         "arch tag is the one compiled for (Sm80/Sm89 at __CUDA_ARCH__ >= 900) and compiles "
         "the rest to CUTLASS_NOT_IMPLEMENTED, a trap (TL/cutlass_extensions/include/"
         "cutlass_extensions/gemm/kernel/moe_cutlass_kernel.h:624-667)"))

RULES = (MOE_FC_GEMM_SM75,)
"""Every rule verify applies to a flashinfer-jit-cache wheel."""


def rules_for(module: str) -> tuple[UnreachableStubs, ...]:
    """The rules that speak for ``module``'s library."""
    return tuple(rule for rule in RULES if rule.library == module_library(module))
