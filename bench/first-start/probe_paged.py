"""flashinfer's paged prefill and decode, the two wrappers vLLM 0.20.0's FlashInfer backend
plans (v1/attention/backends/flashinfer.py), on the GPU from the flashinfer-jit-cache wheel
with JIT disabled, at the first-start model's shape (4 query heads, 2 KV heads, head_dim 64,
bf16, pages of 16 tokens).  Compared with attention computed by torch in fp32.

Run by aot_only.sh on the device after the wheel is built: argv[1] is the
FLASHINFER_WORKSPACE_BASE (it must hold no compiled object afterwards).  Prints one JSON
object.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from first_start import loaded_libraries  # beside this file

HEADS, KV_HEADS, HEAD_DIM, PAGE = 4, 2, 64, 16
LENGTHS = [37, 5, 64]  # one prompt per request; pages filled partly and whole


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Grouped-query attention of one request in fp32; q [n, H, D], k and v [m, KV, D]."""
    group = HEADS // KV_HEADS
    k, v = k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1)
    scores = torch.einsum("nhd,mhd->hnm", q.float(), k) / math.sqrt(HEAD_DIM)
    if causal:  # queries are the last n of the m positions
        n, m = q.shape[0], k.shape[0]
        mask = torch.arange(m)[None, :] > (torch.arange(n)[:, None] + m - n)
        scores = scores.masked_fill(mask.to(scores.device), float("-inf"))
    return torch.einsum("hnm,mhd->nhd", scores.softmax(-1), v)


def main() -> None:
    workspace = Path(sys.argv[1])
    flashinfer: Any = importlib.import_module("flashinfer")
    jit_cache: Any = importlib.import_module("flashinfer_jit_cache")
    report: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "flashinfer": flashinfer.__version__,
                              "jit_cache": jit_cache.__version__,
                              "FLASHINFER_DISABLE_JIT": os.environ.get("FLASHINFER_DISABLE_JIT")}
    torch.manual_seed(0)
    pages_per = [math.ceil(n / PAGE) for n in LENGTHS]
    cache = torch.randn(sum(pages_per), 2, PAGE, KV_HEADS, HEAD_DIM, dtype=torch.bfloat16,
                        device="cuda")  # NHD layout, K and V in one tensor
    indptr = torch.tensor([0, *torch.tensor(pages_per).cumsum(0).tolist()], dtype=torch.int32)
    indices = torch.arange(sum(pages_per), dtype=torch.int32, device="cuda")
    last = torch.tensor([n - PAGE * (p - 1) for n, p in zip(LENGTHS, pages_per, strict=True)],
                        dtype=torch.int32)

    def kv_of(request: int) -> tuple[torch.Tensor, torch.Tensor]:
        pages = cache[indptr[request]:indptr[request + 1]]
        k = pages[:, 0].reshape(-1, KV_HEADS, HEAD_DIM)[: LENGTHS[request]]
        v = pages[:, 1].reshape(-1, KV_HEADS, HEAD_DIM)[: LENGTHS[request]]
        return k, v

    buffer = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    started = time.monotonic()
    results: dict[str, Any] = {}
    # prefill: every request's whole prompt against its pages, causal (vLLM's prefill plan)
    prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(buffer, "NHD")
    qo_indptr = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()], dtype=torch.int32)
    prefill.plan(qo_indptr, indptr, indices, last, HEADS, KV_HEADS, HEAD_DIM, PAGE, causal=True,
                 sm_scale=1 / math.sqrt(HEAD_DIM), q_data_type=torch.bfloat16,
                 kv_data_type=torch.bfloat16, o_data_type=torch.bfloat16)
    q = torch.randn(sum(LENGTHS), HEADS, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    out = prefill.run(q, cache)
    expected = torch.cat([reference(q[qo_indptr[r]:qo_indptr[r + 1]], *kv_of(r), causal=True)
                          for r in range(len(LENGTHS))])
    results["prefill"] = {"backend": getattr(prefill, "_backend", None),
                          "max_abs_error": (out.float() - expected).abs().max().item()}
    # decode: one new query per request, tensor cores on (as vLLM plans it)
    decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(buffer, "NHD", use_tensor_cores=True)
    decode.plan(indptr, indices, last, HEADS, KV_HEADS, HEAD_DIM, PAGE,
                q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
                o_data_type=torch.bfloat16, sm_scale=1 / math.sqrt(HEAD_DIM))
    q1 = torch.randn(len(LENGTHS), HEADS, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    out1 = decode.run(q1, cache)
    expected1 = torch.cat([reference(q1[r:r + 1], *kv_of(r), causal=False)
                           for r in range(len(LENGTHS))])
    results["decode"] = {"max_abs_error": (out1.float() - expected1).abs().max().item()}
    torch.cuda.synchronize()
    report["seconds"] = round(time.monotonic() - started, 2)
    for entry in results.values():
        entry["matches"] = entry["max_abs_error"] < 2e-2
    report["results"] = results
    report["loaded_libraries"] = loaded_libraries()
    report["workspace_objects"] = sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*")
                                         if p.suffix in (".o", ".so"))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
