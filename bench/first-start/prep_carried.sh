#!/usr/bin/env bash
# The device calls' parts when the wheelhouse was built on the build host (build_here.sh):
# prep_here.sh's build.tar with the built wheelhouse in place of the bundle (wh.tar, and
# wh-origin.txt saying where it was built), cut again into pieces of 50 MiB, then one
# directory a call (.devrun-c1, .devrun-c2, ...: the scripts and that call's parts), so
# that no call waits on anything done here between calls.
#   bash bench/first-start/prep_carried.sh WHEELHOUSE "ORIGIN LINE"
# Then, for each N in order, with carry [".devrun-cN"]:
#   FS_D=$PWD/.devrun-cN bash .devrun-cN/fs.sh receive && FS_D=$PWD/.devrun-cN bash .devrun-cN/fs.sh CMD
# where CMD is in .devrun-cN/command.txt.
set -eu
WH=$(realpath "$1"); ORIGIN=$2
REPO=$(cd "$(dirname "$0")/../.." && pwd); HELD=$REPO/.devrun-held; T=$(mktemp -d)
cat $(cut -d' ' -f1 $HELD/build-parts.txt | sed "s|^|$HELD/|") > $T/build.tar
mkdir $T/b && tar -C $T/b -xf $T/build.tar && rm -f $T/b/bundle.tar.xz $T/build.tar
tar -C $(dirname $WH) -cf $T/b/wh.tar --transform "s|^$(basename $WH)|wh|" $(basename $WH)
echo "$ORIGIN" > $T/b/wh-origin.txt
tar -C $T/b -cf $T/build.tar $(cd $T/b && ls)
mkdir $T/parts && (cd $T/parts && split -b 50M -d ../build.tar build.tar. &&
  for f in build.tar.*; do echo "$f $(stat -c %s $f)"; done > build-parts.txt)
rm -rf $REPO/.devrun-c*; n=0
pieces=$(cd $T/parts && ls build.tar.*); last=$(echo $pieces | tr ' ' '\n' | tail -1)
for piece in $pieces; do n=$((n + 1)); c=$REPO/.devrun-c$n
  mkdir -p $c/parts && cp -r $REPO/.devrun/. $c/ && rm -rf $c/parts/* && cp $T/parts/$piece $c/parts/
  [ $n = 1 ] && cp $T/parts/build-parts.txt $c/parts/
  echo "build 5" > $c/command.txt
done
runtime=$(cd $HELD && ls runtime.tar.*); lastr=$(echo $runtime | tr ' ' '\n' | tail -1)
for part in $runtime; do n=$((n + 1)); c=$REPO/.devrun-c$n
  mkdir -p $c/parts && cp -r $REPO/.devrun/. $c/ && rm -rf $c/parts/* && cp $HELD/$part $c/parts/
  [ $part = $lastr ] && echo "watch 480" > $c/command.txt || echo "watch 5" > $c/command.txt
done
for d in $REPO/.devrun-c*; do echo "$(basename $d): $(ls $d/parts | tr '\n' ' ') -> $(cat $d/command.txt) ($(du -sm $d | cut -f1) MiB)"; done
rm -rf $T
