#!/usr/bin/env bash
# Device run (issue 42, item 7, as far as a device without a vLLM build goes): the default
# recipe's model set, read by sparkbuild (sparkbuild.flashinfer.module_set), built at 9.0a
# by sparkbuild's flashinfer builder from the flashinfer-python 0.6.18 pin, and run on the
# GPU with JIT disabled.  The H200 is sm_90: of the model's set it runs the modules that are
# not sm_12x-only (the bf16 head-dim-256 prefill module and sampling); fused_moe_120 and
# the NVFP4 modules only run on sm_12x.  On the device machine (no network):
#   bash .devrun-fi2/model_run.sh      # after bench/flashinfer-gpu/prep_model_here.sh
#   DRY=1 bash bench/flashinfer-gpu/model_run.sh   # print what would run
# $OUT/model-build.json (the build), $OUT/model-probe.json (the probe), logs beside them.
set -u
D=$(cd "$(dirname "$0")" && pwd); OUT=${OUT:-/tmp/fi-out}; W=${FI_ROOT:-/root/fi2}
run() { if [ -n "${DRY:-}" ]; then echo "would run: $*"; else "$@"; fi; }
mkdir -p $OUT; [ -n "${DRY:-}" ] || { mkdir -p $W; rm -rf ${W:?}/*; }
export PYTHONUNBUFFERED=1
{ date -u; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__)'; nvcc --version | tail -1
} > $OUT/machine.txt 2>&1
run python3 -m pip install -q --no-index --no-deps --no-compile --target $W/tools \
  $D/whl/*.whl $D/sparkbuild-*.whl > $OUT/install-tools.txt 2>&1 || { tail $OUT/install-tools.txt; exit 1; }
SECONDS=0
BUILD=$(cat <<'PY'
import json, sys, time
from pathlib import Path
from sparkbuild.flashinfer.builder import AotRequest, build_jit_cache, pinned_flashinfer
from sparkbuild.flashinfer.module_set import recipe_set
from sparkbuild.recipe import load_recipe
D, W = Path(sys.argv[1]), Path(sys.argv[2])
recipe = load_recipe(D / "recipes" / "qwen38next.toml")  # the default recipe and its model
pin = pinned_flashinfer(recipe)
full = recipe_set(recipe)
chosen = tuple(m for m in full.modules if m.name.startswith("batch_prefill") or m.name == "sampling")
(wheel,) = (D / "fi").glob("flashinfer_python-0.6.18-*.whl")
started = time.monotonic()
result = build_jit_cache(AotRequest(
    flashinfer_wheel=wheel, wheel_dir=D / "fi", python=Path(sys.executable), archs=("9.0a",),
    out=W / "out", work=W / "work", cuda_home=Path("/usr/local/cuda"), cuda_version="13.0",
    jobs=16, sha256=pin.sha256, modules=chosen, cache_root=W / "cache"))
print(json.dumps({"model_set": full.names, "built_here": [m.name for m in chosen],
                  "result": result.to_dict(), "seconds": round(time.monotonic() - started, 1)},
                 indent=1))
PY
)
if [ -n "${DRY:-}" ]; then echo "would run: python3 - $D $W  (the model set at 9.0a: prefill + sampling)"
else PYTHONPATH=$W/tools python3 -c "$BUILD" $D $W > $OUT/model-build.json 2> $OUT/model-build-err.txt
  echo "build rc=$? in ${SECONDS} s"; tail -c 1500 $OUT/model-build.json; tail -5 $OUT/model-build-err.txt
  cp $W/work/aot.log $OUT/aot.log 2>/dev/null
fi
run python3 -m pip install -q --no-index --no-deps --no-compile --target $W/site $D/fi/*.whl \
  $W/out/flashinfer_jit_cache-*.whl > $OUT/install-site.txt 2>&1 || tail $OUT/install-site.txt
mkdir -p $W/workspace
run env -i HOME=$W PATH=/usr/bin:/bin PYTHONPATH=$W/site CUDA_HOME=$W/no-cuda \
  FLASHINFER_DISABLE_JIT=1 FLASHINFER_NO_DOWNLOAD=1 FLASHINFER_WORKSPACE_BASE=$W/workspace \
  FLASHINFER_CUDA_ARCH_LIST=9.0a $(command -v python3) $D/model_probe.py $W/workspace \
  > $OUT/model-probe.json 2> $OUT/model-probe-err.txt
echo "probe rc=$? total ${SECONDS} s"; cat $OUT/model-probe.json 2>/dev/null | head -80; tail -5 $OUT/model-probe-err.txt 2>/dev/null
