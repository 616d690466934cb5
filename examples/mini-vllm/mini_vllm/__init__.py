"""mini-vllm: a few CUDA kernels built like vLLM's, for sparkbuild's demo.

Importing works without a GPU; the kernels raise RuntimeError when none is present.
"""

from mini_vllm import _C

__all__ = ["_C", "build_info"]


def build_info() -> dict[str, object]:
    """What the extension was built with: the torch version and the CUDA archs."""
    return {
        "torch": _C.torch_version(),
        "cuda_archs": _C.cuda_archs().split(","),
        "nvfp4": hasattr(_C, "scaled_fp4_quant"),
        "nvfp4_mma": hasattr(_C, "nvfp4_mma_fragments"),
        "scaled_mm_sm120": hasattr(_C, "scaled_mm"),
    }
