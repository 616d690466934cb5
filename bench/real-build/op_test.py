"""The ops the sm_121 series touches that run on sm_90, on the device's GPU (device side).

    python3 op_test.py OUT.json

shuffle_rows (``_moe_C``; its kernel, shuffleInputRowsKernel, carries the series' bounds
guard): source indices inside the input must copy that row; indices outside
``[0, num_src_rows)`` (-1, num_src_rows, num_src_rows + 7, 2**31 - 1) must give a row of
zeros, and nothing may fault.  The output is poisoned with NaN first, so an unwritten row
fails; fresh random inputs each case; compared exactly with a torch reference.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch


def reference(src: torch.Tensor, dst2src: torch.Tensor) -> torch.Tensor:
    rows = src.shape[0]
    valid = (dst2src >= 0) & (dst2src < rows)
    out = torch.zeros((dst2src.shape[0], src.shape[1]), dtype=src.dtype, device=src.device)
    out[valid] = src[dst2src[valid].long()]
    return out


def one_case(rows: int, hidden: int, dsts: int, dtype: torch.dtype, bad_share: float,
             generator: torch.Generator) -> dict[str, object]:
    src = torch.randn(rows, hidden, dtype=torch.float32, device="cuda", generator=generator)
    src = src.to(dtype)
    dst2src = torch.randint(0, rows, (dsts,), device="cuda", generator=generator,
                            dtype=torch.int32)
    bad = torch.rand(dsts, device="cuda", generator=generator) < bad_share
    choices = torch.tensor([-1, rows, rows + 7, 2**31 - 1], dtype=torch.int32, device="cuda")
    picks = torch.randint(0, len(choices), (dsts,), device="cuda", generator=generator)
    dst2src = torch.where(bad, choices[picks], dst2src)
    out = torch.full((dsts, hidden), float("nan"), dtype=dtype, device="cuda")
    torch.ops._moe_C.shuffle_rows(src, dst2src, out)
    torch.cuda.synchronize()
    expected = reference(src, dst2src)
    mismatched = int((out != expected).any(dim=1).sum().item())
    zero_rows_ok = bool((out[~((dst2src >= 0) & (dst2src < rows))] == 0).all().item())
    return {"rows": rows, "hidden": hidden, "dst_rows": dsts, "dtype": str(dtype),
            "out_of_range_rows": int((~((dst2src >= 0) & (dst2src < rows))).sum().item()),
            "mismatched_rows": mismatched, "out_of_range_rows_are_zero": zero_rows_ok,
            "passed": mismatched == 0 and zero_rows_ok}


def main() -> None:
    import vllm._moe_C  # type: ignore[import-not-found]  # noqa: F401  (torch.ops._moe_C)

    generator = torch.Generator(device="cuda")
    generator.manual_seed(int(time.time()))
    cases = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for rows, hidden, dsts, share in ((1, 128, 8, 0.5), (64, 4096, 512, 0.25),
                                          (1000, 7168, 8192, 0.1), (3, 2048, 3, 1.0),
                                          (257, 1536, 2049, 0.0)):
            cases.append(one_case(rows, hidden, dsts, dtype, share, generator))
    # A fault would poison the context: one more clean launch proves it is still healthy.
    torch.randn(1024, device="cuda").sum().item()
    result = {"device": torch.cuda.get_device_name(0), "cases": cases,
              "passed": sum(bool(c["passed"]) for c in cases), "total": len(cases)}
    with Path(sys.argv[1]).open("w") as out:
        json.dump(result, out, indent=1)
    print(f"shuffle_rows: {result['passed']}/{result['total']} cases match the torch reference "
          f"(out-of-range source rows -> zero rows) on {result['device']}")
    sys.exit(0 if result["passed"] == result["total"] else 1)


if __name__ == "__main__":
    main()
