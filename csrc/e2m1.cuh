// sparkbuild: FP32 -> FP4 E2M1 conversion for NVIDIA DGX Spark (GB10, sm_121) and elsewhere.
//
// Results are bit-exact with cuda_fp4.h's
//   __nv_cvt_float2_to_fp4x2(float2{lo, hi}, __NV_E2M1, cudaRoundNearest)
// for every input: round to nearest, ties to even, on the grid {0, .5, 1, 1.5, 2, 3, 4, 6};
// anything beyond +-6 (infinities too) saturates to +-6; NaN of either sign gives 0x7 (+6);
// -0 and negatives that round to zero give 0x8.
//
// The hardware instruction (cvt.rn.satfinite.e2m1x2.f32) is used wherever the device target
// has it; the test is on the feature (an arch-family-specific target of families 10.x, 11.x,
// 12.x, the test cuda_fp8.h uses), not on an arch number, so a build for sm_121a/sm_121f gets
// the instruction and a build for plain sm_121 (where ptxas rejects it) or for sm_90 gets the
// software path. Host code always takes the software path. The header needs no CUDA header
// and compiles with a plain C++17 compiler; the float2 overloads exist only under nvcc.
//
// The software path is FP32 and integer arithmetic only (no FP64, no branches); per value:
// three min/max, one bitwise op, one FMA, one integer multiply-add and one funnel shift.
//
// Macros:
//   SPARKBUILD_E2M1_HW             1 where this compilation pass uses the hardware instruction,
//                                  0 otherwise (always 0 in host code).
//   SPARKBUILD_E2M1_FORCE_SOFTWARE define before including to use the software path everywhere.
#pragma once

#include <cstdint>
#include <cstring>

// __host__ __device__ under a CUDA compiler, nothing otherwise.
#if defined(__CUDACC__)
#define SPARKBUILD_E2M1_HOST_DEVICE __host__ __device__
#else
#define SPARKBUILD_E2M1_HOST_DEVICE
#endif
#define SPARKBUILD_E2M1_HD SPARKBUILD_E2M1_HOST_DEVICE inline

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && \
    !defined(SPARKBUILD_E2M1_FORCE_SOFTWARE) &&                           \
    (__CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000) && (__CUDA_ARCH_FAMILY_SPECIFIC__ < 1300)
#define SPARKBUILD_E2M1_HW 1
#else
#define SPARKBUILD_E2M1_HW 0
#endif

namespace sparkbuild {
namespace e2m1_detail {

SPARKBUILD_E2M1_HD uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

SPARKBUILD_E2M1_HD float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// min/max whose second operand is a non-NaN constant: a NaN first operand yields the
// constant, as PTX min/max and C's fminf/fmaxf do (on the host, x86's minss/maxss).
SPARKBUILD_E2M1_HD float min_const(float x, float c) {
#if defined(__CUDA_ARCH__)
  return fminf(x, c);
#else
  return x < c ? x : c;
#endif
}

SPARKBUILD_E2M1_HD float max_const(float x, float c) {
#if defined(__CUDA_ARCH__)
  return fmaxf(x, c);
#else
  return x > c ? x : c;
#endif
}

SPARKBUILD_E2M1_HD float abs_of(float x) {
#if defined(__CUDA_ARCH__)
  return fabsf(x);  // an operand modifier of the min/max that uses it, no instruction
#else
  return float_of(bits_of(x) & 0x7FFFFFFFu);
#endif
}

// Multiplier and addend that move (sign, binade, step count) of `sum` below into bits 31..28.
// bits(sum) = sign*2^31 + X*2^23 + q with X = 127 + E. Modulo 2^32, in the top nibble:
//   * 2^28 puts q there; the odd multiplier keeps sign*2^31, that is sign*8;
//   * X*2^23 * 65 = X*2^29 + X*2^23 gives 2X = 14 + 2E (mod 16) plus X/32, which is 3 for
//     E = 0 and 4 for E = 1, 2; the addend's 0x08000000 carries one more in for E = 0 only
//     (X mod 32 is 31, 0, 1), so the exponent adds 2E + 2 for every E;
//   * the addend's 0xE0000000 takes that 2 away: sign*8 + q + 2E.
// (q*65 and the rest stay below bit 27.)
constexpr uint32_t kGatherMul = 0x10000041u;
constexpr uint32_t kGatherAdd = 0xE8000000u;

// The E2M1 code of x in bits 31..28 of the result (sign in bit 31); bits 27..0 are junk.
//
// 1. y = x clamped to [-6, 6]; NaN of either sign becomes +6 (min first, then max).
// 2. t = +-2^E, the sign of y and the power of two of max(|y|, 1), so E is 0, 1 or 2: the
//    E2M1 grid steps by 2^(E-1) inside that binade, and by 0.5 below 1 as within [1, 2).
//    The exponent bits of |y| are a subset of those of max(|y|, 1), so an OR then a mask
//    gives sign and exponent in one operation.
// 3. sum = t + y * 2^-22, rounded once to nearest even: the ulp of t is 2^(E-23), so the
//    low mantissa bits of sum count q = rne(|y| / 2^(E-1)), 0..4 steps (4 when rounding up
//    into the next binade), and the code magnitude is q + 2E. The product is exact for all
//    |y| >= 2^-104 and too small to matter below, so a separate multiply and add (no FMA,
//    or flush-to-zero) give the same sum.
// 4. One multiply-add gathers bit 31 (sign), the low exponent bits (E) and q into the top
//    nibble: sign*8 + q + 2E.
SPARKBUILD_E2M1_HD uint32_t code_in_top_nibble(float x) {
  const float y = max_const(min_const(x, 6.0f), -6.0f);
  const float floor_binade = max_const(abs_of(y), 1.0f);
  const uint32_t step_base = (bits_of(floor_binade) | bits_of(y)) & 0xFF800000u;
  const float sum = y * 0x1p-22f + float_of(step_base);
  return bits_of(sum) * kGatherMul + kGatherAdd;
}

// (acc << 4) | (top nibble of w): appends the code held in w below the codes in acc.
SPARKBUILD_E2M1_HD uint32_t append_code(uint32_t acc, uint32_t w) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_l(w, acc, 4);
#else
  return (acc << 4) | (w >> 28);
#endif
}

// Eight codes, v[j] in bits 4j+3..4j.
SPARKBUILD_E2M1_HD uint32_t pack8_software(const float* v) {
  uint32_t packed = code_in_top_nibble(v[7]) >> 28;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int j = 6; j >= 0; --j) packed = append_code(packed, code_in_top_nibble(v[j]));
  return packed;
}

SPARKBUILD_E2M1_HD uint8_t pack2_software(float lo, float hi) {
  return static_cast<uint8_t>(append_code(code_in_top_nibble(hi) >> 28, code_in_top_nibble(lo)));
}

#if SPARKBUILD_E2M1_HW
// cvt.rn.satfinite.e2m1x2.f32 d, a, b puts a in the HIGH nibble of d, b in the low one.
__device__ __forceinline__ uint8_t pack2_hardware(float lo, float hi) {
  uint16_t out;
  asm("{\n\t.reg .b8 pair;\n\t"
      "cvt.rn.satfinite.e2m1x2.f32 pair, %2, %1;\n\t"
      "mov.b16 %0, {pair, 0};\n\t}"
      : "=h"(out)
      : "f"(lo), "f"(hi));
  return static_cast<uint8_t>(out);
}

__device__ __forceinline__ uint32_t pack8_hardware(const float* v) {
  uint32_t out;
  asm("{\n\t.reg .b8 p0, p1, p2, p3;\n\t"
      "cvt.rn.satfinite.e2m1x2.f32 p0, %2, %1;\n\t"
      "cvt.rn.satfinite.e2m1x2.f32 p1, %4, %3;\n\t"
      "cvt.rn.satfinite.e2m1x2.f32 p2, %6, %5;\n\t"
      "cvt.rn.satfinite.e2m1x2.f32 p3, %8, %7;\n\t"
      "mov.b32 %0, {p0, p1, p2, p3};\n\t}"
      : "=r"(out)
      : "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]), "f"(v[4]), "f"(v[5]), "f"(v[6]),
        "f"(v[7]));
  return out;
}

SPARKBUILD_E2M1_HD uint8_t pack2(float lo, float hi) { return pack2_hardware(lo, hi); }
SPARKBUILD_E2M1_HD uint32_t pack8(const float* v) { return pack8_hardware(v); }
#else
SPARKBUILD_E2M1_HD uint8_t pack2(float lo, float hi) { return pack2_software(lo, hi); }
SPARKBUILD_E2M1_HD uint32_t pack8(const float* v) { return pack8_software(v); }
#endif  // SPARKBUILD_E2M1_HW

#if defined(__CUDACC__)
SPARKBUILD_E2M1_HD void flatten4(const float2* v, float (&flat)[8]) {
  for (int i = 0; i < 4; ++i) {
    flat[2 * i] = v[i].x;
    flat[2 * i + 1] = v[i].y;
  }
}
#endif

}  // namespace e2m1_detail

// ---- The conversions: hardware where this pass's target has it, software elsewhere. ----

// lo in bits 3..0, hi in bits 7..4.
SPARKBUILD_E2M1_HD uint8_t cvt_f32x2_to_e2m1x2(float lo, float hi) {
  return e2m1_detail::pack2(lo, hi);
}

// v[j] in bits 4j+3..4j.
SPARKBUILD_E2M1_HD uint32_t cvt_f32x8_to_e2m1x8(const float (&v)[8]) {
  return e2m1_detail::pack8(v);
}

// v[j] in bits 4j+3..4j.
SPARKBUILD_E2M1_HD uint64_t cvt_f32x16_to_e2m1x16(const float (&v)[16]) {
  return static_cast<uint64_t>(e2m1_detail::pack8(v)) |
         (static_cast<uint64_t>(e2m1_detail::pack8(v + 8)) << 32);
}

#if defined(__CUDACC__)
// v[i].x is element 2i, v[i].y element 2i+1.
SPARKBUILD_E2M1_HD uint32_t cvt_f32x8_to_e2m1x8(const float2 (&v)[4]) {
  float flat[8];
  e2m1_detail::flatten4(v, flat);
  return e2m1_detail::pack8(flat);
}

SPARKBUILD_E2M1_HD uint64_t cvt_f32x16_to_e2m1x16(const float2 (&v)[8]) {
  float low[8];
  float high[8];
  e2m1_detail::flatten4(v, low);
  e2m1_detail::flatten4(v + 4, high);
  return static_cast<uint64_t>(e2m1_detail::pack8(low)) |
         (static_cast<uint64_t>(e2m1_detail::pack8(high)) << 32);
}
#endif  // __CUDACC__

// ---- The software path on every target, for tests that compare it with the hardware. ----
namespace e2m1_software {

SPARKBUILD_E2M1_HD uint8_t cvt_f32x2_to_e2m1x2(float lo, float hi) {
  return e2m1_detail::pack2_software(lo, hi);
}

SPARKBUILD_E2M1_HD uint32_t cvt_f32x8_to_e2m1x8(const float (&v)[8]) {
  return e2m1_detail::pack8_software(v);
}

SPARKBUILD_E2M1_HD uint64_t cvt_f32x16_to_e2m1x16(const float (&v)[16]) {
  return static_cast<uint64_t>(e2m1_detail::pack8_software(v)) |
         (static_cast<uint64_t>(e2m1_detail::pack8_software(v + 8)) << 32);
}

}  // namespace e2m1_software
}  // namespace sparkbuild
