#!/usr/bin/env bash
# FP32 -> E2M1 on a GPU (issue 3), in one go, on a machine with nvcc, cmake, ninja, cuobjdump
# and python3 with rich and packaging (the lent H200 has them all):
#
#   1. `sparkbuild selftest e2m1 --gpu`: the exhaustive host check and its mutant, the SASS
#      probes, and the software path against cuda_fp4.h (or the hardware instruction, on a
#      GPU that has it) for all 2^32 inputs on the GPU, plain and with --use_fast_math;
#   2. bench/e2m1_gpu.cu: bandwidth of the software path and of cuda_fp4.h's conversion,
#      each against a kernel moving the same bytes, at 1 GiB and 4 GiB of floats.
#
#   bash bench/e2m1_gpu.sh OUT_DIR [ARCH]     (ARCH: what the GPU is, default sm_90)
# Writes env.txt, selftest.json, selftest_logs.tar.gz, bench_1gib.txt, bench_4gib.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/e2m1_gpu.sh OUT_DIR [ARCH]}
arch=${2:-sm_90}
mkdir -p "$out"
work=$(mktemp -d /tmp/e2m1-gpu.XXXXXX)
status=0

{
  nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.sm,clocks.max.sm,clocks.mem \
    --format=csv
  nvcc --version | tail -2
  python3 --version
  nproc
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

echo "== selftest (host sweep, mutant, SASS probes, GPU check)"
PYTHONPATH=src python3 bench/e2m1_selftest_json.py "$work/selftest" "$out/selftest.json" \
  || status=1
tar -C "$work/selftest" -czf "$out/selftest_logs.tar.gz" logs configure.log build.log || true

echo "== bandwidth benchmark ($arch)"
if nvcc -std=c++17 -O3 -arch="$arch" -o "$work/e2m1_gpu" bench/e2m1_gpu.cu; then
  for gib in 1 4; do
    "$work/e2m1_gpu" --gib "$gib" --reps 30 | tee "$out/bench_${gib}gib.txt" || status=1
  done
else
  status=1
fi
exit $status
