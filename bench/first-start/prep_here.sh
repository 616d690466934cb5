#!/usr/bin/env bash
# Run on the build host (network, not the device): everything the device run carries, in
# .devrun/ (git-ignored), cut into parts of at most 58 MiB (64 MiB carried per call).
#   [STACK=0.29.0] VLLM_SDIST=vllm-X.tar.gz bash bench/first-start/prep_here.sh CACHE
# CACHE: a sparkbuild cache (one per stack: the bundle carries CACHE/flashinfer-aot/ whole);
# GitHub sources come through the recipe's mirrors (file:///tmp/rb/git/, filled from `fetch`
# snapshots as for bench/real-build).
# SNAPSHOTS: where the snapshots are (default /work/.mirror; fa_trim.sh's output for the
# first start's FA2 cut to head dim 64).
# STACK: 0.20.0 (the default: the 2026-12-04 first-token run's stack, vLLM 0.20.0 with
# flashinfer 0.6.8.post1 and a tiny Llama) or 0.29.0 (issue 44: the mission's stack, vLLM
# 0.29.0 with flashinfer 0.6.18 and a tiny Qwen3-MoE, on the device's torch 2.11: README.md,
# "The mission's stack").  For 0.29.0: FI_RECIPE names the recipe whose [[pins]] and
# [flashinfer] tables say which flashinfer and which modules (default
# flashinfer-tiny-moe-interim.toml, issue 42's model set once merged); the sources are
# checked against the snapshots first (bench/full-build/one-piece/sources.py), and
# REHEARSE=1 goes on without the bundle when some are missing (nothing can be built then:
# the parts, their sizes and fs.sh are rehearsed with DRY=1).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
CACHE=$(realpath "$1"); D=$REPO/.devrun; PY=${PYTHON:-python3}; STACK=${STACK:-0.20.0}
P=$REPO/.devrun-prep-0.29.0; OP=$REPO/bench/full-build/one-piece
. $REPO/bench/derived_series.sh
. $REPO/bench/devrun_wheels.sh
rm -rf $D; mkdir -p $D/whl $D/parts $D/runtime
cp -r $HERE/first_start.py $HERE/probe_paged.py $HERE/image_view.py $HERE/missing_wheels.py $HERE/fs.sh $HERE/guard $HERE/shim \
   $REPO/bench/real-build/cudaroot.sh $D/
# 0. the recipe and the series for the H200 (9.0a): the Spark's series with
#    cmake-sm121-archs (the edit that gives 12.1a native code and refuses a recipe without a
#    12.1 target) replaced by its 9.0 twin, cmake-sm90-archs.toml (Marlin's "8.0+PTX" lists
#    get 9.0a: without it verify refused 365 PTX-only kernels of _C in the 2026-12-03
#    refused-ptx-only run); the other three patches apply as they do for the Spark.
#    Generated (the patches copied with ../csrc, which the E2M1 patch injects) and
#    bundled: the device needs no series of its own.
# 0a. dense_only.diff (since the 2026-12-03 dense-only-refused run): the proof serves a
#     small bf16 model, so the extensions leave out Marlin, Machete, the CUTLASS sm90
#     grouped MoE GEMM and W4A8 (their arch lists set empty, as vLLM's CMake does for an
#     arch with none of them; vLLM's Python registers those ops only where they exist):
#     5156 of the 8777 CPU-seconds the 2026-12-03 without-fa2 run measured for 0.20.0's two
#     extensions at 9.0a.  The sm90 c3x scaled GEMMs stay: without them 9.0a is not
#     subtracted from the c2x list, whose sm89-guarded kernels then only trap (208 refused
#     by verify in the 2026-12-03 dense-only-refused run).  0.29.0's twin also leaves out
#     Marlin MoE (the tiny MoE model is bf16: vLLM's Triton MoE kernels on Hopper).
case $STACK in
0.20.0)
  BASE=$HERE/recipe.toml; DENSE=$HERE/dense_only.diff
  # 0b. the warm rebuild after one line (issue 18): the same recipe (same name: the same
  #     work directory, cache and ccache on the device) with a fifth patch,
  #     one_line_change.diff, one line of csrc/layernorm_kernels.cu (a unit of _C)
  REBUILD=$HERE/one_line_change.diff
  # vllm/platforms/cuda.py imports _C and _C_stable_libtorch; vllm_flash_attn raises
  # without _vllm_fa2_C or _vllm_fa3_C on the attention path
  TARGETS=_C,_C_stable_libtorch,_vllm_fa2_C; MODEL_ARGS=""; NODE_ARGS="" ;;
0.29.0)
  rm -rf $P; mkdir -p $P; FI_RECIPE=${FI_RECIPE:-$HERE/flashinfer-tiny-moe-interim.toml}
  $PY $OP/compose_recipe.py $HERE/recipe-0.29.0.toml $FI_RECIPE --out $P/recipe-0.29.0.toml
  BASE=$P/recipe-0.29.0.toml; DENSE=$HERE/dense_only-0.29.0.diff; REBUILD=""
  # CUDA builds of 0.29.0 have no _C: vllm/platforms/cuda.py imports _C_stable_libtorch;
  # the MoE layer's ops (topk, align, sum) are _moe_C_stable_libtorch's; FA2 as for 0.20.0
  # no --targets: the recipe's [model] (the tiny Qwen3-MoE) chooses the extensions, as
  # `sparkbuild check --list-targets` lists them (sparkbuild.compile.extension_set)
  TARGETS=""; MODEL_ARGS="--arch qwen3_moe"
  # the device's torch (2.11.0+cu130), not the pin (2.13.0): the node set with the torch
  # pins removed as `wheel --use-existing-torch` removes them; flashinfer-cubin is not on
  # the index (0.29.0's setup.py leaves it out of the wheel's requirements too)
  NODE_ARGS="--existing-torch --drop flashinfer-cubin" ;;
*) echo "STACK is 0.20.0 or 0.29.0, not $STACK" >&2; exit 2 ;;
esac
cp $BASE $D/recipe.toml
derived_series $REPO/.devrun-prep $BASE cmake-sm121-archs $HERE/cmake-sm90-archs.toml $DENSE
RECIPE=$REPO/.devrun-prep/patches/recipe.toml
[ -z "$REBUILD" ] || derived_series $REPO/.devrun-prep-rebuild $BASE cmake-sm121-archs \
  $HERE/cmake-sm90-archs.toml $DENSE $REBUILD
echo "$TARGETS" > $D/targets.txt; echo "$MODEL_ARGS" > $D/model-args.txt
# 0c. 0.29.0: which of its sources the snapshots hold, linked where the mirror expects them
NO_BUNDLE=""
if [ $STACK = 0.29.0 ]; then
  PYTHONPATH=$REPO/src $PY -m sparkbuild prepare --recipe $RECIPE --cache $CACHE \
    --dest $P/tree-0.29.0 > $P/prepare-0.29.0.txt 2>&1
  # the plan as `bundle` makes it: the recipe's [vendor] choices and stand-ins, and the
  # sources only left-out extensions use replaced by placeholders (not fetched)
  PYTHONPATH=$REPO/src $PY $OP/model_plan.py $P/tree-0.29.0 --recipe $RECIPE --cache $CACHE \
    > $P/plan-0.29.0.json
  if ! $PY $OP/sources.py $P/plan-0.29.0.json --recipe $RECIPE --snapshots ${SNAPSHOTS:-/work/.mirror} --link ${MIRROR:-/tmp/rb/git} \
      --out $D/sources.json; then
    echo "prep_here: sources the build needs are not in the snapshots ($D/sources.json)" >&2
    [ -n "${REHEARSE:-}" ] || exit 3
    NO_BUNDLE="sources the build needs are not in the snapshots (sources.json)"
  fi
fi
# 1. sparkbuild itself and what it imports that the device image lacks (KINDS.md), and
#    vLLM's build requirements it lacks (the 2026-12-02 part-1 run: setuptools-scm;
#    setuptools 81 is >= 81); fs.sh installs whl/*.whl
device_wheels $D && mv $D/sparkbuild-*.whl $D/whl/
# 2. the wheels flashinfer's builder needs, for the device's interpreter
flashinfer_aot_wheels $RECIPE $CACHE
# 3. the bundle: prepared tree, sources, the recipe's pins (flashinfer-python) and the
#    flashinfer-aot wheels; no build wheels (the device builds against its own torch) and
#    no runtime closure (the device has torch; step 4 carries the rest)
if [ -z "$NO_BUNDLE" ]; then
  PYTHONPATH=$REPO/src $PY -m sparkbuild bundle --recipe $RECIPE --cache $CACHE \
    --without-wheels --no-closure --out $D/bundle.tar.xz
  [ -z "$REBUILD" ] || PYTHONPATH=$REPO/src $PY -m sparkbuild bundle \
    --recipe $REPO/.devrun-prep-rebuild/patches/recipe.toml \
    --cache $CACHE --without-wheels --no-closure --out $D/parts/rebuild.bundle.tar.xz
else
  echo "no bundle: $NO_BUNDLE" | tee $D/NO-BUNDLE.txt
fi
# 4. the node set: vLLM's runtime closure resolved against the image's own versions
#    (device-pip-list.txt, taken on the device by fs.sh build); the projects the image holds
#    at the resolved version are linked from it on the device (image_view.py), the rest are
#    carried, and a few are left out on purpose (missing_wheels.py LEAVE_OUT says why)
# VLLM_SDIST: the release's sdist (its requirements/ are read; the bundle holds the tree)
$PY $HERE/missing_wheels.py --sdist "${VLLM_SDIST:?set VLLM_SDIST to the release sdist}" \
  --freeze $HERE/device-pip-list.txt --dest $D/runtime --out $D/node_set.json \
  --view-list $D/image-view.txt $NODE_ARGS
# 5. the parts: build.tar (what the build needs: it starts on the first call, with the list
#    of runtime parts its chain waits for) and the runtime wheels the proof installs, cut into
#    runtime.tar.NN of 58 MiB; fs.sh receive takes whatever parts a call carries in .devrun/parts
tar -C $D -cf $D/runtime-all.tar runtime node_set.json image-view.txt
split -b 58M -d $D/runtime-all.tar $D/parts/runtime.tar.
(cd $D/parts && for f in runtime.tar.*; do echo "$f $(stat -c %s $f)"; done) > $D/runtime-parts.txt
#    build.tar larger than that (vLLM 0.29.0's bundle carries flashinfer 0.6.18's builder
#    wheels, 37 MiB) is cut the same way, build.tar.NN listed in build-parts.txt
tar -C $D -cf $D/build.tar whl runtime-parts.txt targets.txt model-args.txt recipe.toml \
  $(cd $D && ls bundle.tar.xz NO-BUNDLE.txt sources.json 2>/dev/null)  # the chain waits for those parts
if [ $(stat -c %s $D/build.tar) -gt $((58 * 1048576)) ]; then
  split -b 58M -d $D/build.tar $D/parts/build.tar.
  (cd $D/parts && for f in build.tar.*; do echo "$f $(stat -c %s $f)"; done) > $D/parts/build-parts.txt
  rm $D/build.tar
else mv $D/build.tar $D/parts/build.tar; fi
rm -rf $D/whl $D/runtime $D/bundle.tar.xz $D/runtime-all.tar $D/runtime-parts.txt
ls -la $D/parts; echo "parts: $(ls $D/parts | wc -l); carry them a few per call (fs.sh receive)"
