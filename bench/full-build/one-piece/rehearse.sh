#!/usr/bin/env bash
# The device calls of the one-piece build, rehearsed here with DRY=1 (nothing is built or
# installed; run.sh prints what it would run): each call sees only what it carries (a
# folder of its own holding .devrun/pieces.txt and its piece), one scratch ROOT stands for
# the warm machine between calls.  After prep_here.sh (REHEARSE=1 where sources are missing).
#   bash bench/full-build/one-piece/rehearse.sh [SCRATCH]
# Prints each call as it would be made (command and carry), then run.sh's output for it,
# then report.py over what the last call collected (nothing measured: every figure None).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../../.." && pwd)
R=${1:-$(mktemp -d /tmp/one-piece-rehearsal.XXXXXX)}; PY=${PYTHON:-python3}
[ -f $REPO/.devrun/pieces.txt ] || { echo "no .devrun/pieces.txt: run prep_here.sh first" >&2; exit 1; }
rm -rf $R/root $R/out; mkdir -p $R
export DRY=1 FB_ROOT=$R/root OUT=$R/out
RUN="bash bench/full-build/run.sh"
call() {  # N PIECE COMMAND...: one device call, carrying pieces.txt and PIECE
  local n=$1 piece=$2 c=$R/call$1; shift 2
  rm -rf $c; mkdir -p $c/parts
  local carry=''
  if [ -n "$piece" ]; then cp $REPO/.devrun/pieces.txt $c/
    ln -s $REPO/.devrun/parts/$piece $c/parts/$piece
    carry="\".devrun/pieces.txt\", \".devrun/parts/$piece\""; fi
  echo "== call $n: carry [$carry]; command: $*"
  (cd $REPO && FB_DEVRUN=$c bash -c "$*" 2>&1 | sed 's/^/   /')
}
n=0; first=1
for piece in $(cut -d' ' -f1 $REPO/.devrun/pieces.txt); do
  n=$((n + 1))
  if [ $first = 1 ]; then call $n $piece "$RUN receive && $RUN start 20 one-piece all"; first=0
  else call $n $piece "$RUN receive && $RUN watch 1 one-piece"; fi
done
call $((n + 1)) "" "$RUN watch 1 one-piece"
echo "== back here: $OUT holds $(cd $OUT && ls | tr '\n' ' ')"
mkdir -p $R/one-piece && tar -xzf $OUT/one-piece.tgz -C $R/one-piece
$PY $HERE/report.py $R/one-piece --out $R/one-piece/RESULT.json | sed 's/^/   /' || true
