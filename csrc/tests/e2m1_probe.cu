// SASS probe: kernels that pack with csrc/e2m1.cuh, compiled for several targets so a test can
// read the machine code: the hardware instruction where the target has it, and elsewhere no
// E2M1 instruction and no FP64 instruction. e2m1_pack8 is also the kernel whose instruction
// count bench/e2m1_sass_count.py compares between targets.
#include <cstddef>
#include <cstdint>

#include "../e2m1.cuh"

// 8 floats in (two 16-byte loads), one 32-bit word of codes out, per thread.
extern "C" __global__ void e2m1_pack8(const float4* __restrict__ in, uint32_t* __restrict__ out,
                                      size_t words) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= words) return;
  const float4 a = in[2 * i];
  const float4 b = in[2 * i + 1];
  const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  out[i] = sparkbuild::cvt_f32x8_to_e2m1x8(v);
}

extern "C" __global__ void e2m1_pack2(const float2* __restrict__ in, uint8_t* __restrict__ out,
                                      size_t bytes) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= bytes) return;
  out[i] = sparkbuild::cvt_f32x2_to_e2m1x2(in[i].x, in[i].y);
}

extern "C" __global__ void e2m1_pack8_float2(const float2* __restrict__ in,
                                             uint32_t* __restrict__ out, size_t words) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= words) return;
  const float2 v[4] = {in[4 * i], in[4 * i + 1], in[4 * i + 2], in[4 * i + 3]};
  out[i] = sparkbuild::cvt_f32x8_to_e2m1x8(v);
}

extern "C" __global__ void e2m1_pack16(const float* __restrict__ in, uint64_t* __restrict__ out,
                                       size_t words) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= words) return;
  float v[16];
  for (int j = 0; j < 16; ++j) v[j] = in[16 * i + j];
  out[i] = sparkbuild::cvt_f32x16_to_e2m1x16(v);
}

extern "C" __global__ void e2m1_pack16_float2(const float2* __restrict__ in,
                                              uint64_t* __restrict__ out, size_t words) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= words) return;
  float2 v[8];
  for (int j = 0; j < 8; ++j) v[j] = in[8 * i + j];
  out[i] = sparkbuild::cvt_f32x16_to_e2m1x16(v);
}

// Where the pass used the hardware path, 1, else 0: the test reads it from the SASS too.
extern "C" __global__ void e2m1_uses_hardware(int* out) { *out = SPARKBUILD_E2M1_HW; }
