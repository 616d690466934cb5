#!/usr/bin/env bash
# The full Spark build on the device machine, by parts (issue 17) or in one piece (issue 21).
# Each device call is at most 10 minutes, so the build runs detached (setsid) and later calls
# watch it; the machine stays warm between calls.  Everything the run needs travels in
# .devrun/ (ignored by git, named in the call's `carry`): the bundle, the wheels the device
# image lacks, and sparkbuild's own wheel.
#
#   bash bench/full-build/run.sh start PART TARGETS SECONDS   # set up, start, watch
#   bash bench/full-build/run.sh watch PART SECONDS           # watch; collect when done
#   DRY=1 bash bench/full-build/run.sh start part1 _vllm_fa2_C 5   # print what would run
#
# PART names the result folder (part1, part2, part3, one-piece); TARGETS is the --targets
# list, or "all" for the whole build (no --targets, the closure included: issue 21).
# What comes back in $OUT: machine.txt, progress.txt, mem.json, wheel.json (timeline, units),
# wheel-err-tail.txt, build-log-tail.txt, verify.json, coverage.txt.
set -u
cmd=$1 PART=$2
D=$PWD/.devrun S=/root/fb/$PART
OUT=${OUT:-/tmp/fb-out}
run() { if [ -n "${DRY:-}" ]; then echo "would run: $*"; else "$@"; fi; }
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH CCACHE_DIR=/root/fb/ccache
mkdir -p $S $OUT

setup() {
  run python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site $D/whl/*.whl $D/sparkbuild-*.whl || exit 1
  { echo "== machine"; date -u; echo "cores $(nproc)"; grep -E 'MemTotal|MemAvailable' /proc/meminfo
    df -h /root | tail -1; uname -r
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    nvcc --version | tail -1; cmake --version | head -1; echo "ninja $(ninja --version)"
    echo "ccache: $(command -v ccache)"
  } > $S/machine.txt 2>&1
  run ccache -M 40G > /dev/null 2>&1
}

start_build() {  # TARGETS
  local targets=() closure=(--no-closure)
  if [ "$1" != all ]; then targets=(--targets "$1"); else closure=(); fi
  source $PWD/bench/real-build/cudaroot.sh >> $S/machine.txt
  python3 -m sparkbuild doctor --json > $S/doctor.json 2> $S/doctor.err
  date +%s > $S/start
  if [ -n "${DRY:-}" ]; then
    echo "would run: python3 -m sparkbuild wheel --offline --bundle $D/vllm.bundle.tar.xz" \
      "--use-existing-torch ${targets[*]} ${closure[*]} --cache /root/fb/cache --out $S/wh --json"
    echo 0 > $S/wheel.rc; return
  fi
  setsid nohup python3 $PWD/bench/real-build/monitor.py $S/mem.json $S/wheel.rc \
    > /dev/null 2>&1 < /dev/null &
  setsid nohup bash -c "python3 -m sparkbuild wheel --offline --bundle $D/vllm.bundle.tar.xz \
    --use-existing-torch ${targets[*]} ${closure[*]} --cache /root/fb/cache --out $S/wh \
    --json > $S/wheel.json 2> $S/wheel.err; echo \$? > $S/wheel.rc" > /dev/null 2>&1 < /dev/null &
}

log() { ls /root/fb/cache/work/*/logs/build.log 2>/dev/null | head -1; }

watch() {  # SECONDS
  local end=$(( $(date +%s) + $1 ))
  while [ ! -f $S/wheel.rc ] && [ $(date +%s) -lt $end ]; do
    sleep 15
    step=$(grep -oE '\[[0-9]+/[0-9]+\]' "$(log)" 2>/dev/null | tail -1)
    echo "$(( $(date +%s) - $(cat $S/start) )) s: ${step:-configuring}; $(grep MemAvailable /proc/meminfo | tr -s ' ')" | tee -a $S/progress.txt
  done
  [ -f $S/wheel.rc ] && echo "build finished: rc=$(cat $S/wheel.rc) at $(( $(stat -c %Y $S/wheel.rc) - $(cat $S/start) )) s"
}

collect() {
  if [ -f $S/wheel.rc ] && [ ! -f $S/verify.json ] && [ -d $S/wh ]; then
    run python3 -m sparkbuild verify $S/wh --json > $S/verify.json 2> $S/verify.err
    echo "verify rc=$?" > $S/verify.rc
  fi
  python3 - $S > $S/coverage.txt 2>&1 <<'PY'
import json, sys
from pathlib import Path
s = Path(sys.argv[1])
try:
    report = json.loads((s / "verify.json").read_text())
except (OSError, ValueError) as error:
    print("no verify.json:", error); raise SystemExit(0)
for lib in report.get("libraries", []):
    cov = lib.get("coverage") or lib.get("kernels") or {}
    print(lib.get("library") or lib.get("path"), json.dumps(cov)[:400],
          "block_scaled_mma", lib.get("block_scaled_mma"),
          "trap_only", len(lib.get("trap_only_kernels") or []))
PY
  for f in machine.txt progress.txt mem.json doctor.json wheel.json verify.json verify.rc coverage.txt; do
    cp $S/$f $OUT/ 2>/dev/null
  done
  tail -c 3000000 "$(log)" > $OUT/build-log-tail.txt 2>/dev/null
  tail -c 200000 $S/wheel.err > $OUT/wheel-err-tail.txt 2>/dev/null
  cat $S/coverage.txt 2>/dev/null | head -40; tail -3 $S/wheel.err 2>/dev/null
}

case $cmd in
start) setup; start_build "$3"; watch "$4"; collect ;;
watch) watch "$3"; collect ;;
*) echo "usage: run.sh start PART TARGETS SECONDS | watch PART SECONDS" >&2; exit 2 ;;
esac
