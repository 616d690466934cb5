#!/usr/bin/env bash
# Run on the build host (network): fills .devrun-fi/ (git-ignored) for run.sh on the device
# machine (no network, python 3.12, torch 2.11.0+cu130): sparkbuild's wheel and the small
# wheels it imports, the default recipe's flashinfer-python pin (0.6.18), and every wheel
# flashinfer's builder imports (sparkbuild.flashinfer.builder.IMPORT_REQUIREMENTS), for
# cp312 x86_64.
#   bash bench/flashinfer-gpu/prep_here.sh      # then carry ".devrun-fi" (about 41 MiB)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
D=$REPO/.devrun-fi; PY=${PYTHON:-$REPO/.venv/bin/python}
rm -rf $D; mkdir -p $D/whl $D/fi
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
GET="$PY -m pip download -q --no-deps --only-binary :all: --python-version 3.12 --implementation cp $PLAT"
$GET --dest $D/whl gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3 unidiff==1.0.1
mapfile -t reqs < <(PYTHONPATH=$REPO/src $PY -c \
  'from sparkbuild.flashinfer.builder import IMPORT_REQUIREMENTS as r
from sparkbuild.recipe import DEFAULT_RECIPE, load_recipe
(pin,) = [p for p in load_recipe(DEFAULT_RECIPE).pins if p.key == "flashinfer-python"]
print(pin.requirement); print(*r, sep="\n")')
$GET --dest $D/fi "${reqs[@]}"
$PY -m pip wheel -q --no-deps --no-build-isolation -w $D $REPO
cp $HERE/run.sh $HERE/probe.py $D/
du -sh $D; ls $D/fi
