#!/usr/bin/env bash
# Device run (issue 18): one part of the real vllm 0.20.0 build, twice, back to back, from
# the same bundle: today's plan (SPARKBUILD_JOB_PLAN=single) then the pool plan; then a warm
# rebuild after a one-line change to one patched file, with ccache.  Each build's
# `wheel --json` (timeline, units) lands in $OUT.  The two plans get their own cold caches
# (sparkbuild's and ccache's: the second build must not hit the first one's objects).
#   bash bench/full-build/pools.sh [--dry-run] BUNDLE TARGETS BUNDLE2
# BUNDLE2: the same tree with one line of one patched file changed (wheel re-prepares
# the tree from its bundle, so the change must come in through the bundle, as in run2).
# --dry-run prints every command instead of running it (tested on any machine).
set -u
DRY=""; [ "${1:-}" = --dry-run ] && { DRY=echo; shift; }
BUNDLE=${1:?bundle}; TARGETS=${2:-_C_stable_libtorch,triton_kernels}
OUT=${OUT:-/tmp/full-build-out}; S=${S:-/root/fb}; PY=${PY:-/opt/torch/.venv/bin/python3}
export PYTHONUNBUFFERED=1
run() { $DRY "$@"; }
build() {  # $1 = name, $2 = job plan, $3 = bundle, $4 = cache (sparkbuild's and ccache's)
  local cmd=(env SPARKBUILD_JOB_PLAN=$2 CCACHE_DIR=$S/ccache-$4
    $PY -m sparkbuild wheel --offline --bundle "$3" --use-existing-torch --targets "$TARGETS" --no-closure --allow-unstartable --cache $S/cache-$4
    --out $S/wh-$1 --json)
  if [ -n "$DRY" ]; then  # the command with its redirections, nothing run or written
    echo "${cmd[*]} > $OUT/wheel-$1.json 2> $OUT/wheel-$1.err"; return 0
  fi
  "${cmd[@]}" > $OUT/wheel-$1.json 2> $OUT/wheel-$1.err
  echo "$1 rc=$?"
}
run mkdir -p $OUT $S
build today single "$BUNDLE" today
build pools pools "$BUNDLE" pools
# warm rebuild: the one-line change, the pool build's caches (sparkbuild's and ccache's)
if [ -n "${3:-}" ]; then
  run env CCACHE_DIR=$S/ccache-pools ccache -z
  build rebuild pools "$3" pools
  run env CCACHE_DIR=$S/ccache-pools ccache -s
fi
run $PY bench/schedule_sim.py $OUT/wheel-pools.json
