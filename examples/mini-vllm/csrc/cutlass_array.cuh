// A stand-in for CUTLASS's cutlass::Array, enough for the mini-vllm kernels: N
// elements of T, aligned so that one element-group moves as a single wide access.
#pragma once

namespace cutlass {

template <typename T, int N>
struct alignas(sizeof(T) * N) Array {
  T storage[N];
};

}  // namespace cutlass
