// Small helpers shared by the mini-vllm kernels' host code.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "ops.h"

namespace mini_vllm {

// A device buffer that frees itself: host launchers stay exception-safe.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(count) {
    check_cuda(cudaMalloc(&data_, sizeof(T) * (count_ ? count_ : 1)), "cudaMalloc");
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    check_cuda(cudaMemcpy(data_, host.data(), sizeof(T) * count_, cudaMemcpyHostToDevice),
               "cudaMemcpy to device");
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  std::vector<T> to_host() const {
    std::vector<T> host(count_);
    check_cuda(cudaMemcpy(host.data(), data_, sizeof(T) * count_, cudaMemcpyDeviceToHost),
               "cudaMemcpy to host");
    return host;
  }

 private:
  T* data_ = nullptr;
  size_t count_;
};

inline void check_launch(const char* kernel) {
  check_cuda(cudaGetLastError(), kernel);
  check_cuda(cudaDeviceSynchronize(), kernel);
}

}  // namespace mini_vllm
