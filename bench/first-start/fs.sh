#!/usr/bin/env bash
# The device side of the first-start proof (bench/first-start/README.md).  Each call is
# one step; the machine stays warm between them, so /root/fs keeps what earlier ones left.
#   bash .devrun/fs.sh receive            # keep the carried part(s) of .devrun/parts
#   bash .devrun/fs.sh build SECONDS      # unpack build.tar, start the offline build detached, watch
#   bash .devrun/fs.sh watch SECONDS      # watch the build
#   bash .devrun/fs.sh prove              # install, tiny model, vLLM with no JIT, RESULT.json
set -u
D=$PWD/.devrun S=/root/fs
mkdir -p $S
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
case $1 in
receive)
  for p in $D/parts/*.tar*; do cp $p $S/; echo "received $(basename $p) ($(stat -c %s $p) bytes)"; done
  ls $S/*.tar* ;;
build)
  cd $S || exit 1
  if [ -f build.tar ]; then tar xf build.tar && rm build.tar || exit 1; fi  # a repeated call finds it unpacked
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
  { date -u; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
    nvcc --version | tail -1; } > $S/machine.txt 2>&1
  source $D/cudaroot.sh >> $S/machine.txt
  # the bundle carries the recipe's pins and flashinfer's builder wheels: `wheel` imports
  # them into the cache, and names any one missing before it compiles
  date +%s > $S/start
  setsid nohup bash -c "python3 -m sparkbuild wheel --offline --bundle $S/bundle.tar.xz \
    --use-existing-torch --targets _C --no-closure --cache $S/cache --out $S/wh --json \
    > $S/wheel.json 2> $S/wheel.err; echo \$? > $S/wheel.rc" > /dev/null 2>&1 < /dev/null &
  bash $D/fs.sh watch $2 ;;
watch)
  end=$(( $(date +%s) + $2 ))
  while [ ! -f $S/wheel.rc ] && [ "$(date +%s)" -lt $end ]; do
    sleep 15; l=$(ls -t $S/cache/work/*/logs/build.log $S/cache/work/*/flashinfer-aot/aot.log 2>/dev/null | head -1)  # the newer: the AOT log once it starts
    echo "$(( $(date +%s) - $(cat $S/start) )) s: $(grep -oE '\[[0-9]+/[0-9]+\]' "$l" 2>/dev/null | tail -1) $l"
  done
  [ -f $S/wheel.rc ] && echo "wheel rc=$(cat $S/wheel.rc) after $(( $(stat -c %Y $S/wheel.rc) - $(cat $S/start) )) s"
  cp $S/machine.txt $OUT/ 2>/dev/null; tail -c 200000 $S/wheel.err > $OUT/wheel-err-tail.txt
  cp $S/wheel.json $OUT/ 2>/dev/null; tail -5 $S/wheel.err ;;
prove)
  export PYTHONPATH=/tmp/site
  V=$S/venv P=$S/prove; rm -rf $V $P; mkdir -p $P
  if ls $S/runtime.tar.* > /dev/null 2>&1; then   # the runtime wheels, carried in parts
    cat $S/runtime.tar.* | tar -C $S -x && rm $S/runtime.tar.* || exit 1
  fi
  python3 -m venv --system-site-packages $V              # the device's torch and transformers
  $V/bin/python -m pip install -q --no-index --no-deps $S/runtime/*.whl > $P/runtime-install.txt 2>&1
  python3 -m sparkbuild install $S/wh --venv $V --json > $P/install.json 2> $P/install.err
  echo "install rc=$?"
  python3 -m sparkbuild doctor --node --venv $V --json > $P/doctor-node.json 2>&1
  python3 $D/first_start.py write-model $S/model --out $P/model.json
  python3 $D/first_start.py reference $S/model --out $P/reference.json --device cuda
  # the first start: the node profile, no JIT, no network, no nvcc
  ( source $V/bin/activate
    export FLASHINFER_DISABLE_JIT=1 VLLM_ENABLE_V1_MULTIPROCESSING=0
    export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
    export FIRST_START_SOCKET_LOG=$P/sockets.jsonl FIRST_START_NVCC_LOG=$P/nvcc.log
    # a node with no compiler: no directory holding nvcc stays on PATH; CUDA_HOME's nvcc is
    # the shim (flashinfer's JIT would call $CUDA_HOME/bin/nvcc); Triton has the profile's ptxas
    PATH=$(echo "$PATH" | tr : '\n' | while read -r d; do [ -x "$d/nvcc" ] || printf '%s:' "$d"; done)
    export PYTHONPATH=$D/guard PATH=${PATH%:} CUDA_HOME=$P/no-cuda TRITON_CACHE_DIR=$P/triton-cache
    which nvcc > $P/which-nvcc.txt 2>&1
    mkdir -p $P/no-cuda/bin && ln -sf $D/shim/nvcc $P/no-cuda/bin/nvcc
    env | grep -E '^(FLASHINFER|TRITON|VLLM|CUDA_HOME)' | sort > $P/env.txt
    python $D/first_start.py vllm $S/model --attention-backend FLASHINFER --out $P/vllm.json > $P/vllm.log 2>&1
    echo "vllm rc=$?" >> $P/vllm.log
    ws=$FLASHINFER_WORKSPACE_BASE
    python3 - "$ws" $P <<'PY'
import json, sys
from pathlib import Path
ws, p = Path(sys.argv[1]), Path(sys.argv[2])
lines = [json.loads(l) for l in (p / "sockets.jsonl").read_text().splitlines()] if (p / "sockets.jsonl").is_file() else []
nvcc = (p / "nvcc.log").read_text().splitlines() if (p / "nvcc.log").is_file() else []
triton = [str(f) for f in (p / "triton-cache").rglob("*") if f.is_file()] if (p / "triton-cache").is_dir() else []
json.dump({"flashinfer_workspace": str(ws),
           "flashinfer_jit_files": sorted(str(f) for f in ws.rglob("*") if f.is_file()),
           "nvcc_calls": len(nvcc), "nvcc_log": nvcc,
           "outbound_connections": [l for l in lines if l["kind"] != "udp_connect"],
           "udp_route_probes": [l for l in lines if l["kind"] == "udp_connect"],
           "triton_cache_files": len(triton),
           "note": "Triton JIT-compiles vLLM's own Triton kernels (not flashinfer's); counted, not hidden"},
          open(p / "evidence.json", "w"), indent=2)
PY
    # after the evidence is taken: flashinfer's two paged wrappers alone, against fp32
    python $D/probe_paged.py "$ws" > $P/probe_paged.json 2> $P/probe_paged.err
    echo "probe_paged rc=$?" >> $P/vllm.log
  )
  python3 $D/first_start.py record --reference $P/reference.json --vllm $P/vllm.json \
    --evidence $P/evidence.json --model $P/model.json --out $P/RESULT.json
  cp $P/*.json $P/*.txt $P/*.log $P/install.err $OUT/ 2>/dev/null; tail -40 $P/vllm.log ;;
esac
