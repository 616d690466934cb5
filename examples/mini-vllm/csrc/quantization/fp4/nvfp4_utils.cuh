// mini-vllm's FP4 (E2M1) packing helpers.
//
// Each helper packs eight floats into one 32-bit word, value j in bits 4j+3..4j, through
// the hardware convert `cvt.rn.satfinite.e2m1x2.f32` (in PTX, `cvt d, a, b` puts a in the
// high nibble of d, so each pair is passed odd value first).  ptxas accepts it only for
// arch-specific and family targets (sm_100a, sm_120a, sm_121a, ...): a plain sm_121 build
// stops here, which is the fault sparkbuild's `nvfp4-software-e2m1` edit cures.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mini_vllm {

constexpr int kFp4ValuesPerWord = 8;

inline __device__ uint32_t fp32_vec_to_e2m1(float (&v)[8]) {
  uint32_t packed;
  asm volatile(
      "{\n"
      "  .reg .b8 q0, q1, q2, q3;\n"
      "  cvt.rn.satfinite.e2m1x2.f32 q0, %2, %1;\n"
      "  cvt.rn.satfinite.e2m1x2.f32 q1, %4, %3;\n"
      "  cvt.rn.satfinite.e2m1x2.f32 q2, %6, %5;\n"
      "  cvt.rn.satfinite.e2m1x2.f32 q3, %8, %7;\n"
      "  mov.b32 %0, {q0, q1, q2, q3};\n"
      "}\n"
      : "=r"(packed)
      : "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]), "f"(v[4]), "f"(v[5]), "f"(v[6]),
        "f"(v[7]));
  return packed;
}

// The same packing for values that arrive as pairs.
inline __device__ uint32_t fp32_vec_to_e2m1(float2 (&p)[4]) {
  uint32_t packed;
  asm volatile(
      "{\n"
      "  .reg .b8 q0, q1, q2, q3;\n"
      "  cvt.rn.satfinite.e2m1x2.f32 q0, %2, %1;\n"
      "  cvt.rn.satfinite.e2m1x2.f32 q1, %4, %3;\n"
      "  cvt.rn.satfinite.e2m1x2.f32 q2, %6, %5;\n"
      "  cvt.rn.satfinite.e2m1x2.f32 q3, %8, %7;\n"
      "  mov.b32 %0, {q0, q1, q2, q3};\n"
      "}\n"
      : "=r"(packed)
      : "f"(p[0].x), "f"(p[0].y), "f"(p[1].x), "f"(p[1].y), "f"(p[2].x), "f"(p[2].y),
        "f"(p[3].x), "f"(p[3].y));
  return packed;
}

}  // namespace mini_vllm
