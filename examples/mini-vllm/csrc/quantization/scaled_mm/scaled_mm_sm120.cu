// A naive scaled matmul, standing in for vLLM's SM12x CUTLASS kernels:
// C[m, n] = scale_a * scale_b * sum_k A[m, k] * B[k, n].
#include <cuda_runtime.h>

#include <cstdio>
#include <stdexcept>

#include "cuda_utils.cuh"
#include "ops.h"

namespace mini_vllm {

// Like vLLM's SM12x kernels, the body is compiled only for the GPUs it was written for, and
// every other target gets a body that says so and traps.  This guard names SM120 alone
// (vllm 0.11.0's enable_sm120_only tests `__CUDA_ARCH__ == 1200` the same way), so a
// sm_121a build gets the trap: sparkbuild's `sm12x-family-guards` widens it to the family.
__global__ void scaled_mm_kernel(float* __restrict__ c, const float* __restrict__ a,
                                 const float* __restrict__ b, int64_t m, int64_t n,
                                 int64_t k, float scale) {
#if defined(__CUDA_ARCH__)
  #if __CUDA_ARCH__ == 1200
  const int64_t row = blockIdx.y;
  const int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= m || col >= n) {
    return;
  }
  float acc = 0.0f;
  for (int64_t i = 0; i < k; ++i) {
    acc += a[row * k + i] * b[i * n + col];
  }
  c[row * n + col] = acc * scale;
  #else
  printf("scaled_mm_kernel: this build is for sm_%d; the kernel is written for SM120\n",
         __CUDA_ARCH__ / 10);
  __trap();
  #endif
#endif
}

std::vector<float> scaled_mm(const std::vector<float>& a, const std::vector<float>& b,
                             int64_t m, int64_t n, int64_t k, float scale_a, float scale_b) {
  if (m < 0 || n < 0 || k < 0 || a.size() != static_cast<size_t>(m * k) ||
      b.size() != static_cast<size_t>(k * n)) {
    throw std::invalid_argument("a must be m*k and b k*n values");
  }
  DeviceBuffer<float> da(a);
  DeviceBuffer<float> db(b);
  DeviceBuffer<float> dc(static_cast<size_t>(m * n));
  if (m > 0 && n > 0) {
    const int threads = 64;
    const dim3 grid(static_cast<unsigned>((n + threads - 1) / threads), static_cast<unsigned>(m));
    scaled_mm_kernel<<<grid, threads>>>(dc.get(), da.get(), db.get(), m, n, k, scale_a * scale_b);
    check_launch("scaled_mm_kernel");
  }
  return dc.to_host();
}

}  // namespace mini_vllm
