#!/usr/bin/env bash
# The device calls' parts when the wheelhouse was built on the build host (build_here.sh):
# prep_here.sh's build.tar with the built wheelhouse in place of the bundle (wh.tar, and
# wh-origin.txt saying where it was built), cut again by resplit.sh into one directory a
# call (.devrun-c1, .devrun-c2, ...: the scripts and that call's parts), so that no call
# waits on anything done here between calls.
#   bash bench/first-start/prep_carried.sh WHEELHOUSE "ORIGIN LINE"
# Then, for each N in order, with carry [".devrun-cN"]:
#   FS_D=$PWD/.devrun-cN bash .devrun-cN/fs.sh receive && FS_D=$PWD/.devrun-cN bash .devrun-cN/fs.sh CMD
# where CMD is `build 5` while build.tar's pieces arrive (the last one starts the chain),
# `watch 5` for each runtime piece but the last, `watch 480` for the last.
set -eu
WH=$(realpath "$1"); ORIGIN=$2
REPO=$(cd "$(dirname "$0")/../.." && pwd); HELD=$REPO/.devrun-held; T=$(mktemp -d)
cat $(cut -d' ' -f1 $HELD/build-parts.txt | sed "s|^|$HELD/|") > $T/build.tar
mkdir $T/b && tar -C $T/b -xf $T/build.tar && rm -f $T/b/bundle.tar.xz $T/build.tar
tar -C $(dirname $WH) -cf $T/b/wh.tar --transform "s|^$(basename $WH)|wh|" $(basename $WH)
echo "$ORIGIN" > $T/b/wh-origin.txt
tar -C $T/b -cf $T/build.tar $(cd $T/b && ls)
# the parts as prep_here.sh leaves them, then one directory a call (resplit.sh: pieces of
# at most PIECE_MIB, the list of runtime parts inside build.tar rewritten for them)
rm -rf $REPO/.devrun/parts && mkdir -p $REPO/.devrun/parts && mv $T/build.tar $REPO/.devrun/parts/
cp $HELD/runtime.tar.* $REPO/.devrun/parts/
PIECE_MIB=${PIECE_MIB:-54} bash $REPO/bench/first-start/resplit.sh
rm -rf $T
