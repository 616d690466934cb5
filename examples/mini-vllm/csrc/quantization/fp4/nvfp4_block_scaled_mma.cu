// One FP4 block-scaled tensor-core MMA, the instruction NVFP4 GEMMs are made of:
//   D (16x8, f32) = (A (16x64, E2M1) * scale_a) x (B (64x8, E2M1) * scale_b) + 0
// with one UE4M3 scale per 16 values along K (mma ... kind::mxf4nvf4.block_scale
// .scale_vec::4X, `OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X` in SASS).
//
// ptxas has the instruction only for arch- and family-specific targets (sm_120a,
// sm_121a, sm_120f, sm_121f); for plain sm_121 it refuses it.  So the kernel is guarded
// the way CUTLASS guards its SM12x kernels: the real body under the feature macros nvcc
// defines for those targets, and otherwise a body that prints why and traps.  nvcc
// exits 0 either way: only the machine code (`sparkbuild verify`) shows which one a
// wheel holds.
//
// The kernel takes and returns the per-lane register fragments of the instruction as
// they are (lane l holds a[4l..4l+3], b[2l..2l+1], one scale word for A and one for B,
// and d[4l..4l+3]); arranging matrices into fragments is the caller's business.
#include <cuda_runtime.h>

#include <cstdio>
#include <stdexcept>

#include "cuda_utils.cuh"
#include "ops.h"

#if defined(__CUDA_ARCH__) &&                                                        \
    (defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL) ||   \
     (defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1200 && \
      __CUDA_ARCH_FAMILY_SPECIFIC__ < 1300))
  #define MINI_VLLM_HAS_BLOCK_SCALED_MMA 1
#endif

namespace mini_vllm {

constexpr int kMmaLanes = 32;

__global__ void nvfp4_block_scaled_mma_kernel(const uint32_t* __restrict__ a,
                                              const uint32_t* __restrict__ b,
                                              const uint32_t* __restrict__ scale_a,
                                              const uint32_t* __restrict__ scale_b,
                                              float* __restrict__ d) {
#if defined(MINI_VLLM_HAS_BLOCK_SCALED_MMA)
  const int lane = threadIdx.x;
  const float zero = 0.0f;
  float d0, d1, d2, d3;
  asm volatile(
      "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
      ".f32.e2m1.e2m1.f32.ue4m3 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10}, "
      "%11, {%13, %13}, %12, {%13, %13};\n"
      : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
      : "r"(a[4 * lane]), "r"(a[4 * lane + 1]), "r"(a[4 * lane + 2]), "r"(a[4 * lane + 3]),
        "r"(b[2 * lane]), "r"(b[2 * lane + 1]), "f"(zero), "r"(scale_a[lane]),
        "r"(scale_b[lane]), "h"(static_cast<uint16_t>(0)));
  d[4 * lane] = d0;
  d[4 * lane + 1] = d1;
  d[4 * lane + 2] = d2;
  d[4 * lane + 3] = d3;
#elif defined(__CUDA_ARCH__)
  printf("nvfp4_block_scaled_mma_kernel: built for a target without block-scaled MMA "
         "(sm_%d); build for 12.1a (or 12.1f, 12.0f)\n", __CUDA_ARCH__ / 10);
  __trap();
#endif
}

std::vector<float> nvfp4_mma_fragments(const std::vector<uint32_t>& a,
                                       const std::vector<uint32_t>& b,
                                       const std::vector<uint32_t>& scale_a,
                                       const std::vector<uint32_t>& scale_b) {
  if (a.size() != 4 * kMmaLanes || b.size() != 2 * kMmaLanes ||
      scale_a.size() != kMmaLanes || scale_b.size() != kMmaLanes) {
    throw std::invalid_argument("fragments: a 128 words, b 64 words, scales 32 words each");
  }
  DeviceBuffer<uint32_t> da(a);
  DeviceBuffer<uint32_t> db(b);
  DeviceBuffer<uint32_t> dsa(scale_a);
  DeviceBuffer<uint32_t> dsb(scale_b);
  DeviceBuffer<float> dd(4 * kMmaLanes);
  nvfp4_block_scaled_mma_kernel<<<1, kMmaLanes>>>(da.get(), db.get(), dsa.get(), dsb.get(),
                                                  dd.get());
  check_launch("nvfp4_block_scaled_mma_kernel");
  return dd.to_host();
}

}  // namespace mini_vllm
