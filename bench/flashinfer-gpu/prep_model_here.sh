#!/usr/bin/env bash
# Run on the build host (network): fills .devrun-fi2/ (git-ignored) for model_run.sh on the
# device (python 3.12, torch 2.11.0+cu130, no network): what prep_here.sh carries (sparkbuild's
# wheel, the wheels it imports, the flashinfer-python pin and the builder's imports), and
# the model-set scripts.
#   bash bench/flashinfer-gpu/prep_model_here.sh     # then carry ".devrun-fi2"
set -eu
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
bash $HERE/prep_here.sh
rm -rf $REPO/.devrun-fi2; mv $REPO/.devrun-fi $REPO/.devrun-fi2
cp $HERE/model_run.sh $HERE/model_probe.py $REPO/.devrun-fi2/
mkdir -p $REPO/.devrun-fi2/recipes
cp $REPO/recipes/qwen38next.toml $REPO/recipes/qwen38next-model.json $REPO/.devrun-fi2/recipes/
du -sh $REPO/.devrun-fi2
