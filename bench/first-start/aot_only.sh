#!/usr/bin/env bash
# Device: `sparkbuild flashinfer-aot` alone for recipe.toml's module set, timed (the 2026-12-02
# first-start hold, aot-9.0a.json).  Carried as .devaot/ (30 MiB), made here with:
#   mkdir -p .devaot/whl .devaot/cache && cp -r ~/.cache/sparkbuild/flashinfer-aot .devaot/cache/
#   cp bench/first-start/{aot_only.sh,probe_paged.py,first_start.py} bench/real-build/cudaroot.sh .devaot/
#   (and the recipe as prep_here.sh derives it: .devrun-prep/patches/recipe.toml)
#   pip wheel --no-deps -w .devaot/whl . && pip download --no-deps --only-binary :all: \
#     --python-version 3.12 --implementation cp --platform manylinux_2_17_x86_64 \
#     --dest .devaot/whl GitPython gitdb smmap unidiff cyclonedx-python-lib==11.12.0 \
#     license-expression boolean.py packageurl-python py-serializable defusedxml
# (the cache's flashinfer-aot/cp312-x86_64 comes from prep_here.sh step 2).  Then on the
# device: bash .devaot/aot_only.sh SECONDS [probe]
# probe: then probe_paged.py (carried beside it) on the GPU from the wheel, JIT disabled.
set -u
D=$PWD/.devaot
python3 -m pip install -q --no-index --no-deps --target /tmp/site $D/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
source $D/cudaroot.sh > $OUT/cudaroot.txt 2>&1
s=$(date +%s.%N)
timeout ${1:-480} python3 -m sparkbuild flashinfer-aot --recipe $D/recipe.toml --offline --cache $D/cache \
  --jobs "$(nproc)" --out /tmp/aotout --json > $OUT/aot.json 2> $OUT/aot.err
rc=$?; echo "rc=$rc seconds=$(python3 -c "print(round($(date +%s.%N) - $s, 1))")" | tee $OUT/aot-rc.txt
ls -la /tmp/aotout | tee $OUT/aot-out.txt
L=$(find $D/cache/work -name aot.log | head -1)
[ -n "$L" ] && { grep -oE "\[[0-9]+/[0-9]+\]" "$L" | tail -1; tail -c 100000 "$L" > $OUT/aot-log-tail.txt; }
tail -5 $OUT/aot.err
[ "${2:-}" = probe ] || exit 0
PY=$(command -v python3); SITE=$(ls -d $D/cache/work/*-flashinfer-aot/site)
$PY -m pip install -q --no-index --no-deps --target /tmp/jc /tmp/aotout/*.whl || exit 1
mkdir -p /tmp/fiws
env -i HOME=/tmp PATH=/usr/bin:/bin CUDA_HOME=/nonexistent PYTHONPATH=$SITE:/tmp/jc \
  FLASHINFER_DISABLE_JIT=1 FLASHINFER_NO_DOWNLOAD=1 FLASHINFER_WORKSPACE_BASE=/tmp/fiws \
  $PY $D/probe_paged.py /tmp/fiws > $OUT/probe-paged.json 2> $OUT/probe-paged.err
echo "probe rc=$?"; cat $OUT/probe-paged.json; tail -20 $OUT/probe-paged.err
