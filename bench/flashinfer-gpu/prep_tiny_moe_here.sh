#!/usr/bin/env bash
# Run on the build host (network): everything tiny_moe_run.sh needs on the device (python 3.12,
# torch 2.11.0+cu130, no network), cut into self-contained parts of at most 57 MiB, one part
# per `run` call (64 MiB carried a call, the working tree about 5 MiB of it):
#   .cache/tm/pN/pN.tar    (git-ignored: /.cache/), carried as carry [".cache/tm/pN"]
# What travels (issue 42, item 7: README in 2026-12-05-tiny-moe-vllm/):
#   tools/  sparkbuild's wheel built from HEAD (git archive: not the working tree, which another
#           engineer edits) and the four small wheels it imports that the image lacks
#   fi/     the flashinfer-python 0.6.18 pin and what sparkbuild's flashinfer builder installs
#           beside it (builder.IMPORT_REQUIREMENTS); numpy and apache-tvm-ffi are the node set's
#           (2.3.5, 0.1.9: vLLM 0.20.0 pins tvm-ffi 0.1.9, inside flashinfer 0.6.18's range)
#   runtime/ vLLM 0.20.0's node set (bench/first-start/missing_wheels.py against the image's
#           pip freeze) plus llguidance 1.3.0: missing_wheels.py now leaves it out (for 0.29.0),
#           but vLLM 0.20.0 evaluates `llguidance.LLMatcher` in a class body at import
#           (vllm/v1/structured_output/backend_guidance.py:139), seen here on CPU
#   vllm-0.20.0 wheel from PyPI, in chunks (upstream's build: sparkbuild's vLLM build would need
#           _moe_C at 9.0a too, beyond this hold), installed with --no-deps beside
#           flashinfer-python 0.6.18 (vLLM 0.20.0 pins 0.6.8.post1)
#   PYTHON=.venv/bin/python bash bench/flashinfer-gpu/prep_tiny_moe_here.sh [DL_CACHE]
# DL_CACHE (default ~/.cache/tinymoe/dl) keeps the vLLM wheel and sdist between runs.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
PY=${PYTHON:-$REPO/.venv/bin/python}; DL=${1:-$HOME/.cache/tinymoe/dl}
T=$REPO/.cache/tm-prep; OUTP=$REPO/.cache/tm; CHUNK=$((57 * 1048576))
rm -rf $T $OUTP; mkdir -p $T/tools $T/fi $T/runtime $T/node $DL $OUTP
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
GET="$PY -m pip download -q --no-deps --only-binary :all: --python-version 3.12 --implementation cp $PLAT"
# 1. sparkbuild from HEAD, and what it imports that the image lacks
git -C $REPO archive --prefix=sparkbuild-head/ HEAD | tar -x -C $T
git -C $REPO rev-parse HEAD > $T/node/sparkbuild-commit.txt
$PY -m pip wheel -q --no-deps --no-build-isolation -w $T/tools $T/sparkbuild-head
$GET --dest $T/tools gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3 unidiff==1.0.1
# 2. vLLM 0.20.0: the wheel and the sdist (its requirements/ resolve the node set)
[ -f $DL/vllm-0.20.0-cp38-abi3-manylinux_2_35_x86_64.whl ] || $PY -m pip download -q --no-deps \
  --only-binary :all: --python-version 3.12 --implementation cp --platform manylinux_2_35_x86_64 \
  --dest $DL vllm==0.20.0
[ -f $DL/vllm-0.20.0.tar.gz ] || $PY -m pip download -q --no-deps --no-binary :all: \
  --no-build-isolation --dest $DL vllm==0.20.0 || true
[ -f $DL/vllm-0.20.0.tar.gz ] || { echo "no vllm-0.20.0.tar.gz in $DL" >&2; exit 2; }
# 3. the node set, and llguidance 1.3.0 (above); its only x86_64 wheel is manylinux_2_17
PATH=$(dirname $PY):$PATH $PY $REPO/bench/first-start/missing_wheels.py --sdist $DL/vllm-0.20.0.tar.gz \
  --freeze $REPO/bench/first-start/device-pip-list.txt --dest $T/runtime \
  --out $T/node/node_set.json --view-list $T/node/image-view.txt
$GET --dest $T/runtime llguidance==1.3.0
# 4. the flashinfer pin and the builder's imports (numpy, tvm-ffi: the node set's)
mapfile -t reqs < <(PYTHONPATH=$T/sparkbuild-head/src $PY -c \
  'from sparkbuild.flashinfer.builder import IMPORT_REQUIREMENTS as r
from sparkbuild.recipe import load_recipe
import sys
(pin,) = [p for p in load_recipe(sys.argv[1]).pins if p.key == "flashinfer-python"]
print(pin.requirement)
print(*[x for x in r if not x.startswith(("numpy", "apache-tvm-ffi"))], sep="\n")' \
  $HERE/tiny-moe.toml)
$GET --dest $T/fi "${reqs[@]}"
mv $T/runtime/numpy-*.whl $T/runtime/apache_tvm_ffi-*.whl $T/fi/
# 5. the model set as sparkbuild lists it (HEAD's code), for the record
PYTHONPATH=$T/sparkbuild-head/src $PY -m sparkbuild flashinfer-aot --recipe $HERE/tiny-moe.toml \
  --list --json > $T/node/model-set-12.1a.json
# 6. the parts: p0 = tools, fi, node, the wheel's last chunk and runtime wheels up to CHUNK;
#    the other runtime wheels in self-contained tars; the wheel's full chunks one a part
mkdir -p $T/p0/whlchunks; cp -r $T/tools $T/fi $T/node $T/p0/
split -b $CHUNK -d -a 2 $DL/vllm-0.20.0-cp38-abi3-manylinux_2_35_x86_64.whl $T/chunk.
(cd $DL && sha256sum vllm-0.20.0-cp38-abi3-manylinux_2_35_x86_64.whl) > $T/p0/node/vllm-wheel.sha256
last=$(ls $T/chunk.* | tail -1); mv $last $T/p0/whlchunks/
$PY - $T $CHUNK <<'PY'
import os, shutil, sys
from pathlib import Path
t, cap = Path(sys.argv[1]), int(sys.argv[2]) - 512 * 1024  # tar headers
def size(d): return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
bins = [t / "p0"]
wheels = sorted((t / "runtime").glob("*.whl"), key=lambda f: -f.stat().st_size)
for w in wheels:
    for b in bins:
        if size(b) + w.stat().st_size <= cap:
            break
    else:
        b = t / f"p{len(bins)}"; bins.append(b)
    (b / "runtime").mkdir(parents=True, exist_ok=True)
    shutil.move(str(w), b / "runtime" / w.name)
print(" ".join(f"{b.name}:{size(b) / 1048576:.1f}MiB" for b in bins))
PY
n=$(ls -d $T/p[0-9]* | wc -l)
for c in $(ls $T/chunk.*); do mkdir -p $T/p$n/whlchunks && mv $c $T/p$n/whlchunks/; n=$((n + 1)); done
for d in $(ls -d $T/p[0-9]* | grep -v '/p0$'); do p=$(basename $d); mkdir -p $OUTP/$p
  tar -C $d -cf $OUTP/$p/$p.tar . ; done
# p0 carries the list of the other parts (name, size, sha256): the chain waits for them
(cd $OUTP && for f in $(ls -d p* | grep -v '^p0$'); do echo "$f.tar $(stat -c %s $f/$f.tar) $(sha256sum < $f/$f.tar | cut -c1-64)"; done) > $T/p0/node/parts.txt
mkdir -p $OUTP/p0 && tar -C $T/p0 -cf $OUTP/p0/p0.tar .
cp $T/p0/node/parts.txt $OUTP/parts.txt
ls -la $OUTP/*/; cat $OUTP/parts.txt
du -sh $OUTP
