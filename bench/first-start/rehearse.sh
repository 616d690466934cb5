#!/usr/bin/env bash
# The first start's device calls, rehearsed here with DRY=1 after prep_here.sh (nothing is
# installed, built or started: fs.sh prints what it would run, the chain in the foreground).
# Each call sees the scripts of .devrun and only its own part(s) in .devrun/parts; one
# scratch FS_ROOT stands for the warm machine between calls.
#   bash bench/first-start/rehearse.sh [SCRATCH]
# The calls: the build.tar piece(s) first (`receive && build`), then one runtime part each
# (`receive && watch`), then `watch` until the chain ends.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
R=${1:-$(mktemp -d /tmp/first-start-rehearsal.XXXXXX)}
[ -d $REPO/.devrun/parts ] || { echo "no .devrun/parts: run prep_here.sh first" >&2; exit 1; }
rm -rf $R/root $R/out; mkdir -p $R
export DRY=1 FS_ROOT=$R/root OUT=$R/out
call() {  # N COMMAND PART...: one device call, carrying .devrun with these parts only
  local n=$1 cmd=$2 c=$R/call$1/.devrun; shift 2
  rm -rf $R/call$n; mkdir -p $c/parts
  for f in $REPO/.devrun/*; do [ "$(basename $f)" = parts ] || ln -s $f $c/; done
  for part in "$@"; do cp $REPO/.devrun/parts/$part $c/parts/; done
  echo "== call $n: carry [\".devrun\"] with .devrun/parts holding only: ${*:-nothing};" \
       "command: $cmd"
  (cd $R/call$n && bash -c "$cmd" 2>&1 | sed 's/^/   /')
}
cd $REPO/.devrun/parts
build=$(ls build.tar build-parts.txt build.tar.* 2>/dev/null | tr '\n' ' ')
n=1
if [ -f build-parts.txt ]; then  # one call a piece, the list with the first
  for piece in build.tar.*; do
    if [ $n = 1 ]; then call $n "bash .devrun/fs.sh receive && bash .devrun/fs.sh build 5" \
      build-parts.txt $piece
    else call $n "bash .devrun/fs.sh receive && bash .devrun/fs.sh build 540" $piece; fi
    n=$((n + 1))
  done
else call $n "bash .devrun/fs.sh receive && bash .devrun/fs.sh build 540" $build; n=$((n + 1)); fi
for part in runtime.tar.*; do
  call $n "bash .devrun/fs.sh receive && bash .devrun/fs.sh watch 5" $part; n=$((n + 1))
done
echo "== back here: $OUT holds $(ls $OUT | tr '\n' ' ')"
