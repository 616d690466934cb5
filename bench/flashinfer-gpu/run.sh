#!/usr/bin/env bash
# Device run (issue 19): flashinfer's modules built ahead by sparkbuild, loaded and run on a
# GPU with JIT disabled.  On the device machine (H200, sm_90; no network):
#   bash .devrun-fi/run.sh            # after bench/flashinfer-gpu/prep_here.sh, carry .devrun-fi
# 1. sparkbuild.flashinfer.builder.build_jit_cache builds the activation group's
#    silu_and_mul for 9.0a from the flashinfer-python 0.6.18 wheel's own sources and builder
#    (the device's torch, nvcc 13.0), packed as the flashinfer-jit-cache wheel;
# 2. both wheels go into a fresh --target site;
# 3. probe.py runs flashinfer.activation.silu_and_mul on the GPU with FLASHINFER_DISABLE_JIT=1,
#    no nvcc on PATH, CUDA_HOME pointing nowhere, an empty FLASHINFER_WORKSPACE_BASE, and
#    compares it with torch.  $OUT/flashinfer-gpu.json holds the result.
set -u
D=$(cd "$(dirname "$0")" && pwd); OUT=${OUT:-/tmp/fi-out}; W=/root/fi
mkdir -p $OUT $W; rm -rf $W/*
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target $W/tools $D/whl/*.whl \
  $D/sparkbuild-*.whl > $OUT/install-tools.txt 2>&1 || { tail $OUT/install-tools.txt; exit 1; }
SECONDS=0
PYTHONPATH=$W/tools python3 - $D $W > $OUT/build.json 2> $OUT/build-err.txt <<'PY'
import json, sys, time
from pathlib import Path
from sparkbuild.flashinfer.builder import AotRequest, build_jit_cache
FLASHINFER_SHA256 = "d5d26edb48f8def0bf28b2c94415aef7f0754e2cd9e3cb3d6e7081262d068aad"  # the pin
D, W = Path(sys.argv[1]), Path(sys.argv[2])
small = ("--only", "silu_and_mul", "--add-act", "true", "--add-moe", "false", "--add-comm",
         "false", "--add-misc", "false", "--add-xqa", "false", "--add-gemma", "false",
         "--add-oai-oss", "false")
(wheel,) = (D / "fi").glob("flashinfer_python-0.6.18-*.whl")
started = time.monotonic()
result = build_jit_cache(AotRequest(
    flashinfer_wheel=wheel, wheel_dir=D / "fi", python=Path(sys.executable), archs=("9.0a",),
    out=W / "out", work=W / "work", cuda_home=Path("/usr/local/cuda"), cuda_version="13.0",
    args=small, jobs=16, sha256=FLASHINFER_SHA256))
print(json.dumps({"wheel": result.wheel.name, "version": result.version,
                  "modules": result.modules, "archs": list(result.archs),
                  "seconds": round(time.monotonic() - started, 1),
                  "bytes": result.wheel.stat().st_size}))
PY
echo "build rc=$? in ${SECONDS} s"; cat $OUT/build.json; tail -5 $OUT/build-err.txt
python3 -m pip install -q --no-index --no-deps --no-compile --target $W/site $D/fi/*.whl \
  $W/out/flashinfer_jit_cache-*.whl > $OUT/install-site.txt 2>&1 || tail $OUT/install-site.txt
mkdir -p $W/workspace
env -i HOME=$W PATH=/usr/bin:/bin PYTHONPATH=$W/site CUDA_HOME=$W/no-cuda \
  FLASHINFER_DISABLE_JIT=1 FLASHINFER_NO_DOWNLOAD=1 FLASHINFER_WORKSPACE_BASE=$W/workspace \
  FLASHINFER_CUDA_ARCH_LIST=9.0a $(command -v python3) $D/probe.py $W/workspace \
  > $OUT/flashinfer-gpu.json 2> $OUT/probe-err.txt
echo "probe rc=$?"; cat $OUT/flashinfer-gpu.json; tail -5 $OUT/probe-err.txt
