#!/usr/bin/env bash
# Run on the build host (network, not the device): fills .devrun/ (git-ignored) with what
# bench/full-build/run.sh needs on the device machine, which has no network:
#   bash bench/full-build/prep_here.sh [CACHE]      # then carry ".devrun" in the run call
# CACHE: a sparkbuild cache (default ~/.cache/sparkbuild); GitHub sources come through the
# recipe's mirrors (file:///tmp/rb/git/, filled from `fetch` snapshots).
#   * sparkbuild's own wheel, and the wheels it imports that the device image lacks;
#   * the build requirements of vllm 0.20.0 that the image lacks or has outside the tree's
#     range (seen in the 2026-12-02 part-1 run: no setuptools-scm, setuptools 81.0.0
#     against `<81`);
#   * the bundle: vllm 0.20.0 with the series at 12.1a, its five GitHub dependencies
#     vendored, without build wheels (the device builds against its own torch) and without
#     the runtime closure;
#   * rebuild.bundle.tar.xz, for the warm rebuild after one patched line (issue 18): the same
#     recipe (same name, so the same work directory and ccache on the device) with a fifth
#     patch, one_line_change.diff, which changes one line of csrc/moe/moe_permute_unpermute_op.cu
#     (the file the shuffle-rows guard patches): a message of a TORCH_CHECK, so the unit's
#     object changes and nvcc compiles it again.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
mkdir -p "${1:-$HOME/.cache/sparkbuild}"; CACHE=$(realpath "${1:-$HOME/.cache/sparkbuild}"); D=$REPO/.devrun; PY=${PYTHON:-python3}
. $REPO/bench/devrun_wheels.sh
device_wheels $D
PYTHONPATH=$REPO/src $PY -m sparkbuild bundle --recipe $HERE/vllm-0.20.0-spark.toml \
  --cache $CACHE --out $D/vllm.bundle.tar.xz --without-wheels --no-closure
. $REPO/bench/derived_series.sh
derived_series $D/oneline $HERE/vllm-0.20.0-spark.toml "" $HERE/one_line_change.diff
O=$D/oneline/patches
PYTHONPATH=$REPO/src $PY -m sparkbuild bundle --recipe $O/recipe.toml \
  --cache $CACHE --out $D/rebuild.bundle.tar.xz --without-wheels --no-closure
du -sh $D; echo "carry .devrun (at most 64 MiB a call)"
