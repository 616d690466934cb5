#!/usr/bin/env bash
# Device: watch the detached build until SECONDS after this call began; once it has
# finished (and with "prove"), start prove.py detached and watch that too; copy trimmed
# logs and results to $OUT.  Each call may end while the work goes on.
#   bash .devrun/watch.sh SECONDS [prove]
set -u
D=$PWD/.devrun S=/root/rb
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
end=$(( $(date +%s) + $1 ))
log() { ls $S/cache/work/*/logs/build.log 2>/dev/null | head -1; }
while [ ! -f $S/wheel.rc ] && [ $(date +%s) -lt $end ]; do
  sleep 15
  step=$(grep -oE '\[[0-9]+/[0-9]+\]' "$(log)" 2>/dev/null | tail -1)
  echo "$(( $(date +%s) - $(cat $S/start) )) s: ${step:-configuring}; $(grep MemAvailable /proc/meminfo | tr -s ' ')" | tee -a $S/progress.txt
done
if [ -f $S/wheel.rc ]; then
  echo "build finished: rc=$(cat $S/wheel.rc) at $(( $(stat -c %Y $S/wheel.rc) - $(cat $S/start) )) s"
  if [ "${2:-}" = prove ] && [ "$(cat $S/wheel.rc)" = 0 ] && [ ! -f $S/prove.started ]; then
    touch $S/prove.started; mkdir -p $S/prove
    tree=$(ls -d $S/cache/work/bundles/bundle-*/sparkbuild-bundle/tree | head -1)
    setsid nohup bash -c "python3 -m sparkbuild verify $S/wh --json > $S/prove/verify.json 2> $S/prove/verify.err; \
      python3 $D/prove.py $S/wh $tree $S/prove > $S/prove/prove.out 2>&1; echo \$? > $S/prove.rc" \
      > /dev/null 2>&1 < /dev/null &
  fi
  while [ -f $S/prove.started ] && [ ! -f $S/prove.rc ] && [ $(date +%s) -lt $end ]; do
    sleep 10; echo "proving: $(ls $S/prove | tr '\n' ' ')"
  done
fi
units=$(grep -cE 'Building (CUDA|CXX) object' "$(log)" 2>/dev/null)
echo "units compiled so far: $units"
cp $S/machine.txt $S/progress.txt $OUT/ 2>/dev/null; cp $S/mem.json $OUT/ 2>/dev/null
tail -c 4000000 "$(log)" > $OUT/build-log-tail.txt 2>/dev/null
tail -c 300000 $S/wheel.err > $OUT/wheel-err-tail.txt 2>/dev/null
[ -f $S/prove.rc ] && (cd $S/prove && tar czf $OUT/prove.tar.gz . && cat prove.out | tail -40)
tail -3 $S/wheel.err
