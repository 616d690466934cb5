// Tokens per expert; vLLM builds its MoE data kernels for SM90/SM100 only, so a
// 12.1 build leaves this file out (its arch list has no SM12x entry).
#include <cuda_runtime.h>

#include "cuda_utils.cuh"
#include "ops.h"

namespace mini_vllm {

__global__ void count_expert_tokens_kernel(int32_t* counts, const int32_t* topk_ids,
                                           int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    atomicAdd(&counts[topk_ids[i]], 1);
  }
}

std::vector<int32_t> count_expert_tokens(const std::vector<int32_t>& topk_ids,
                                         int64_t num_experts) {
  DeviceBuffer<int32_t> ids(topk_ids);
  DeviceBuffer<int32_t> counts(std::vector<int32_t>(static_cast<size_t>(num_experts), 0));
  const int64_t n = static_cast<int64_t>(topk_ids.size());
  if (n > 0) {
    count_expert_tokens_kernel<<<(n + 255) / 256, 256>>>(counts.get(), ids.get(), n);
    check_launch("count_expert_tokens_kernel");
  }
  return counts.to_host();
}

}  // namespace mini_vllm
