#!/usr/bin/env bash
# The first-start proof's FlashAttention-2, cut to the tiny model's head dim (64): 12 of
# FA2's 76 forward instantiations (the 0.20.0 first-token run spent 9,034 of its 12,806
# unit-seconds in FA2's), and HEADDIM_SWITCH throwing for any other head dim instead of
# dispatching to code that is not there.  vLLM's attention on this path is flashinfer's
# (the model's backend); FA2 must still import, as `vllm.vllm_flash_attn` raises without it.
# Made with git plumbing from the vllm-project/flash-attention snapshot's 617264c1 (no
# checkout: the snapshot lacks some large blobs), with fixed author and dates, so the commit
# is the same on every run: 3cd30cab9ce943e00e1b39b6649081dbe6a29e3f.
# The recipe names it as a [[vendor.stand_in]] (recipe-0.29.0.toml): sparkbuild records it
# in the manifest, the SBOM and every summary as the bits that are not the pin.
#   bash bench/first-start/fa_trim.sh SNAPSHOT_GIT OUT_SNAPSHOTS
# OUT_SNAPSHOTS/vllm-project+flash-attention/repo: a bare copy with branch trim-hdim64;
# the other snapshots of /work/.mirror are linked beside it (sources.py --snapshots).
set -eu
SRC=$(realpath "$1"); OUT=$(realpath -m "$2"); BASE=617264c1c7955c9e84817654ebeedff069f3c5f1
mkdir -p $OUT
for s in $(dirname $SRC)/../*+*; do n=$(basename $s)
  [ "$n" = vllm-project+flash-attention ] || ln -sfn $(realpath $s) $OUT/$n; done
G=$OUT/vllm-project+flash-attention/repo; rm -rf $G; mkdir -p $(dirname $G)
git clone -q --mirror "$SRC" $G
export GIT_DIR=$G GIT_INDEX_FILE=$(mktemp -u)
git read-tree $BASE
git ls-files csrc/flash_attn/src | grep 'flash_fwd.*\.cu$' | grep -v hdim64 | xargs git rm -q --cached
git show $BASE:csrc/flash_attn/src/static_switch.h | python3 -c '
import sys
s = sys.stdin.read()
i = s.index("#define HEADDIM_SWITCH"); j = s.index("}()", i) + 3
lines = ["#define HEADDIM_SWITCH(HEADDIM, ...)",
         "  [&] {",
         "    /* sparkbuild'"'"'s first-start bench: head dim 64 only (the tiny model'"'"'s) */",
         "    if (HEADDIM > 64) {",
         "      throw std::runtime_error(\"this FlashAttention-2 build holds head dim 64 only\");",
         "    }",
         "    constexpr static int kHeadDim = 64;",
         "    return __VA_ARGS__();",
         "  }()"]
width = max(len(line) for line in lines) + 1
body = "\n".join(line.ljust(width) + "\\" for line in lines[:-1]) + "\n" + lines[-1]
s = s[:i] + body + s[j:]
sys.stdout.write(s.replace("#pragma once", "#pragma once\n\n#include <stdexcept>", 1))
' > $GIT_INDEX_FILE.h
git update-index --cacheinfo 100644,$(git hash-object -w $GIT_INDEX_FILE.h),csrc/flash_attn/src/static_switch.h
export GIT_AUTHOR_NAME=sparkbuild-bench GIT_AUTHOR_EMAIL=bench@localhost GIT_AUTHOR_DATE=2026-12-07T11:30:00Z
export GIT_COMMITTER_NAME=$GIT_AUTHOR_NAME GIT_COMMITTER_EMAIL=$GIT_AUTHOR_EMAIL GIT_COMMITTER_DATE=$GIT_AUTHOR_DATE
c=$(git commit-tree $(git write-tree) -p $BASE -m "bench: FlashAttention-2 for head dim 64 only (the first-start proof's tiny model)")
git update-ref refs/heads/trim-hdim64 $c; rm -f $GIT_INDEX_FILE $GIT_INDEX_FILE.h
echo "$c"
