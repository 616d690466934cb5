#!/usr/bin/env bash
# Run on the build host (network, not the device): fills .devrun/ (git-ignored) with what
# bench/full-build/run.sh needs for the one-piece build of vllm 0.29.0 at 12.1a (issue 44),
# cut into pieces a call can carry.
#   bash bench/full-build/one-piece/prep_here.sh CACHE
# CACHE: a sparkbuild cache of this stack's own (the bundle carries the whole
# CACHE/flashinfer-aot/ folder: a cache that served another flashinfer pin carries both).
# Environment:
#   FI_RECIPE   the recipe whose [[pins]] and [flashinfer] (and [model]) tables say which
#               flashinfer and which modules (default: recipes/vllm-0.29.0.toml once issue 42
#               has merged it, else flashinfer-interim.toml beside this script)
#   SNAPSHOTS   the `fetch` snapshots (default /work/.mirror); MIRROR the directory the
#               recipe's mirror names (default /tmp/rb/git)
#   PIECE_MIB   the largest piece (default 56: 64 MiB a call, less the working tree)
#   PYTHON      a Python with pip and sparkbuild's requirements (default python3)
#   REHEARSE=1  go on when sources are missing, without the bundle (NO-BUNDLE.txt says why
#               in the payload): the pieces, their sizes and run.sh's receive can be
#               rehearsed (DRY=1), nothing can be built from them
# Steps: 1 the recipe; 2 the prepared tree and its vendor plan; 3 which sources the
# snapshots hold (sources.json; stops here, naming them, when a needed one is missing);
# 4 the device's wheels; 5 flashinfer's builder wheels; 6 the bundle; 7 the pieces.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../../.." && pwd)
mkdir -p "${1:?usage: prep_here.sh CACHE}"; CACHE=$(realpath "$1")
D=$REPO/.devrun; P=$REPO/.devrun-prep/one-piece; PY=${PYTHON:-python3}
SNAPSHOTS=${SNAPSHOTS:-/work/.mirror}; MIRROR=${MIRROR:-/tmp/rb/git}; PIECE_MIB=${PIECE_MIB:-56}
if [ -z "${FI_RECIPE:-}" ]; then
  FI_RECIPE=$HERE/flashinfer-interim.toml
  [ -f $REPO/recipes/vllm-0.29.0.toml ] && FI_RECIPE=$REPO/recipes/vllm-0.29.0.toml
fi
. $REPO/bench/devrun_wheels.sh
rm -rf $P; mkdir -p $P
sb() { PYTHONPATH=$REPO/src $PY -m sparkbuild "$@"; }

# 1. the recipe: recipe.toml with FI_RECIPE's flashinfer pin and module set
$PY $HERE/compose_recipe.py $HERE/recipe.toml $FI_RECIPE --out $P/recipe.toml | tee $P/recipe.json
# the module set with its reasons, where this sparkbuild lists it (issue 42's --list)
if sb flashinfer-aot --help 2>/dev/null | grep -q -- --list; then
  sb flashinfer-aot --recipe $P/recipe.toml --list --json > $P/flashinfer-set.json
fi

# 2. the prepared tree (vllm 0.29.0 with the series) and what its build fetches
sb prepare --recipe $P/recipe.toml --cache $CACHE --dest $P/tree > $P/prepare.txt 2>&1
sb vendor --tree $P/tree --cache $CACHE --plan --json > $P/plan.json

# 3. which of them the snapshots hold at their pins, linked where the mirror expects them
if ! $PY $HERE/sources.py $P/plan.json --recipe $P/recipe.toml --snapshots $SNAPSHOTS \
    --link $MIRROR --out $P/sources.json; then
  echo "prep_here: sources the build needs are not in the snapshots ($P/sources.json);" \
       "fetch them (the fetch tool) and run this again" >&2
  [ -n "${REHEARSE:-}" ] || exit 3
  NO_BUNDLE="sources the build needs are not in the snapshots (sources.json)"
fi

# 4. sparkbuild and what the device image lacks; 5. flashinfer's builder wheels
rm -rf $D; mkdir -p $D
device_wheels $D
flashinfer_aot_wheels $P/recipe.toml $CACHE

# 6. the bundle: prepared tree, sources, pins, flashinfer's builder wheels; no build wheels
#    (the device builds against its own torch) and no runtime closure
if [ -z "${NO_BUNDLE:-}" ]; then
  sb bundle --recipe $P/recipe.toml --cache $CACHE --without-wheels --no-closure \
    --out $D/vllm.bundle.tar.xz
else
  echo "no bundle: $NO_BUNDLE" | tee $D/NO-BUNDLE.txt
  # what the bundle would carry besides the tree and the sources: the pin and the wheels
  # of flashinfer's builder (already compressed; xz keeps their size)
  du -cb $CACHE/flashinfer-aot/cp312-x86_64/*.whl | tail -1 >> $D/NO-BUNDLE.txt
fi
cp $P/recipe.toml $P/sources.json $D/

# 7. the pieces: the payload in pieces of at most PIECE_MIB, listed in pieces.txt
tar -C $D -cf $P/payload.tar whl $(cd $D && ls sparkbuild-*.whl vllm.bundle.tar.xz \
  NO-BUNDLE.txt 2>/dev/null) recipe.toml sources.json
du -b $D/whl/*.whl $D/sparkbuild-*.whl $D/vllm.bundle.tar.xz 2>/dev/null | sort -n > $P/sizes.txt
rm -rf $D/whl $D/sparkbuild-*.whl $D/vllm.bundle.tar.xz $D/NO-BUNDLE.txt; mkdir -p $D/parts
split -b ${PIECE_MIB}M -d $P/payload.tar $D/parts/payload.tar.
(cd $D/parts && for f in payload.tar.*; do echo "$f $(stat -c %s $f)"; done) > $D/pieces.txt
rm $P/payload.tar
cat $D/pieces.txt
echo "carry per call: .devrun/pieces.txt and one piece (.devrun/parts/payload.tar.NN);" \
     "REHEARSAL.md has the calls"
