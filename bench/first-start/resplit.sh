#!/usr/bin/env bash
# Run on the build host after prep_here.sh: its parts (.devrun/parts, cut at 58 MiB) re-cut
# into one directory per device call, .devrun-c1 ... .devrun-cN, each holding fs.sh, the
# scripts and at most PIECE_MIB (default 50) of parts, so that a call with the working tree
# (about 6 MiB) stays under the 64 MiB a call carries.  build.tar's list of runtime parts
# (runtime-parts.txt) is rewritten for the new runtime pieces.  .devrun-w: scripts only,
# for the calls that only watch.
#   bash bench/first-start/resplit.sh        ->  .devrun-c1 .. .devrun-cN, .devrun-w
# Each call:  FS_D=$PWD/.devrun-cK bash .devrun-cK/fs.sh receive && ... fs.sh build|watch S
set -eu
REPO=$(cd "$(dirname "$0")/../.." && pwd); D=$REPO/.devrun; P=$D/parts
PIECE=${PIECE_MIB:-50}; T=$(mktemp -d); trap 'rm -rf $T' EXIT
if [ -f $P/build-parts.txt ]; then cat $(cut -d' ' -f1 $P/build-parts.txt | sed "s|^|$P/|") > $T/build.tar
else cp $P/build.tar $T/build.tar; fi
cat $P/runtime.tar.* > $T/runtime-all.tar
mkdir $T/new; split -b ${PIECE}M -d $T/runtime-all.tar $T/new/runtime.tar.
(cd $T/new && for f in runtime.tar.*; do echo "$f $(stat -c %s $f)"; done) > $T/runtime-parts.txt
tar --delete -f $T/build.tar runtime-parts.txt
tar -C $T -rf $T/build.tar runtime-parts.txt
split -b ${PIECE}M -d $T/build.tar $T/new/build.tar.
(cd $T/new && for f in build.tar.*; do echo "$f $(stat -c %s $f)"; done) > $T/new/build-parts.txt
rm -rf $REPO/.devrun-c* $REPO/.devrun-w
mkdir -p $REPO/.devrun-w; (cd $D && tar -cf - --exclude=./parts .) | tar -C $REPO/.devrun-w -xf -
k=0
for f in $(cd $T/new && ls build.tar.* runtime.tar.*); do k=$((k + 1)); C=$REPO/.devrun-c$k
  cp -r $REPO/.devrun-w $C; mkdir -p $C/parts; mv $T/new/$f $C/parts/
  [ $k = 1 ] && mv $T/new/build-parts.txt $C/parts/
  echo ".devrun-c$k: $(ls $C/parts | tr '\n' ' ')($(du -sb $C | cut -f1) bytes)"; done
