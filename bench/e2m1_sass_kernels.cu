// Kernels whose SASS bench/e2m1_sass_count.py counts: each packs 8 floats per thread (two
// 16-byte loads, one 4-byte store) and differs from the others only in the conversion.
#include <cuda_fp4.h>

#include <cstddef>
#include <cstdint>

#include "../csrc/e2m1.cuh"

namespace {

__device__ __forceinline__ bool load8(const float4* in, size_t words, float (&v)[8],
                                      size_t& i) {
  i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= words) return false;
  const float4 a = in[2 * i];
  const float4 b = in[2 * i + 1];
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
  v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  return true;
}

// For scale: a branch-free count of the seven rounding thresholds, exact as well
// (ties at .25, 1.25, 2.5 and 5 go down, at .75, 1.75 and 3.5 up).
__device__ __forceinline__ uint32_t threshold_code(float x) {
  const float y = fmaxf(fminf(x, 6.0f), -6.0f);
  const float a = fabsf(y);
  const uint32_t magnitude = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) +
                             (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
  return magnitude | ((__float_as_uint(y) >> 31) << 3);
}

}  // namespace

// csrc/e2m1.cuh: the software path, or the hardware instruction where the target has it.
extern "C" __global__ void pack8_sparkbuild(const float4* __restrict__ in,
                                            uint32_t* __restrict__ out, size_t words) {
  float v[8];
  size_t i;
  if (load8(in, words, v, i)) out[i] = sparkbuild::cvt_f32x8_to_e2m1x8(v);
}

// cuda_fp4.h: its FP64 emulation, or the hardware instruction where the target has it.
extern "C" __global__ void pack8_cuda_fp4(const float4* __restrict__ in,
                                          uint32_t* __restrict__ out, size_t words) {
  float v[8];
  size_t i;
  if (!load8(in, words, v, i)) return;
  uint32_t packed = 0;
  for (int j = 0; j < 8; j += 2) {
    const uint32_t pair =
        __nv_cvt_float2_to_fp4x2(make_float2(v[j], v[j + 1]), __NV_E2M1, cudaRoundNearest);
    packed |= pair << (4 * j);
  }
  out[i] = packed;
}

extern "C" __global__ void pack8_thresholds(const float4* __restrict__ in,
                                            uint32_t* __restrict__ out, size_t words) {
  float v[8];
  size_t i;
  if (!load8(in, words, v, i)) return;
  uint32_t packed = 0;
  for (int j = 0; j < 8; ++j) packed |= threshold_code(v[j]) << (4 * j);
  out[i] = packed;
}

// The same loads and store with no conversion: the floor every variant stands on.
extern "C" __global__ void pack8_none(const float4* __restrict__ in, uint32_t* __restrict__ out,
                                      size_t words) {
  float v[8];
  size_t i;
  if (!load8(in, words, v, i)) return;
  uint32_t folded = 0;
  for (int j = 0; j < 8; ++j) folded ^= __float_as_uint(v[j]);
  out[i] = folded;
}
