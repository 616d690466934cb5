"""Here, on CPU, before any device time: does vLLM 0.20.0 import its engine, the FLASHINFER
backend, the Qwen3-MoE model and the MoE oracle beside flashinfer-python 0.6.18 in the node
set's venv (tiny_moe_run.sh builds the same venv on the device)?  Which optional projects did
that import pull in?  (It found llguidance: README in 2026-12-05-tiny-moe-vllm/.)

    VLLM_HAS_FLASHINFER_CUBIN=1 VENV/bin/python bench/flashinfer-gpu/tiny_moe_import_check.py
"""

import importlib
import sys
import time

started = time.time()
import flashinfer  # noqa: E402

MODULES = ("vllm", "vllm.model_executor.layers.fused_moe.oracle.unquantized",
           "vllm.model_executor.models.qwen3_moe", "vllm.v1.attention.backends.flashinfer",
           "vllm.v1.engine.core", "vllm.v1.engine.llm_engine", "vllm.v1.sample.sampler",
           "vllm.v1.structured_output", "vllm.v1.worker.gpu_model_runner")
for module in MODULES:
    importlib.import_module(module)
vllm = sys.modules["vllm"]
vfi = importlib.import_module("vllm.utils.flashinfer")

print("vllm", vllm.__version__, "flashinfer", flashinfer.__version__)
print("has_flashinfer", vfi.has_flashinfer(),
      "has_flashinfer_cutlass_fused_moe", vfi.has_flashinfer_cutlass_fused_moe())
for name in ("xgrammar", "llguidance", "numba", "tilelang", "cudnn", "nccl4py", "cutlass",
             "quack"):
    print(f"imported {name}: {name in sys.modules}")
print(f"{time.time() - started:.1f} s")
