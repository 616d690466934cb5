#!/usr/bin/env bash
# The full Spark build on the device machine, by parts (issue 17) or in one piece (issue 21).
# Each device call is at most 10 minutes, so the build runs detached (setsid) and later calls
# watch it; the machine stays warm between calls.  Everything the run needs travels in
# .devrun/ (ignored by git, named in the call's `carry`; bench/full-build/prep_here.sh fills
# it): the bundle, the wheels the device image lacks, and sparkbuild's own wheel.  The machine
# goes back 30 s after a call returns, the detached build with it: make the next call at once.
#
#   bash bench/full-build/run.sh start SECONDS PART TARGETS [PART TARGETS ...]
#        set up, build the parts one after the other (detached), watch the first
#   bash bench/full-build/run.sh receive      # keep the payload's pieces this call carried
#   bash bench/full-build/run.sh watch SECONDS PART     # watch a part; collect it when done
#   bash bench/full-build/run.sh watch-all SECONDS PART...  # the same for each part in turn
#   DRY=1 bash bench/full-build/run.sh start 5 part1 _vllm_fa2_C   # print what would run
#
# A payload larger than a call carries (64 MiB with the working tree) travels in pieces:
# prep_here.sh cuts it into .devrun/parts/payload.tar.NN and lists them in
# .devrun/pieces.txt; each call carries pieces.txt and its piece(s), `receive` keeps them in
# ROOT/incoming and unpacks the payload into ROOT/devrun once every piece is whole.  A
# `start` before that starts the chain detached all the same: it waits for the last piece
# (issue 44: the one-piece build of vllm 0.29.0 in a hold, no decision between calls).
# PART names the result folder (part1, part2, part3, one-piece); TARGETS is the --targets
# list, or "all" for the whole build (no --targets: every extension; issue 21).  No part
# builds the runtime closure (--no-closure): the bundle carries none (torch's closure is
# gigabytes; the device has torch), and `wheel --offline` would need it.  Parts
# share one cache (the bundle is imported once) and one ccache, and are built in the order
# given.  A part with a bundle of its own in .devrun (PART.bundle.tar.xz) builds from it: the
# warm rebuild after a one-line change to a patched file (issue 18) is such a part, built in
# the cache the part before it left (prep_here.sh writes rebuild.bundle.tar.xz).
# A part whose name starts with "today" is built with today's job plan (one MAX_JOBS for
# every unit, SPARKBUILD_JOB_PLAN=single) in cold caches of its own (sparkbuild's and
# ccache's): the back-to-back comparison of the two plans (issue 18).  A part whose name
# starts with "pools" built after it starts from the unit table today's build measured (its
# cache's units/memory.json; the pool plan's claim: a node's first build measures, the
# builds after it plan from the measurements), in a cold ccache of its own, e.g.
#   run.sh start 560 today _moe_C pools _moe_C rebuild _moe_C
# (without a "today" part before it, from .devrun/units-seed.json when that is there: a
# unit table measured on the device, e.g. bench/full-build/2026-12-04-moe-single-plan/unit-memory.json)
# What comes back: $OUT/PART.tgz (at most 8 files come back a call, so one archive a part):
# machine.txt, doctor.json, progress.txt, mem.json, wheel.json (timeline, units),
# wheel-err-tail.txt, build-log-tail.txt, ninja_log, unit-memory.json, verify.json,
# coverage.txt; and $OUT/PART-coverage.txt, to read at once.
set -u
cmd=$1
ROOT=${FB_ROOT:-/root/fb}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
D=${FB_DEVRUN:-$REPO/.devrun}
OUT=${OUT:-/tmp/fb-out}
run() { if [ -n "${DRY:-}" ]; then echo "would run: $*"; else "$@"; fi; }
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH CCACHE_DIR=$ROOT/ccache
mkdir -p "$ROOT" "$OUT"

payload() {  # where whl/, sparkbuild-*.whl and the bundles are: the payload assembled from
  # pieces (ROOT/devrun), else .devrun as carried whole
  if [ -f $ROOT/devrun/.complete ]; then echo $ROOT/devrun; else echo $D; fi
}

receive() {  # keep the pieces this call carried (received by rename: whole or absent)
  mkdir -p $ROOT/incoming
  [ -f $D/pieces.txt ] && cp $D/pieces.txt $ROOT/incoming/pieces.txt
  for p in $D/parts/*; do [ -f "$p" ] || continue; n=$(basename $p)
    cp $p $ROOT/incoming/.$n.part && mv $ROOT/incoming/.$n.part $ROOT/incoming/$n &&
      echo "received $n ($(stat -L -c %s $p) bytes)"
  done
  assemble && echo "payload complete: $(payload)"
  if assemble && [ -n "${DRY:-}" ] && [ -f $ROOT/dry-waiting ]; then  # the waiting chain's turn
    local parts; parts=$(cat $ROOT/dry-waiting); rm $ROOT/dry-waiting
    echo "the waiting chain would now set up and build:"; setup; start_parts $parts
  fi
  return 0
}

assemble() {  # the payload, once every piece pieces.txt names is whole; status 1 until then
  [ -f $ROOT/devrun/.complete ] && return 0
  [ -f $ROOT/incoming/pieces.txt ] || return 1
  local name size
  while read -r name size; do
    [ "$(stat -c %s $ROOT/incoming/$name 2>/dev/null)" = "$size" ] || return 1
  done < $ROOT/incoming/pieces.txt
  rm -rf $ROOT/devrun; mkdir -p $ROOT/devrun
  (cd $ROOT/incoming && cat $(cut -d' ' -f1 pieces.txt)) | tar -C $ROOT/devrun -x || return 1
  touch $ROOT/devrun/.complete
}

pieces_pending() {  # the payload comes in pieces (pieces.txt is known) and is not whole yet
  [ -f $D/pieces.txt ] || [ -f $ROOT/incoming/pieces.txt ] || return 1
  ! assemble
}

setup() {
  local P; P=$(payload)
  run python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site $P/whl/*.whl $P/sparkbuild-*.whl || exit 1
  { echo "== machine"; date -u; echo "cores $(nproc)"; grep -E 'MemTotal|MemAvailable' /proc/meminfo
    df -h /root | tail -1; uname -r
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    nvcc --version | tail -1; cmake --version | head -1; echo "ninja $(ninja --version)"
    echo "ccache: $(command -v ccache)"; echo "payload: $P"
    env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)=' | sort
  } > $ROOT/machine.txt 2>&1
  [ -n "${DRY:-}" ] || source $ROOT/bin/cudaroot.sh >> $ROOT/machine.txt
  run python3 -m sparkbuild doctor --json > $ROOT/doctor.json 2> $ROOT/doctor.err
  run ccache -M 40G > /dev/null 2>&1
}

bundle_of() {  # PART: the bundle the part builds from
  if [ -f $ROOT/bin/$1.bundle.tar.xz ] || [ -f $(payload)/$1.bundle.tar.xz ]; then
    echo $ROOT/bin/$1.bundle.tar.xz
  else echo $ROOT/bin/vllm.bundle.tar.xz; fi
}

wheel_command() {  # PART TARGETS: the part's wheel command, one word a line
  local targets=()
  [ "$2" = all ] || targets=(--targets "$2" --allow-unstartable)
  printf '%s\n' python3 -m sparkbuild wheel --offline --bundle "$(bundle_of $1)" \
    --use-existing-torch "${targets[@]}" --no-closure --cache $ROOT/$(cache_of $1) \
    --out $ROOT/$1/wh --json
}

cache_of() {  # PART: its sparkbuild cache under ROOT (a "today" part: a cold one of its own)
  case $1 in today*) echo cache-today ;; *) echo cache ;; esac
}

plan_env() {  # PART: the job plan and ccache the part builds with
  case $1 in today*) echo SPARKBUILD_JOB_PLAN=single CCACHE_DIR=$ROOT/ccache-today ;;
    *) echo CCACHE_DIR=$ROOT/ccache ;; esac
}

build_part() {  # PART TARGETS: one part, start to verify, in the foreground (run detached)
  local S=$ROOT/$1 cmdline
  mapfile -t cmdline < <(wheel_command "$1" "$2")
  local env_=($(plan_env $1))
  mkdir -p $S; env "${env_[@]}" ccache -z > /dev/null 2>&1; date +%s > $S/start
  echo "${env_[*]}" > $S/plan-env.txt
  seed_units $1
  python3 $ROOT/bin/monitor.py $S/mem.json $S/wheel.rc > /dev/null 2>&1 < /dev/null &
  env "${env_[@]}" "${cmdline[@]}" > $S/wheel.json 2> $S/wheel.err
  echo $? > $S/wheel.rc.tmp
  env "${env_[@]}" ccache -s -v > $S/ccache.txt 2>&1
  keep_logs $1  # the next part re-prepares the same work directory
  case $1 in today*) ;; *) verify_part $1 ;; esac  # wheel itself verified it
  mv $S/wheel.rc.tmp $S/wheel.rc
}

seed_units() {  # PART: a "pools" part plans from the unit table of a "today" part before
  # it, else from .devrun/units-seed.json (a table a device build measured) when carried
  local table=$ROOT/cache-today/units/memory.json
  case $1 in pools*) ;; *) return 0 ;; esac
  [ -f $table ] || table=$ROOT/bin/units-seed.json
  [ -f $table ] && [ ! -e $ROOT/cache/units/memory.json ] || return 0
  mkdir -p $ROOT/cache/units && cp $table $ROOT/cache/units/memory.json
  echo "unit table: $table, $(grep -c '"seconds"' $table) units" >> $ROOT/$1/plan-env.txt
}

verify_part() {  # PART: sparkbuild verify of the part's wheelhouse once more, on its own (the
  # coverage table); a "today" part is built for its compile wall and skips it
  local S=$ROOT/$1
  if [ -d $S/wh ]; then
    python3 -m sparkbuild verify $S/wh --json > $S/verify.json 2> $S/verify.err
    echo "verify rc=$?" > $S/verify.rc
  fi
}

prepare_bin() {  # the chain runs from copies: the next call re-sends the working tree under it
  mkdir -p $ROOT/bin; cp $0 $ROOT/bin/run.sh
  cp $REPO/bench/real-build/monitor.py $REPO/bench/real-build/cudaroot.sh $ROOT/bin/
}

start_parts() {  # PART TARGETS [PART TARGETS ...]
  if [ -n "${DRY:-}" ]; then
    while [ $# -ge 2 ]; do
      mkdir -p $ROOT/$1; echo "would run: env $(plan_env $1) $(wheel_command "$1" "$2" | tr '\n' ' ')"
      case $1 in today*) ;; *) echo "would run: python3 -m sparkbuild verify $ROOT/$1/wh --json" ;; esac
      echo "  with $(env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)=' | sort | tr '\n' ' ')"
      date +%s > $ROOT/$1/start; echo 0 > $ROOT/$1/wheel.rc; shift 2
    done
    return
  fi
  cp $(payload)/*.bundle.tar.xz $ROOT/bin/; cp $(payload)/units-seed.json $ROOT/bin/ 2>/dev/null
  setsid nohup bash $ROOT/bin/run.sh _chain "$@" > $ROOT/chain.log 2>&1 < /dev/null &
}

start_waiting() {  # PART TARGETS...: the payload is still in pieces: a detached chain waits
  # for the last one (a later call's `receive`), then sets up and builds
  if [ -n "${DRY:-}" ]; then  # the chain DRY=1 stands in for: the `receive` that completes
    echo "would start the chain detached; it waits for the payload's pieces" \
      "($(wc -l < $ROOT/incoming/pieces.txt) named, $(ls $ROOT/incoming | grep -vc pieces.txt) here)"
    echo "$*" > $ROOT/dry-waiting; return
  fi
  setsid nohup bash $ROOT/bin/run.sh _wait_chain "$@" > $ROOT/chain.log 2>&1 < /dev/null &
}

wait_chain() {  # the detached side of start_waiting: up to 25 minutes for the pieces
  local end=$(( $(date +%s) + 1500 ))
  until assemble; do
    [ $(date +%s) -lt $end ] || { echo "the payload's pieces did not all arrive"; exit 1; }
    sleep 5
  done
  echo "payload complete at $(date -u)"; setup
  cp $(payload)/*.bundle.tar.xz $ROOT/bin/; cp $(payload)/units-seed.json $ROOT/bin/ 2>/dev/null
  chain "$@"
}

chain() {  # the detached side of start_parts
  while [ $# -ge 2 ]; do build_part "$1" "$2"; shift 2; done
}

build_log() {  # the newest build log of the caches' work directories
  ls -t $ROOT/cache*/work/*/logs/build.log 2>/dev/null | head -1
}

watch() {  # SECONDS PART
  local S=$ROOT/$2 end=$(( $(date +%s) + $1 )) step
  while [ ! -f $S/wheel.rc ] && [ $(date +%s) -lt $end ]; do
    sleep 15
    if [ ! -f $S/start ]; then
      if [ -f $ROOT/devrun/.complete ] || [ ! -f $ROOT/incoming/pieces.txt ]; then
        echo "$2: waiting for the parts before it"
      else echo "$2: waiting for the payload's pieces: $(ls $ROOT/incoming | grep -v pieces.txt | tr '\n' ' ')"; fi
      continue
    fi
    step=$(grep -oE '\[[0-9]+/[0-9]+\]' "$(build_log)" 2>/dev/null | tail -1)
    echo "$2 $(( $(date +%s) - $(cat $S/start) )) s: ${step:-preparing}; $(grep MemAvailable /proc/meminfo | tr -s ' ')" | tee -a $S/progress.txt
  done
  [ -f $S/wheel.rc ] && echo "$2 finished: rc=$(cat $S/wheel.rc) at $(( $(stat -c %Y $S/wheel.rc) - $(cat $S/start) )) s"
  return 0
}

keep_logs() {  # PART: the live build log and .ninja_log, copied beside the part's results
  local S=$ROOT/$1 log ninja_log
  log=$(build_log)
  [ -n "$log" ] && tail -c 3000000 "$log" > $S/build-log-tail.txt
  ninja_log=$(ls -t $(find $ROOT/$(cache_of $1)/work -name .ninja_log 2>/dev/null) 2>/dev/null | head -1)
  [ -n "$ninja_log" ] && cp "$ninja_log" $S/ninja_log
  cp $ROOT/$(cache_of $1)/units/memory.json $S/unit-memory.json 2>/dev/null
  return 0
}

collect() {  # PART: what it left so far, finished or not, into $OUT/PART.tgz
  local S=$ROOT/$1
  mkdir -p $S; cp $ROOT/machine.txt $ROOT/doctor.json $S/ 2>/dev/null
  python3 - $S > $S/coverage.txt 2>&1 <<'PY'
import json, sys
from pathlib import Path
s = Path(sys.argv[1])
try:
    report = json.loads((s / "verify.json").read_text())
except (OSError, ValueError) as error:
    print("no verify.json:", error); raise SystemExit(0)
for lib in report.get("libraries", []):
    for cov in lib.get("coverage", []):
        print(lib["library"], cov["target"], "kernels", cov["kernels"], "native", cov["native"],
              "ptx", cov["ptx"], "none", cov["none"], "block_scaled_mma", lib["block_scaled_mma"],
              "trap_only", len(lib["trap_only_kernels"]), "guard_stubs", len(lib["guard_stub_kernels"]))
print("verify ok:", report.get("ok"), "mismatches:", len(report.get("mismatches", [])))
PY
  [ -f $S/wheel.rc ] || [ ! -f $S/start ] || keep_logs $1  # a part still building
  [ -f $S/wheel.err ] && tail -c 300000 $S/wheel.err > $S/wheel-err-tail.txt
  tar -czf $OUT/$1.tgz -C $S --ignore-failed-read machine.txt doctor.json progress.txt \
    mem.json wheel.json wheel-err-tail.txt build-log-tail.txt ninja_log unit-memory.json \
    verify.json verify.rc coverage.txt ccache.txt start wheel.rc plan-env.txt 2>/dev/null
  cp $S/coverage.txt $OUT/$1-coverage.txt
  head -40 $S/coverage.txt; tail -3 $S/wheel.err 2>/dev/null
  return 0
}

watch_all() {  # SECONDS PART...: watch each part in turn until the time is up; collect each
  local end=$(( $(date +%s) + $1 )) left part
  shift
  for part in "$@"; do
    left=$(( end - $(date +%s) ))
    [ $left -gt 0 ] && watch $left $part
    collect $part
  done
}

case $cmd in
start) shift; seconds=$1; shift; prepare_bin
  if pieces_pending; then start_waiting "$@"; else setup; start_parts "$@"; fi
  watch $seconds $1; collect $1 ;;
receive) receive ;;
watch) watch $2 $3; collect $3 ;;
watch-all) shift; watch_all "$@" ;;
_chain) shift; chain "$@" ;;
_wait_chain) shift; wait_chain "$@" ;;
*) echo "usage: run.sh start SECONDS PART TARGETS [PART TARGETS ...] | receive" \
        "| watch SECONDS PART | watch-all SECONDS PART..." >&2
   exit 2 ;;
esac
