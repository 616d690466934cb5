#!/usr/bin/env bash
# Device side of issue 42, item 7 (README in 2026-12-05-tiny-moe-vllm/): the tiny MoE model's
# flashinfer set built at 9.0a by sparkbuild's builder, vLLM 0.20.0 started on it with
# FLASHINFER_DISABLE_JIT=1 and the FLASHINFER attention backend, its tokens against
# transformers'.  The machine goes back 30 s after a call returns, so call 1 starts one
# detached chain and every later call hands over one part and watches; no call waits on a
# decision here.  Parts: prep_tiny_moe_here.sh (.cache/tm/pN/pN.tar, one carried a call).
#   call 1:   carry [".cache/tm/p0"]  bash bench/flashinfer-gpu/tiny_moe_run.sh receive && \
#                                     bash bench/flashinfer-gpu/tiny_moe_run.sh start 5
#   call N:   carry [".cache/tm/pN"]  ... receive && ... watch 5
#   last:     (no carry)              ... watch 400   (until the chain ends: results in $OUT)
#   DRY=1 TM_ROOT=DIR OUT=DIR [TM_CARRY=DIR] bash bench/flashinfer-gpu/tiny_moe_run.sh ...   # here: the parts
#             are received and unpacked for real, every build, install and start is printed
# The chain: the set's build (tiny_moe_build.py) || the model and transformers' reference on
# the GPU || the node's venv (the node set linked from the image and carried, flashinfer
# 0.6.18, vLLM 0.20.0's wheel, all --no-deps), then three starts of vLLM, each in runs/NAME:
#   A  jit cache "set" (the set's modules at 9.0a), vLLM's own MoE choice (FlashInfer CUTLASS
#      on sm_90 once has_flashinfer() holds: VLLM_HAS_FLASHINFER_CUBIN=1, the node profile's)
#   B  jit cache "set", VLLM_USE_FLASHINFER_MOE_FP16=0 (vLLM's Triton MoE)
#   C  jit cache "set-fa3" (+ the fa3 prefill twin), VLLM_USE_FLASHINFER_MOE_FP16=0
# run in the order C, B, A (the tokens first, should the hold end early); RESULT.json after each
set -u
S=${TM_ROOT:-/root/tm} D=$(cd "$(dirname "$0")" && pwd) OUT=${OUT:-/tmp/tm-out}
REPO=$(cd "$D/../.." && pwd); C=${TM_CARRY:-$REPO/.cache/tm}
mkdir -p $S/parts $S/x $OUT
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
run() { if [ -n "${DRY:-}" ]; then echo "would run: $*"; else "$@"; fi; }
log() { echo "$(( $(date +%s) - $(cat $S/start 2>/dev/null || date +%s) )) s: $*" | tee -a $S/chain.log; }
have() { [ -f $S/parts/$1.ok ]; }
all_parts() { [ -f $S/x/node/parts.txt ] || return 1
  while read -r name size sha; do have ${name%.tar} || return 1; done < $S/x/node/parts.txt; }
V=$S/venv W=$S/build
vllm_run() {  # NAME JIT_WHEEL SETTING [VAR=VALUE ...]: one start of vLLM, its evidence
  local name=$1 wheel=$2 setting=$3; shift 3
  local P=$S/runs/$name; rm -rf $P; mkdir -p $P/fi-workspace $P/no-cuda/bin
  echo "$setting" > $P/setting.txt
  run $V/bin/python -m pip install -q --no-index --no-deps --force-reinstall $wheel > $P/jit-install.txt 2>&1
  ( source $V/bin/activate 2>/dev/null
    export FLASHINFER_DISABLE_JIT=1 FLASHINFER_NO_DOWNLOAD=1 FLASHINFER_WORKSPACE_BASE=$P/fi-workspace
    export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_HAS_FLASHINFER_CUBIN=1 VLLM_USE_FLASHINFER_SAMPLER=1
    export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
    export FIRST_START_SOCKET_LOG=$P/sockets.jsonl FIRST_START_NVCC_LOG=$P/nvcc.log
    export TINY_MOE_MISSING_LOG=$P/missing.jsonl
    # a node with no compiler: no directory holding nvcc on PATH; CUDA_HOME's nvcc is the
    # shim that logs and fails (flashinfer's JIT would call $CUDA_HOME/bin/nvcc)
    PATH=$(echo "$PATH" | tr : '\n' | while read -r d; do [ -x "$d/nvcc" ] || printf '%s:' "$d"; done)
    export PYTHONPATH=$S/bin/guard PATH=${PATH%:} CUDA_HOME=$P/no-cuda TRITON_CACHE_DIR=$P/triton-cache
    export CUDA_CACHE_PATH=$P/driver-jit-cache
    for kv in "$@"; do export "$kv"; done
    ln -sf $S/bin/shim/nvcc $P/no-cuda/bin/nvcc
    which nvcc > $P/which-nvcc.txt 2>&1
    env | grep -E '^(FLASHINFER|TRITON|VLLM|CUDA_HOME|PYTHONPATH)' | sort > $P/env.txt
    run timeout 300 python $S/bin/tiny_moe_vllm.py run $S/model --out $P/vllm.json > $P/vllm.log 2>&1
    echo "vllm rc=$?" >> $P/vllm.log )
  [ -n "${DRY:-}" ] && return 0
  $V/bin/python - $P "$(basename $wheel)" <<'PY'
import json, sys
from pathlib import Path
p, wheel = Path(sys.argv[1]), sys.argv[2]
def lines(name): return (p / name).read_text(errors="replace").splitlines() if (p / name).is_file() else []
log = lines("vllm.log")
sockets = [json.loads(l) for l in lines("sockets.jsonl")]
files = lambda d: sorted(str(f) for f in (p / d).rglob("*") if f.is_file()) if (p / d).is_dir() else []
json.dump({"jit_cache_installed": wheel,
           "flashinfer_jit_files": files("fi-workspace"),
           "nvcc_calls": len(lines("nvcc.log")), "nvcc_log": lines("nvcc.log"),
           "outbound_connections": [s for s in sockets if s["kind"] != "udp_connect"],
           "udp_route_probes": [s for s in sockets if s["kind"] == "udp_connect"],
           "triton_cache_files": len(files("triton-cache")),
           "driver_jit_cache_files": len(files("driver-jit-cache")),
           "missing_jit_modules_raised": [json.loads(l)["module"] for l in lines("missing.jsonl")],
           "missing_jit_cache_lines": [l for l in log if "MissingJITCacheError" in l][:20],
           "moe_backend_lines": [l for l in log if "MoE" in l and ("backend" in l or "Using" in l)][:10],
           "attention_backend_lines": [l for l in log if "backend" in l.lower() and "FLASHINFER" in l.upper() and "MoE" not in l][:10],
           "vllm_rc": next((l.split("=")[1] for l in log if l.startswith("vllm rc=")), None),
           "note": "Triton JIT-compiles vLLM's own Triton kernels (not flashinfer's): counted"},
          open(p / "evidence.json", "w"), indent=2)
PY
}
collect() {  # the results into $OUT: at most 8 files
  R=$S/results; rm -rf $R; mkdir -p $R/runs
  cp $S/chain.log $S/machine.txt $S/build.json $S/model.json $S/reference.json $S/RESULT.json \
     $S/stage.txt $S/pip-check.txt $S/x/node/model-set-12.1a.json $S/x/node/sparkbuild-commit.txt \
     $S/config-diff.txt $R/ 2>/dev/null
  tail -c 60000 $S/build-err.txt > $R/build-err-tail.txt 2>/dev/null
  cp $W/work/aot.log $R/aot.log 2>/dev/null; cp $W/work/units.json $R/units.json 2>/dev/null
  for P in $S/runs/*; do [ -d $P ] || continue; n=$(basename $P); mkdir -p $R/runs/$n
    cp $P/vllm.json $P/evidence.json $P/env.txt $P/setting.txt $P/which-nvcc.txt $P/jit-install.txt $R/runs/$n/ 2>/dev/null
    tail -c 150000 $P/vllm.log > $R/runs/$n/vllm-log-tail.txt 2>/dev/null; done
  tar -C $S -czf $OUT/results.tar.gz results
  cp $S/RESULT.json $S/chain.log $OUT/ 2>/dev/null
}
case $1 in
receive)  # each carried part once: checked against p0's list, unpacked into $S/x
  for f in $C/p*/p*.tar; do [ -f "$f" ] || continue; n=$(basename $f .tar)
    have $n && { echo "$n already here"; continue; }
    cp $f $S/parts/.$n.tar && mv $S/parts/.$n.tar $S/parts/$n.tar
    if [ $n != p0 ] && [ -f $S/x/node/parts.txt ]; then
      want=$(awk -v n=$n.tar '$1 == n {print $3}' $S/x/node/parts.txt)
      got=$(sha256sum < $S/parts/$n.tar | cut -c1-64)
      [ "$want" = "$got" ] || { echo "$n: sha256 $got, the list says $want"; exit 1; }
    fi
    tar -C $S/x -xf $S/parts/$n.tar && rm $S/parts/$n.tar && touch $S/parts/$n.ok &&
      echo "received $n ($(stat -c %s $f) bytes)"
  done ;;
start)  # call 1: the machine, the chain's own copy of the scripts, the chain detached
  have p0 || { echo "p0 is not here"; exit 1; }
  { date -u; nproc; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, torch.version.cuda, "transformers", transformers.__version__)'
    nvcc --version | tail -1; ldd --version | head -1; } > $S/machine.txt 2>&1
  cat $S/machine.txt
  rm -rf $S/bin && mkdir -p $S/bin/recipe && cp $D/tiny_moe_*.py $D/tiny_moe_run.sh $S/bin/ &&
    cp $REPO/bench/first-start/first_start.py $REPO/bench/first-start/image_view.py \
       $REPO/bench/first-start/missing_wheels.py $S/bin/ &&
    cp -r $REPO/bench/first-start/guard $REPO/bench/first-start/shim $S/bin/ &&
    cp $D/tiny-moe.toml $D/tiny-moe-config.json $S/bin/recipe/ || exit 1
  date +%s > $S/start
  if [ -n "${DRY:-}" ]; then TM_D=$S/bin bash $S/bin/tiny_moe_run.sh chain; exit 0; fi
  setsid nohup bash $S/bin/tiny_moe_run.sh chain > $S/chain.out 2>&1 < /dev/null &
  bash $D/tiny_moe_run.sh watch $2 ;;
watch)
  end=$(( $(date +%s) + $2 ))
  while [ ! -f $S/chain.rc ] && [ "$(date +%s)" -lt $end ]; do sleep 5
    echo "$(( $(date +%s) - $(cat $S/start) )) s: $(tail -1 $S/chain.log 2>/dev/null)"; done
  cat $S/chain.log 2>/dev/null; [ -f $S/chain.rc ] && echo "chain rc=$(cat $S/chain.rc)"
  collect; tail -3 $S/chain.out 2>/dev/null ;;
chain)
  T=$S/x; PYTOOLS=$S/tools
  # 1. sparkbuild and its imports, then the set at 9.0a (in the background)
  run python3 -m pip install -q --no-index --no-deps --no-compile --target $PYTOOLS $T/tools/*.whl \
    > $S/tools-install.txt 2>&1 || { log "tools install failed"; echo tools > $S/chain.rc; exit 1; }
  log "tools installed; building the set at 9.0a"
  ( run env PYTHONPATH=$PYTOOLS python3 $S/bin/tiny_moe_build.py $S/bin/recipe/tiny-moe.toml \
      $T/fi $W $S/build.json > $S/build-out.txt 2> $S/build-err.txt
    echo $? > $S/build.rc; log "build rc=$(cat $S/build.rc): $(tail -1 $S/build-out.txt)" ) &
  # 2. the model (no download) and transformers' reference on the GPU, the image's python
  ( run python3 $S/bin/first_start.py write-model $S/model --arch qwen3_moe --out $S/model.json > /dev/null 2>&1
    diff <(python3 -m json.tool --sort-keys $S/bin/recipe/tiny-moe-config.json) \
         <(python3 -m json.tool --sort-keys $S/model/config.json) > $S/config-diff.txt 2>&1
    echo "config.json against the recipe's: rc=$?" >> $S/config-diff.txt
    run python3 $S/bin/first_start.py reference $S/model --out $S/reference.json --device cuda > $S/reference.log 2>&1
    log "model and reference rc=$?: $(head -c 300 $S/reference.json 2>/dev/null | tr -d '\n ')" ) &
  # 3. the node's venv once every part is here (the node set, flashinfer, vLLM's wheel)
  if [ -n "${DRY:-}" ]; then all_parts && log "all parts here" || log "would wait for the parts"
  else until all_parts; do sleep 3; done; log "all parts here"; fi
  run python3 -m venv $V
  run env -u PYTHONPATH PYTHONPATH=$PYTOOLS python3 $S/bin/image_view.py --list $T/node/image-view.txt \
    --view $S/view --venv $V --json $S/image-view.json > $S/stage.txt 2>&1
  cat $T/whlchunks/chunk.* > $S/vllm-0.20.0-cp38-abi3-manylinux_2_35_x86_64.whl 2>/dev/null
  (cd $S && sha256sum -c $T/node/vllm-wheel.sha256) >> $S/stage.txt 2>&1
  run env -u PYTHONPATH $V/bin/python -m pip install -q --no-index --no-deps $T/runtime/*.whl \
    $T/fi/numpy-*.whl $T/fi/apache_tvm_ffi-*.whl $T/fi/flashinfer_python-*.whl \
    $S/vllm-0.20.0-cp38-abi3-manylinux_2_35_x86_64.whl >> $S/stage.txt 2>&1
  echo "venv install rc=$?" >> $S/stage.txt
  run env -u PYTHONPATH $V/bin/python -m pip check > $S/pip-check.txt 2>&1
  env -u PYTHONPATH $V/bin/python -c 'import torch, numpy, flashinfer, importlib.metadata as m; print("venv: torch", torch.__version__, "cuda", torch.cuda.is_available(), "numpy", numpy.__version__, "flashinfer", flashinfer.__version__, "vllm", m.version("vllm"))' >> $S/stage.txt 2>&1
  log "staged: $(tail -2 $S/stage.txt | tr '\n' ' ')"
  # 4. the build and the reference first, then the three starts
  wait
  [ "$(cat $S/build.rc 2>/dev/null)" = 0 ] || [ -n "${DRY:-}" ] || { log "no jit cache: build failed"; echo build > $S/chain.rc; exit 1; }
  set_wheel=$(ls $W/wheel-set/*.whl 2>/dev/null || echo WHEEL-set)
  fa3_wheel=$(ls $W/wheel-set-fa3/*.whl 2>/dev/null || echo WHEEL-set-fa3)
  record() { run python3 $S/bin/tiny_moe_vllm.py record --reference $S/reference.json --model $S/model.json \
    --build $S/build.json --runs $(ls -d $S/runs/* 2>/dev/null || echo $S/runs/C) --out $S/RESULT.json > $S/record.txt 2>&1; }
  # C first (the tokens), then what the set alone misses, in case the hold ends early
  vllm_run C $fa3_wheel "jit cache: the set at 9.0a + the fa3 prefill twin; VLLM_USE_FLASHINFER_MOE_FP16=0 (Triton MoE)" \
    VLLM_USE_FLASHINFER_MOE_FP16=0; record; log "C: $(tail -1 $S/runs/C/vllm.log 2>/dev/null) $(head -c 600 $S/record.txt)"
  vllm_run B $set_wheel "jit cache: the set at 9.0a; VLLM_USE_FLASHINFER_MOE_FP16=0 (Triton MoE)" \
    VLLM_USE_FLASHINFER_MOE_FP16=0; record; log "B: $(tail -1 $S/runs/B/vllm.log 2>/dev/null)"
  vllm_run A $set_wheel "jit cache: the set at 9.0a; vLLM's own MoE choice"; record
  log "A: $(tail -1 $S/runs/A/vllm.log 2>/dev/null)"
  log "recorded: $(head -c 1500 $S/record.txt)"
  echo 0 > $S/chain.rc ;;
esac
