// Row shuffle of the MoE permute step: output row r is input row dst2src_map[r].
//
// Shaped like the kernel of the vLLM releases that sparkbuild's series patches (the
// preimage of patches/moe-shuffle-rows-bounds-guard.diff): it reads dst2src_map
// before checking that its block is a destination row, and trusts the source row
// it reads.  The patch adds both checks.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

#include "cuda_utils.cuh"
#include "cutlass_array.cuh"
#include "ops.h"

namespace mini_vllm {

template <typename T>
__global__ void shuffleInputRowsKernel(const T* input,
                                       const int32_t* dst2src_map, T* output,
                                       int64_t num_src_rows,
                                       int64_t num_dst_rows, int64_t num_cols) {
  int64_t dest_row_idx = blockIdx.x;
  int64_t const source_row_idx = dst2src_map[dest_row_idx];

  if (blockIdx.x < num_dst_rows) {
    // Load 128-bits per thread
    constexpr int64_t ELEM_PER_THREAD = 128 / sizeof(T) / 8;
    using DataElem = cutlass::Array<T, ELEM_PER_THREAD>;

    // Duplicate and permute rows
    auto const* source_row_ptr =
        reinterpret_cast<DataElem const*>(input + source_row_idx * num_cols);
    auto* dest_row_ptr =
        reinterpret_cast<DataElem*>(output + dest_row_idx * num_cols);

    int64_t const start_offset = threadIdx.x;
    int64_t const stride = blockDim.x;
    int64_t const num_elems_in_col = num_cols / ELEM_PER_THREAD;

    for (int elem_index = start_offset; elem_index < num_elems_in_col;
         elem_index += stride) {
      dest_row_ptr[elem_index] = source_row_ptr[elem_index];
    }
  }
}

std::vector<float> shuffle_rows(const std::vector<float>& input,
                                const std::vector<int32_t>& dst2src_map,
                                int64_t num_cols) {
  constexpr int64_t kElemsPerAccess = 128 / sizeof(float) / 8;
  if (num_cols <= 0 || num_cols % kElemsPerAccess != 0 ||
      input.size() % static_cast<size_t>(num_cols) != 0) {
    throw std::invalid_argument("num_cols must be a positive multiple of 4 dividing input");
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
