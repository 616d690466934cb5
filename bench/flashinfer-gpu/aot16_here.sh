#!/usr/bin/env bash
# Run on the build host (network): fills .devrun-fi16/ (git-ignored) with everything
# aot16_run.sh needs to run `sparkbuild flashinfer-aot --offline` for the default recipe's
# model set at 12.1a on a 16-core x86_64 machine with CPython 3.12, torch 2.11.0+cu130 and
# nvcc 13.0 at /usr/local/cuda, and no network:
#   tools/    sparkbuild's wheel built from HEAD (git archive: committed code only) and the
#             wheels it imports that such an image lacks (gitpython, gitdb, smmap, unidiff;
#             cyclonedx-python-lib and its imports, which verify's module imports: the
#             versions bench/devrun_wheels.sh carries), plus cuobjdump/nvdisasm 13.5.37 for
#             verify's reader (the version the 2-core verify used: BENCHMARKS.md)
#   cache/    a sparkbuild cache: flashinfer-aot/cp312-x86_64/ (the flashinfer-python 0.6.18
#             pin and what its builder imports, with sparkbuild's completeness mark:
#             bench/devrun_wheels.sh flashinfer_aot_wheels) and, with TABLE=measured (the
#             default), units/memory.json: the 2-core measured unit table of this model set
#             (bench/flashinfer/2026-12-05-model-set-12.1a/aot.json, 152 units, seconds as
#             CPU-seconds, peaks measured) under flashinfer:12.1a, so the build plans its
#             heavy pool as bench/schedule_sim.py's "pools" row does.  TABLE=none: no table,
#             the first build's rule (schedule_sim's "first_build_rule" row).
#   recipes/  recipes/qwen38next.toml (sparkbuild.recipe.DEFAULT_RECIPE) and its model json
#   bin/      aot16_run.sh, aot16_sample.py (memory sampler), aot16_verify.py (per kernel)
#   here/     (git-ignored sibling .devrun-fi16-here/, never carried) what the image has and
#             a bare python3.12 lacks (rich, packaging, typing_extensions, sortedcontainers, ...), for the rehearsal here only
#   PYTHON=/work/main/.venv/bin/python bash bench/flashinfer-gpu/aot16_here.sh
# It ends by printing the carried size: one call carries 64 MiB with the working tree, so
# .devrun-fi16 must stay at or below 56 MiB (it is refused here when larger).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
PY=${PYTHON:-$REPO/.venv/bin/python}; TABLE=${TABLE:-measured}
D=$REPO/.devrun-fi16; X=$REPO/.devrun-fi16-here; LIMIT=$((56 * 1048576))
rm -rf $D $X; mkdir -p $D/tools $D/cache $D/recipes $D/bin $X/src $X/whl
source $REPO/bench/devrun_wheels.sh
GET="$PY -m pip download -q --no-deps --only-binary :all: --python-version 3.12 --implementation cp $DEVICE_PLATFORMS"
# 1. sparkbuild from HEAD and the small wheels it imports that the image lacks
git -C $REPO archive --prefix=sparkbuild-head/ HEAD | tar -x -C $X/src
git -C $REPO rev-parse HEAD > $D/sparkbuild-commit.txt
$PY -m pip wheel -q --no-deps --no-build-isolation -w $D/tools $X/src/sparkbuild-head
$GET --dest $D/tools gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3 unidiff==1.0.1 \
  cyclonedx-python-lib==11.12.0 boolean.py==5.0 defusedxml==0.7.1 license-expression==30.4.4 \
  packageurl-python==0.17.6 py-serializable==2.2.0 \
  nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37
# 2. the recipe and the builder's wheels in the cache, marked complete
cp $REPO/recipes/qwen38next.toml $REPO/recipes/qwen38next-model.json $D/recipes/
flashinfer_aot_wheels $D/recipes/qwen38next.toml $D/cache
rm -f $D/cache/flashinfer-aot/cp312-x86_64/download.log
# 3. the measured unit table, as sparkbuild's own unit_memory.remember stores one
if [ "$TABLE" = measured ]; then
  PYTHONPATH=$X/src/sparkbuild-head/src $PY - $REPO/bench/flashinfer/2026-12-05-model-set-12.1a/aot.json \
    $D/cache <<'PY'
import json, sys
from pathlib import Path
from sparkbuild.flashinfer.builder import UNIT_TABLE_PREFIX
from sparkbuild.jobplan.unit_memory import load, remember
units = json.loads(Path(sys.argv[1]).read_text())["units"]
rows = [{"source": u["path"], "flags": u["flags"], "seconds": u.get("cpu_seconds", u["seconds"]),
         "start": float(i), "peak_rss_bytes": int(float(u.get("peak_rss_gib") or 0) * 1024**3)}
        for i, u in enumerate(units)]  # one 0.15 s unit has no peak: none stored for it
remember(Path(sys.argv[2]), UNIT_TABLE_PREFIX + "12.1a", rows)
print(f"unit table: {len(load(Path(sys.argv[2])))} units under {UNIT_TABLE_PREFIX}12.1a")
PY
fi
echo "$TABLE" > $D/table.txt
cp $HERE/aot16_run.sh $HERE/aot16_sample.py $HERE/aot16_verify.py $D/bin/
# 4. for the rehearsal here only: what the image has and a bare python3.12 lacks
$GET --dest $X/whl rich==15.0.0 markdown-it-py==4.2.0 mdurl==0.1.2 Pygments==2.21.0 packaging==26.3 \
  typing_extensions==4.16.0 sortedcontainers==2.4.0 attrs==26.1.0
size=$(du -sb $D | cut -f1)
echo "carried: .devrun-fi16 $size bytes ($(( size / 1048576 )) MiB; limit 56 MiB)"
du -sh $D/tools $D/cache
[ "$size" -le "$LIMIT" ] || { echo ".devrun-fi16 is over 56 MiB: cut it into pieces" >&2; exit 1; }
