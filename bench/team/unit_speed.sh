#!/usr/bin/env bash
# One real vLLM 0.20.0 unit of the measured table (bench/full-build/units-12.1a.json:
# csrc/activation_kernels.cu, target _C, 72.56 s on the H200 host), compiled once on this
# machine at 12.1a with the nvcc of /usr/local/cuda, the flags vLLM's CMake gives _C's CUDA
# units (torch's CUDA flags, -O3, C++17, one nvcc thread, the 12.1a gencode) and the headers
# of a CUDA torch's site-packages: its torch/include and nvidia/cu13/include (the table's
# build used torch 2.11.0+cu130; a CPU torch lacks c10/cuda/impl/cuda_cmake_macros.h).
# /usr/bin/time -v gives the wall, the CPU seconds and the peak; the load average before and
# after says how shared the two cores were.
#
#   bench/team/unit_speed.sh VLLM_SRC_DIR OUT_DIR SITE_PACKAGES
set -euo pipefail
src=$1 out=$2 site=$3
torch=$site/torch
# cuSPARSE's and cuBLAS's headers (torch's CUDA headers include them): the nvidia wheels
# beside torch, as /usr/local/cuda here holds only nvcc's own
nvidia=$site/nvidia/cu13/include
nvcc=/usr/local/cuda/bin/nvcc
mkdir -p "$out"
{
  echo "date $(date -u +%FT%TZ)"
  echo "nvcc $("$nvcc" --version | tail -1)"
  echo "torch $(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$torch/version.py")"
  echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs) x $(nproc)"
  echo "load-before $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/machine.txt"
cmd=("$nvcc" -forward-unknown-to-host-compiler -DTORCH_EXTENSION_NAME=_C -DUSE_C10D_GLOO
     -DUSE_C10D_NCCL -DUSE_DISTRIBUTED -DUSE_RPC -DUSE_TENSORPIPE -D_C_EXPORTS
     -I"$src/csrc" -isystem "$torch/include" -isystem "$torch/include/torch/csrc/api/include"
     -isystem /usr/local/cuda/include -isystem "$nvidia"
     -DONNX_NAMESPACE=onnx_c2 -Xcudafe --diag_suppress=cc_clobber_ignored,--diag_suppress=field_without_dll_interface,--diag_suppress=base_class_has_different_dll_interface,--diag_suppress=dll_interface_conflict_none_assumed,--diag_suppress=dll_interface_conflict_dllexport_assumed,--diag_suppress=bad_friend_decl
     --expt-relaxed-constexpr --expt-extended-lambda -O3 -DNDEBUG -std=c++17 -Xcompiler=-fPIC
     -DENABLE_FP8 -D_GLIBCXX_USE_CXX11_ABI=1 --threads=1 --compress-mode=size
     -gencode arch=compute_121a,code=sm_121a
     -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__
     -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__
     -x cu -c "$src/csrc/activation_kernels.cu" -o "$out/activation_kernels.cu.o")
printf '%q ' "${cmd[@]}" > "$out/command.txt"
/usr/bin/time -v "${cmd[@]}" 2> "$out/time.txt"
echo "load-after $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
ls -l "$out/activation_kernels.cu.o" > "$out/object.txt"
