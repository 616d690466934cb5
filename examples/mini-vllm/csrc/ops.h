// Host entry points of the mini-vllm kernels.  Each copies its inputs to the GPU,
// launches one kernel and copies the result back; each throws std::runtime_error
// naming the CUDA error when there is no usable device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mini_vllm {

int cuda_device_count();

std::vector<float> silu_and_mul(const std::vector<float>& input, int64_t d);

std::vector<float> shuffle_rows(const std::vector<float>& input,
                                const std::vector<int32_t>& dst2src_map,
                                int64_t num_cols);

#ifdef ENABLE_SCALED_MM_SM120
std::vector<float> scaled_mm(const std::vector<float>& a, const std::vector<float>& b,
                             int64_t m, int64_t n, int64_t k, float scale_a, float scale_b);
#endif

#ifdef ENABLE_NVFP4_SM120
// Packs each group of 8 values (divided by `global_scale`) into 8 E2M1 nibbles.
std::vector<uint32_t> scaled_fp4_quant(const std::vector<float>& input, float global_scale);

// One m16n8k64 FP4 block-scaled MMA on the instruction's per-lane fragments: a (128
// words), b (64 words), one scale word per lane for A and for B; returns d (128 floats).
std::vector<float> nvfp4_mma_fragments(const std::vector<uint32_t>& a,
                                       const std::vector<uint32_t>& b,
                                       const std::vector<uint32_t>& scale_a,
                                       const std::vector<uint32_t>& scale_b);
#endif

#ifdef ENABLE_MOE_DATA
std::vector<int32_t> count_expert_tokens(const std::vector<int32_t>& topk_ids,
                                         int64_t num_experts);
#endif

// Throws std::runtime_error("<what>: <CUDA error string>") when `status` is an error.
void check_cuda(int status, const char* what);

}  // namespace mini_vllm
