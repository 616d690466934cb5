// Row gather of the MoE permute step: output row r is a copy of input row dst2src_map[r].
//
// The defect that sparkbuild's `moe-shuffle-rows-bounds-guard` edit repairs is here on
// purpose: the map is read before the block is known to be a destination row, and the
// source row it names is used without a range check.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

#include "cuda_utils.cuh"
#include "ops.h"

namespace mini_vllm {

template <typename T>
__global__ void shuffleInputRowsKernel(const T* input, const int32_t* dst2src_map, T* output,
                                       int64_t num_src_rows, int64_t num_dst_rows,
                                       int64_t num_cols) {
  const int64_t row = blockIdx.x;
  const int64_t from = dst2src_map[row];
  if (row < num_dst_rows) {
    const T* src = input + from * num_cols;
    T* dst = output + row * num_cols;
    for (int64_t col = threadIdx.x; col < num_cols; col += blockDim.x) {
      dst[col] = src[col];
    }
  }
}

std::vector<float> shuffle_rows(const std::vector<float>& input,
                                const std::vector<int32_t>& dst2src_map,
                                int64_t num_cols) {
  if (num_cols <= 0 || input.size() % static_cast<size_t>(num_cols) != 0) {
    throw std::invalid_argument("num_cols must be positive and divide the input size");
  }
  const int64_t num_src_rows = static_cast<int64_t>(input.size()) / num_cols;
  const int64_t num_dst_rows = static_cast<int64_t>(dst2src_map.size());
  DeviceBuffer<float> in(input);
  DeviceBuffer<int32_t> map(dst2src_map);
  DeviceBuffer<float> out(static_cast<size_t>(num_dst_rows * num_cols));
  if (num_dst_rows > 0) {
    shuffleInputRowsKernel<float><<<num_dst_rows, 256>>>(
        in.get(), map.get(), out.get(), num_src_rows, num_dst_rows, num_cols);
    check_launch("shuffleInputRowsKernel");
  }
  return out.to_host();
}

}  // namespace mini_vllm
