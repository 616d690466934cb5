"""flashinfer's silu_and_mul on the GPU from the flashinfer-jit-cache wheel, JIT disabled.

Run by run.sh in a clean environment (no nvcc on PATH, CUDA_HOME pointing nowhere,
FLASHINFER_DISABLE_JIT=1); argv[1] is FLASHINFER_WORKSPACE_BASE, which flashinfer writes its
JIT builds under: it must hold no compiled object afterwards (flashinfer still writes a
module's generated source and its log there).  Prints one JSON object.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path

import torch

workspace = Path(sys.argv[1])
report: dict[str, object] = {"gpu": torch.cuda.get_device_name(),
                             "capability": list(torch.cuda.get_device_capability()),
                             "torch": torch.__version__,
                             "FLASHINFER_DISABLE_JIT": os.environ.get("FLASHINFER_DISABLE_JIT")}
started = time.monotonic()
flashinfer = importlib.import_module("flashinfer")  # installed by run.sh, not typed
flashinfer_jit_cache = importlib.import_module("flashinfer_jit_cache")
spec = importlib.import_module("flashinfer.jit.activation").gen_act_and_mul_module("silu")
report.update(flashinfer=flashinfer.__version__, jit_cache=flashinfer_jit_cache.__version__,
              jit_cache_dir=str(flashinfer_jit_cache.get_jit_cache_dir()),
              aot_path=str(spec.aot_path), is_aot=bool(spec.is_aot))
torch.manual_seed(0)
d = 4096
x = torch.randn(128, 2 * d, dtype=torch.bfloat16, device="cuda")
y = flashinfer.activation.silu_and_mul(x)
torch.cuda.synchronize()
report["seconds_to_first_result"] = round(time.monotonic() - started, 2)
reference = torch.nn.functional.silu(x[:, :d].float()) * x[:, d:].float()
error = (y.float() - reference).abs().max().item()
report.update(shape=list(y.shape), max_abs_error=error,
              matches=bool(torch.allclose(y.float(), reference, atol=2e-2, rtol=2e-2)))
maps = Path("/proc/self/maps").read_text().splitlines()
report["loaded_modules"] = sorted({line.split()[-1] for line in maps
                                   if "flashinfer_jit_cache" in line and line.endswith(".so")})
report["workspace_files"] = sorted(str(p.relative_to(workspace))
                                   for p in workspace.rglob("*") if p.is_file())
print(json.dumps(report, indent=1))
