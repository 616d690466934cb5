// NVFP4 quantization: every 8 inputs, divided by a global scale, become 8 E2M1
// nibbles in one uint32 (the first value in the lowest nibble).
#include <cuda_runtime.h>

#include <stdexcept>

#include "cuda_utils.cuh"
#include "nvfp4_utils.cuh"
#include "ops.h"

namespace mini_vllm {

__global__ void cvt_fp32_to_fp4_kernel(uint32_t* __restrict__ out,
                                       const float* __restrict__ in, int64_t num_packs,
                                       float global_scale) {
  const int64_t pack = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (pack >= num_packs) {
    return;
  }
  const float inv_scale = __frcp_rn(global_scale);
  if (pack % 2 == 0) {
    float values[kFp4ValuesPerWord];
    for (int i = 0; i < kFp4ValuesPerWord; ++i) {
      values[i] = in[pack * kFp4ValuesPerWord + i] * inv_scale;
    }
    out[pack] = fp32_vec_to_e2m1(values);
  } else {  // the float2 overload: same result, other calling convention
    float2 pairs[kFp4ValuesPerWord / 2];
    for (int i = 0; i < kFp4ValuesPerWord / 2; ++i) {
      pairs[i] = make_float2(in[pack * kFp4ValuesPerWord + 2 * i] * inv_scale,
                             in[pack * kFp4ValuesPerWord + 2 * i + 1] * inv_scale);
    }
    out[pack] = fp32_vec_to_e2m1(pairs);
  }
}

std::vector<uint32_t> scaled_fp4_quant(const std::vector<float>& input, float global_scale) {
  if (input.size() % kFp4ValuesPerWord != 0) {
    throw std::invalid_argument("input size must be a multiple of 8");
  }
  const int64_t num_packs = static_cast<int64_t>(input.size()) / kFp4ValuesPerWord;
  DeviceBuffer<float> in(input);
  DeviceBuffer<uint32_t> out(static_cast<size_t>(num_packs));
  if (num_packs > 0) {
    const int threads = 128;
    const int64_t blocks = (num_packs + threads - 1) / threads;
    cvt_fp32_to_fp4_kernel<<<blocks, threads>>>(out.get(), in.get(), num_packs, global_scale);
    check_launch("cvt_fp32_to_fp4_kernel");
  }
  return out.to_host();
}

}  // namespace mini_vllm
