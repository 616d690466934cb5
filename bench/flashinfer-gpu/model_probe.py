"""The Spark model's flashinfer modules on a GPU, from sparkbuild's jit-cache, JIT disabled.

Run by model_run.sh on the device (H200, sm_90) in a clean environment: no nvcc on PATH,
CUDA_HOME pointing nowhere, FLASHINFER_DISABLE_JIT=1.  The jit-cache holds, built at 9.0a,
the modules of the default recipe's model set that run off sm_12x: the bf16 head-dim-256
prefill module (which vLLM's FLASHINFER backend plans for prefill, for decode with tensor
cores, and for MTP's verify) and ``sampling``.  Each is run against a float32 torch
reference with the shapes of one TP2 rank of the model (8 query heads, 1 KV head); then an
operation whose module the set does not hold (``norm``) must raise MissingJITCacheError.
argv[1] is FLASHINFER_WORKSPACE_BASE, which must hold no compiled object afterwards.
Prints one JSON object.
"""

from __future__ import annotations

import atexit
import importlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

workspace = Path(sys.argv[1])
flashinfer: Any = importlib.import_module("flashinfer")  # installed by model_run.sh
jit_cache: Any = importlib.import_module("flashinfer_jit_cache")
report: dict[str, Any] = {
    "gpu": torch.cuda.get_device_name(), "capability": list(torch.cuda.get_device_capability()),
    "torch": torch.__version__, "flashinfer": flashinfer.__version__,
    "jit_cache": jit_cache.__version__,
    "FLASHINFER_DISABLE_JIT": os.environ.get("FLASHINFER_DISABLE_JIT")}
QO_HEADS, KV_HEADS, HEAD_DIM, PAGE = 8, 1, 256, 16
DEVICE = "cuda"
torch.manual_seed(0)
atexit.register(lambda: print(json.dumps(report, indent=1)))
"""The report is printed however the probe ends: a stage that raises leaves the ones before."""


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Attention of one request in float32: q [n, H, D], k/v [m, KV, D]."""
    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,mhd->hnm", q.float(), k) / math.sqrt(q.shape[-1])
    if causal:
        n, m = q.shape[0], k.shape[0]
        mask = torch.ones(n, m, dtype=torch.bool, device=q.device).tril(m - n)
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.einsum("hnm,mhd->nhd", scores.softmax(-1), v)


def paged(lengths: list[int]) -> tuple[torch.Tensor, ...]:
    """A paged KV cache (NHD) holding requests of ``lengths`` tokens, and its tables."""
    pages = [math.ceil(n / PAGE) for n in lengths]
    indptr = torch.tensor([0, *torch.tensor(pages).cumsum(0).tolist()], dtype=torch.int32)
    indices = torch.randperm(sum(pages), dtype=torch.int32)
    last = torch.tensor([n - (p - 1) * PAGE for n, p in zip(lengths, pages, strict=True)],
                        dtype=torch.int32)
    cache = torch.randn(sum(pages), 2, PAGE, KV_HEADS, HEAD_DIM, dtype=torch.bfloat16,
                        device=DEVICE)
    return indptr.to(DEVICE), indices.to(DEVICE), last.to(DEVICE), cache


def gathered(cache: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor, i: int,
             length: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows = indices[indptr[i]:indptr[i + 1]].long()
    kv = cache[rows]  # [pages, 2, PAGE, KV, D]
    k = kv[:, 0].reshape(-1, KV_HEADS, HEAD_DIM)[:length]
    v = kv[:, 1].reshape(-1, KV_HEADS, HEAD_DIM)[:length]
    return k, v


def check(name: str, out: torch.Tensor, want: torch.Tensor) -> None:
    error = (out.float() - want).abs().max().item()
    report[name] = {"shape": list(out.shape), "max_abs_error": error,
                    "matches": bool(torch.allclose(out.float(), want, atol=3e-2, rtol=3e-2))}


started = time.monotonic()
workspace_buffer = torch.zeros(256 << 20, dtype=torch.uint8, device=DEVICE)
lengths = [37, 70, 129]
indptr, indices, last, cache = paged(lengths)

prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace_buffer, "NHD", backend="fa2")
qo_indptr = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32,
                         device=DEVICE)
prefill.plan(qo_indptr, indptr, indices, last, QO_HEADS, KV_HEADS, HEAD_DIM, PAGE,
             causal=True, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
q = torch.randn(sum(lengths), QO_HEADS, HEAD_DIM, dtype=torch.bfloat16, device=DEVICE)
out = prefill.run(q, cache)
want = torch.cat([reference(q[qo_indptr[i]:qo_indptr[i + 1]],
                            *gathered(cache, indptr, indices, i, n), causal=True)
                  for i, n in enumerate(lengths)])
torch.cuda.synchronize()
report["seconds_to_first_result"] = round(time.monotonic() - started, 2)
check("prefill", out, want)

decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace_buffer, "NHD",
                                                        use_tensor_cores=True, backend="fa2")
decode.plan(indptr, indices, last, QO_HEADS, KV_HEADS, HEAD_DIM, PAGE,
            q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
q1 = torch.randn(len(lengths), QO_HEADS, HEAD_DIM, dtype=torch.bfloat16, device=DEVICE)
out1 = decode.run(q1, cache)
want1 = torch.cat([reference(q1[i:i + 1], *gathered(cache, indptr, indices, i, n),
                             causal=False) for i, n in enumerate(lengths)])
check("decode_with_tensor_cores", out1, want1)

logits = torch.randn(64, 151_936, device=DEVICE)
top_k = torch.full((64,), 20, dtype=torch.int32, device=DEVICE)
top_p = torch.full((64,), 0.8, device=DEVICE)
# as vLLM's FlashInfer sampler calls it (vllm/v1/sample/ops/topk_topp_sampler.py:508-510):
# per-request k and p tensors, deterministic
samples = flashinfer.sampling.top_k_top_p_sampling_from_logits(logits, top_k, top_p,
                                                              deterministic=True)
allowed = logits.topk(20, dim=-1).indices
inside = (allowed == samples.view(-1, 1).long()).any(-1)
report["sampling"] = {"rows": int(samples.numel()), "inside_top_k": int(inside.sum().item()),
                      "matches": bool(inside.all().item())}


def outside(op: str, call: Any) -> dict[str, Any]:
    """An operation whose module the set does not hold: it must raise, not compile."""
    try:
        call()
    except Exception as exc:  # the class is what is recorded
        return {"op": op, "raised": type(exc).__name__, "message": str(exc)[:200]}
    return {"op": op, "raised": None}


report["outside_the_set"] = [
    outside("flashinfer.norm.rmsnorm (module norm)", lambda: flashinfer.norm.rmsnorm(
        torch.randn(4, 2048, dtype=torch.bfloat16, device=DEVICE),
        torch.ones(2048, dtype=torch.bfloat16, device=DEVICE))),
    # an int k takes flashinfer's top-k-first fast path (FI/sampling.py:1345-1356), which
    # loads the topk module (FI/topk.py:67); vLLM passes tensors, so the set leaves it out
    outside("top_k_top_p_sampling_from_logits with an int k (module topk)",
            lambda: flashinfer.sampling.top_k_top_p_sampling_from_logits(logits, 20, 0.8)),
]

maps = Path("/proc/self/maps").read_text().splitlines()
report["loaded_modules"] = sorted({line.split()[-1] for line in maps
                                   if "flashinfer_jit_cache" in line and line.endswith(".so")})
report["workspace_files"] = sorted(str(p.relative_to(workspace))
                                   for p in workspace.rglob("*") if p.is_file())
report["compiled_in_workspace"] = [f for f in report["workspace_files"]
                                   if f.endswith((".so", ".o", ".cubin"))]
report["ok"] = bool(report["prefill"]["matches"] and report["decode_with_tensor_cores"]["matches"]
                    and report["sampling"]["matches"]
                    and all(o["raised"] == "MissingJITCacheError"
                            for o in report["outside_the_set"])
                    and not report["compiled_in_workspace"])
