#!/usr/bin/env bash
# Device: watch the detached build for up to SECONDS; copy trimmed logs to $OUT.
#   bash .devrun/watch.sh SECONDS [prove]
set -u
D=$PWD/.devrun S=/root/rb
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
end=$(( $(date +%s) + $1 ))
log=$(ls $S/cache/work/*/logs/build.log 2>/dev/null | grep -v bundles | head -1)
while [ ! -f $S/wheel.rc ] && [ $(date +%s) -lt $end ]; do
  sleep 20
  log=$(ls $S/cache/work/*/logs/build.log 2>/dev/null | head -1)
  step=$(grep -oE '\[[0-9]+/[0-9]+\]' "${log:-/dev/null}" 2>/dev/null | tail -1)
  echo "$(( $(date +%s) - $(cat $S/start) )) s: ${step:-configuring} $(grep MemAvailable /proc/meminfo | tr -s ' ')" | tee -a $S/progress.txt
done
[ -f $S/wheel.rc ] && echo "build finished: rc=$(cat $S/wheel.rc) at $(( $(stat -c %Y $S/wheel.rc) - $(cat $S/start) )) s"
cp $S/machine.txt $S/progress.txt $OUT/ 2>/dev/null
cp $S/mem.json $OUT/ 2>/dev/null
tail -c 3000000 "${log:-/dev/null}" > $OUT/build-log-tail.txt 2>/dev/null
tail -c 200000 $S/wheel.err > $OUT/wheel-err-tail.txt 2>/dev/null
cp $S/wheel.json $OUT/ 2>/dev/null
grep -E 'Building CUDA object|Building CXX object' "${log:-/dev/null}" | wc -l | sed 's/^/units compiled so far: /'
if [ "${2:-}" = prove ] && [ "$(cat $S/wheel.rc 2>/dev/null)" = 0 ]; then
  python3 -m sparkbuild verify $S/wh --json > $OUT/verify.json 2> $S/verify.err; echo "verify rc=$?"
  tail -5 $S/verify.err
  tree=$(ls -d $S/cache/work/bundles/bundle-*/sparkbuild-bundle/tree | head -1)
  python3 $D/prove.py $S/wh $tree $OUT
fi
tail -5 $S/wheel.err
