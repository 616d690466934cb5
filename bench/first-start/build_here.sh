#!/usr/bin/env bash
# The first start's 9.0a build on the build host instead of the device: the same bundle
# (prep_here.sh STACK=0.29.0), built here by `sparkbuild wheel --offline --bundle
# --use-existing-torch` against torch 2.11.0+cu130 (the device image's torch, from the
# package index) under CPython 3.12 (the device image's Python), so the wheelhouse is the
# one the device would have built.  No GPU is needed to compile; the device only installs
# and starts it (prep_carried.sh, then fs.sh as usual).
#   bash bench/first-start/build_here.sh WORK BUNDLE [PYTHON3.12]
# WORK gets venv/ (torch, sparkbuild and vLLM's build requirements), cache/, wh/,
# wheel.json, wheel.err, wheel.rc and the start and end times.
set -eu
W=$(realpath -m "$1"); BUNDLE=$(realpath "$2"); PY312=${3:-python3.12}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p $W && cd $W
if [ ! -x venv/bin/python ]; then
  $PY312 -m venv venv
  venv/bin/pip install -q torch==2.11.0 "$REPO[build]" setuptools==80.10.2 setuptools-scm==10.3.4 \
    setuptools-rust==1.13.0 regex build protobuf==6.33.6 numpy==2.3.5 wheel
fi
export PATH=$W/venv/bin:$PATH
source $REPO/bench/real-build/cudaroot.sh   # the toolkit here lacks what vLLM's CMake links
date +%s > start
python -m sparkbuild wheel --offline --bundle $BUNDLE --use-existing-torch --no-closure \
  --cache $W/cache --out $W/wh --json > wheel.json 2> wheel.err || true
echo "${PIPESTATUS[0]:-$?}" > wheel.rc; date +%s > end
