// silu(x) * y over rows of [x | y], built for every supported target arch.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "cuda_utils.cuh"
#include "ops.h"

namespace mini_vllm {

__global__ void silu_and_mul_kernel(float* __restrict__ out, const float* __restrict__ input,
                                    int64_t d) {
  const int64_t row = blockIdx.x;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float x = input[row * 2 * d + i];
    const float y = input[row * 2 * d + d + i];
    out[row * d + i] = x / (1.0f + expf(-x)) * y;
  }
}

void check_cuda(int status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " +
                             cudaGetErrorString(static_cast<cudaError_t>(status)));
  }
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

std::vector<float> silu_and_mul(const std::vector<float>& input, int64_t d) {
  if (d <= 0 || input.size() % (2 * d) != 0) {
    throw std::invalid_argument("input size must be a multiple of 2*d");
  }
  const int64_t rows = static_cast<int64_t>(input.size()) / (2 * d);
  DeviceBuffer<float> in(input);
  DeviceBuffer<float> out(static_cast<size_t>(rows * d));
  if (rows > 0) {
    silu_and_mul_kernel<<<rows, 128>>>(out.get(), in.get(), d);
    check_launch("silu_and_mul_kernel");
  }
  return out.to_host();
}

}  // namespace mini_vllm
