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
cp -r $HERE/first_start.py $HERE/probe_paged.py $HERE/fs.sh $HERE/guard $HERE/shim \
   $HERE/recipe.toml $REPO/bench/real-build/cudaroot.sh $D/
# 0. the series for the H200 (9.0a): the Spark's series less cmake-sm121-archs, the edit that
#    gives 12.1a native code and refuses a recipe without a 12.1 target; the other three
#    patches apply as they do for the Spark.  Generated (the patches copied with ../csrc,
#    which the E2M1 patch injects) and bundled: the device needs no series of its own.
. $REPO/bench/derived_series.sh
derived_series $REPO/.devrun-prep $HERE/recipe.toml cmake-sm121-archs ""
RECIPE=$REPO/.devrun-prep/patches/recipe.toml
# 1. sparkbuild itself and what it imports that the device image lacks (KINDS.md), and
#    vLLM's build requirements it lacks (session 8: setuptools-scm; setuptools 81 is >= 81)
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
$PY -m pip wheel --no-deps -w $D/whl $REPO
$PY -m pip download --no-deps --only-binary :all: --python-version 3.12 --implementation cp \
  $PLAT --dest $D/whl GitPython gitdb smmap unidiff uv \
  setuptools-scm==10.3.4 vcs-versioning==2.6.0 setuptools==80.10.2  # vLLM's build needs them
# 2. the wheels flashinfer's builder needs, for the device's interpreter (CPython 3.12,
#    x86_64), with the marker sparkbuild.build.flashinfer_aot.aot_wheels checks
AOT=$CACHE/flashinfer-aot/cp312-x86_64; mkdir -p $AOT
PYTHONPATH=$REPO/src $PY - "$RECIPE" "$AOT" <<'PY'
import sys
from pathlib import Path
from sparkbuild.build.flashinfer_aot import IMPORT_REQUIREMENTS
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
# 4. the runtime wheels vLLM 0.20.0 needs that the device lacks, less two large ones the
#    proof leaves out on purpose: flashinfer-cubin (281 MiB of cubins: its absence with
#    FLASHINFER_NO_DOWNLOAD=1 shows no cubin is needed) and nvidia-cutlass-dsl-libs
# VLLM_SDIST: vllm-0.20.0.tar.gz (its requirements/ are read; the bundle holds the tree)
$PY $HERE/missing_wheels.py --sdist "${VLLM_SDIST:?set VLLM_SDIST to vllm-0.20.0.tar.gz}" --dest $D/runtime --out $D/missing_wheels.json
rm -f $D/runtime/flashinfer_cubin-*.whl $D/runtime/nvidia_cutlass_dsl_libs*.whl
# and tilelang (43 MiB) with its z3-solver (27 MiB): vLLM 0.20.0 imports tilelang only in
# layers/mhc.py, which only models/deepseek_v4.py imports; a Llama never loads it
rm -f $D/runtime/tilelang-*.whl $D/runtime/z3_solver-*.whl
# and flashinfer-python: the recipe pins it, so the bundle, and then the wheelhouse, hold it
rm -f $D/runtime/flashinfer_python-*.whl
# 5. two archives: build.tar (what the build needs: it starts on the first call) and
#    the runtime wheels the proof installs, cut into runtime.tar.NN of 60 MiB; fs.sh receive takes
#    whatever parts a call carries in .devrun/parts
tar -C $D -cf $D/parts/build.tar whl bundle.tar.xz
tar -C $D -cf $D/runtime-all.tar runtime missing_wheels.json
split -b 60M -d $D/runtime-all.tar $D/parts/runtime.tar.
rm -rf $D/whl $D/runtime $D/bundle.tar.xz $D/runtime-all.tar
ls -la $D/parts; echo "parts: $(ls $D/parts | wc -l); carry them a few per call (fs.sh receive)"
