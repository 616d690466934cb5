#!/usr/bin/env bash
# The 16-core side of flashinfer's model set at 12.1a: `sparkbuild flashinfer-aot --offline`
# for the default recipe (recipes/qwen38next.toml), from the cache aot16_here.sh filled and
# carried in .devrun-fi16/, its wall time, its memory sampled every 2 s beside it, the plan
# sparkbuild made (MAX_JOBS, the heavy pool), and every kernel of the wheel judged.  A call
# may end before the build does, so `start` sets the chain going detached (setsid nohup) and
# returns; `watch` follows it and, once it has ended (or at its deadline), puts the results
# in $OUT: at most 8 files, each under 16 MiB, none in a folder.
#   bash .devrun-fi16/bin/aot16_run.sh start          # install, then the chain, detached
#   bash .devrun-fi16/bin/aot16_run.sh watch SECONDS  # progress; results to $OUT when done
#   DRY=1 FI16_ROOT=DIR OUT=DIR bash .devrun-fi16/bin/aot16_run.sh start   # here: the tools
#        installed and `flashinfer-aot --offline --list` run for real from the copied cache,
#        the chain's commands printed, nothing built
# AOT16_PYTHON (python3: the interpreter with torch), AOT16_CUDA (/usr/local/cuda).
# The chain: aot16_sample.py (meminfo and the build's process tree, every 2 s) beside
#   python3 -m sparkbuild flashinfer-aot --recipe recipes/qwen38next.toml --offline
#     --cache cache --out out --json        (MAX_JOBS and the pool: sparkbuild's own plan)
# then aot16_verify.py on the wheel (verify's per-kernel judgement, JSON).
# $OUT: aot.json (flashinfer-aot --json: units, environment, the plan's line), mem.jsonl,
# verify.json, results.tar.gz (wall.json, machine.txt, pool-plan.json, logs' tails, ...)
# and the wheel when it is under 16 MiB (verify can then be repeated on the build host).
set -u
S=${FI16_ROOT:-/root/fi16} B=$(cd "$(dirname "$0")" && pwd) OUT=${OUT:-/tmp/fi16-out}
C=$(cd "$B/.." && pwd)  # the carried directory: tools/, cache/, recipes/, bin/
PYBIN=${AOT16_PYTHON:-python3} CUDA=${AOT16_CUDA:-/usr/local/cuda}
W=$S/cache/work/qwen38next-flashinfer-aot  # sparkbuild's work dir for this recipe
export PYTHONUNBUFFERED=1
run() { if [ -n "${DRY:-}" ]; then echo "would run: $*"; else "$@"; fi; }
log() { echo "$(( $(date +%s) - $(cat $S/start 2>/dev/null || date +%s) )) s: $*" | tee -a $S/chain.log; }
now() { date +%s.%N; }
mkdir -p $OUT
case ${1:-} in
start)
  mkdir -p $S && rm -rf "${S:?}"/* && mkdir -p $S/tools $S/verify-tools
  cp -r $C/bin $C/recipes $S/ && cp -r $C/cache $S/cache || exit 1
  cp $C/table.txt $C/sparkbuild-commit.txt $S/ 2>/dev/null
  # sparkbuild and its imports apart from verify's cuobjdump (kept off the builder's path)
  $PYBIN -m pip install -q --no-index --no-deps --no-compile --target $S/tools \
    $(ls $C/tools/*.whl | grep -v nvidia_cuda_) > $S/install.txt 2>&1 &&
  $PYBIN -m pip install -q --no-index --no-deps --no-compile --target $S/verify-tools \
    $C/tools/nvidia_cuda_*.whl >> $S/install.txt 2>&1 || { tail $S/install.txt; exit 1; }
  { date -u; echo "nproc $(nproc)"; grep -E '^(MemTotal|MemAvailable)' /proc/meminfo
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    $PYBIN -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
    $CUDA/bin/nvcc --version | tail -1; echo "table $(cat $S/table.txt 2>/dev/null)"
  } > $S/machine.txt 2>&1
  date +%s > $S/start
  if [ -n "${DRY:-}" ]; then
    PYTHONPATH=$S/tools $PYBIN -m sparkbuild flashinfer-aot --recipe $S/recipes/qwen38next.toml \
      --offline --cache $S/cache --list --json > $S/list.json 2> $S/list.err
    echo "list rc=$? ($(grep -c '"name"' $S/list.json) names in list.json)"; tail -3 $S/list.err
    bash $S/bin/aot16_run.sh chain; exit 0; fi
  FI16_ROOT=$S AOT16_PYTHON=$PYBIN AOT16_CUDA=$CUDA setsid nohup bash $S/bin/aot16_run.sh chain \
    > $S/chain.out 2>&1 < /dev/null &
  echo "chain started (pid $!): bash $0 watch SECONDS" ;;
chain)
  run $PYBIN $S/bin/aot16_sample.py --pid-file $S/build.pid --out $S/mem.jsonl --interval 2 \
    --stop-file $S/build.done &
  aot=(env PYTHONPATH=$S/tools PATH=$CUDA/bin:$PATH CUDA_HOME=$CUDA $PYBIN -m sparkbuild
       flashinfer-aot --recipe $S/recipes/qwen38next.toml --offline --cache $S/cache
       --out $S/out --python "$(command -v $PYBIN)" --json)
  log "flashinfer-aot started: ${aot[*]}"
  t0=$(now)
  if [ -n "${DRY:-}" ]; then run "${aot[@]}"; rc=0
  else ( exec "${aot[@]}" ) > $S/aot.json 2> $S/aot.err & echo $! > $S/build.pid; wait $!; rc=$?; fi
  t1=$(now); touch $S/build.done
  $PYBIN -c 'import json, sys; print(json.dumps({"start": float(sys.argv[1]), "end": float(sys.argv[2]),
    "wall_s": round(float(sys.argv[2]) - float(sys.argv[1]), 1), "rc": int(sys.argv[3])}))' \
    $t0 $t1 $rc > $S/wall.json
  log "flashinfer-aot rc=$rc in $(cut -d, -f3 $S/wall.json)"
  wheel=$(ls $S/out/flashinfer_jit_cache-*.whl 2>/dev/null | head -1)
  if [ -n "$wheel" ] || [ -n "${DRY:-}" ]; then
    verify=(env PYTHONPATH=$S/tools:$S/verify-tools $PYBIN $S/bin/aot16_verify.py
            "${wheel:-$S/out/WHEEL}" 12.1a --out $S/verify.json)
    if [ -n "${DRY:-}" ]; then run "${verify[@]}"; else "${verify[@]}" > $S/verify.txt 2>&1
      log "verify rc=$? $(tail -1 $S/verify.txt 2>/dev/null)"; fi
  fi
  wait; echo $rc > $S/chain.rc ;;
watch)
  end=$(( $(date +%s) + ${2:-60} ))
  while [ ! -f $S/chain.rc ] && [ "$(date +%s)" -lt $end ]; do
    sleep 10
    m=$($PYBIN $S/bin/aot16_sample.py --show $S/mem.jsonl 2>/dev/null)
    echo "$(( $(date +%s) - $(cat $S/start) )) s: $(grep -oE '\[[0-9]+/[0-9]+\]' $W/aot.log 2>/dev/null | tail -1) $m"
  done
  cat $S/chain.log 2>/dev/null
  R=$S/results; rm -rf $R; mkdir -p $R
  cp $S/wall.json $S/machine.txt $S/install.txt $S/chain.log $S/table.txt $S/sparkbuild-commit.txt \
    $S/verify.txt $W/logs/pool-plan.json $W/logs/ninja-runs.jsonl $W/units.json $R/ 2>/dev/null
  tail -c 300000 $S/aot.err > $R/aot-err-tail.txt 2>/dev/null
  tail -c 2000000 $W/aot.log > $R/aot-log-tail.txt 2>/dev/null
  tar -C $S -czf $OUT/results.tar.gz results
  cp $S/aot.json $S/mem.jsonl $S/verify.json $OUT/ 2>/dev/null
  for w in $S/out/flashinfer_jit_cache-*.whl; do
    [ -f "$w" ] && [ "$(stat -c %s "$w")" -lt 16000000 ] && cp "$w" $OUT/; done
  ls -la $OUT; [ -f $S/chain.rc ] || echo "the chain is still running: watch again"
  tail -3 $S/aot.err 2>/dev/null; tail -2 $S/verify.txt 2>/dev/null ;;
*) echo "usage: aot16_run.sh start | watch SECONDS" >&2; exit 2 ;;
esac
