// GPU check of csrc/e2m1.cuh: the software path, run on the GPU for all 2^32 float32 inputs
// in both nibble positions, against
//   - the hardware instruction, where this build's target has it (a Spark built for sm_121a,
//     or any family-specific build for 10.x/11.x/12.x), else
//   - cuda_fp4.h's __nv_cvt_float2_to_fp4x2 on the device (its FP64 emulation).
// The 8- and 16-value forms (float2 forms included) are checked on every 64th input group.
//
// Prints the device, the reference and "RESULT ok=<0|1> checked=<pairs> mismatches=<n>
// seconds=<s>" last; exit 0 iff ok, 2 when CUDA itself fails.
#include <cuda_fp4.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "../e2m1.cuh"

namespace {

constexpr uint32_t kSignBit = 0x80000000u;
constexpr int kMaxReported = 8;

struct Mismatch {
  uint32_t form;  // 2: x2, 8: x8, 16: x16, 28: x8 float2, 216: x16 float2
  uint32_t lo_bits;
  uint32_t hi_bits;
  uint32_t expected;
  uint32_t got;
};

struct Report {
  unsigned long long mismatches;
  unsigned long long checked;
  unsigned int reported;
  Mismatch first[kMaxReported];
};

__device__ uint8_t reference_pair(float lo, float hi) {
#if SPARKBUILD_E2M1_HW
  return sparkbuild::cvt_f32x2_to_e2m1x2(lo, hi);
#else
  return static_cast<uint8_t>(
      __nv_cvt_float2_to_fp4x2(make_float2(lo, hi), __NV_E2M1, cudaRoundNearest));
#endif
}

__device__ void report_mismatch(Report* report, uint32_t form, uint32_t lo, uint32_t hi,
                                uint32_t expected, uint32_t got) {
  atomicAdd(&report->mismatches, 1ull);
  const unsigned int slot = atomicAdd(&report->reported, 1u);
  if (slot < kMaxReported) report->first[slot] = Mismatch{form, lo, hi, expected, got};
}

// Pair n: lo = n, hi = n with the sign flipped, so every pattern is once lo and once hi.
__global__ void check_pairs(uint64_t begin, uint64_t count, Report* report) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long checked = 0;
  for (uint64_t n = begin + blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
       n < begin + count; n += stride) {
    const uint32_t lo_bits = static_cast<uint32_t>(n);
    const uint32_t hi_bits = lo_bits ^ kSignBit;
    const float lo = __uint_as_float(lo_bits);
    const float hi = __uint_as_float(hi_bits);
    const uint8_t expected = reference_pair(lo, hi);
    const uint8_t got = sparkbuild::e2m1_software::cvt_f32x2_to_e2m1x2(lo, hi);
    if (expected != got) report_mismatch(report, 2, lo_bits, hi_bits, expected, got);
    ++checked;
  }
  atomicAdd(&report->checked, checked);
}

// Group g: 16 consecutive patterns from 64 * 16 * g, signs alternating.
__global__ void check_wide_forms(uint64_t groups, Report* report) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t g = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += stride) {
    float v[16];
    float2 pairs[8];
    uint32_t first_bits = 0;
    for (int j = 0; j < 16; ++j) {
      const uint32_t bits = static_cast<uint32_t>(g * 1024u + j) ^ (j & 1 ? kSignBit : 0u);
      if (j == 0) first_bits = bits;
      v[j] = __uint_as_float(bits);
    }
    uint64_t expected = 0;
    for (int j = 0; j < 8; ++j) {
      pairs[j] = make_float2(v[2 * j], v[2 * j + 1]);
      expected |= static_cast<uint64_t>(reference_pair(v[2 * j], v[2 * j + 1])) << (8 * j);
    }
    const float(&low)[8] = *reinterpret_cast<const float(*)[8]>(&v[0]);
    const float2(&low_pairs)[4] = *reinterpret_cast<const float2(*)[4]>(&pairs[0]);
    const uint64_t soft16 = sparkbuild::e2m1_software::cvt_f32x16_to_e2m1x16(v);
    const uint32_t soft8 = sparkbuild::e2m1_software::cvt_f32x8_to_e2m1x8(low);
    const uint64_t any16 = sparkbuild::cvt_f32x16_to_e2m1x16(pairs);
    const uint32_t any8 = sparkbuild::cvt_f32x8_to_e2m1x8(low_pairs);
    const uint32_t low_expected = static_cast<uint32_t>(expected);
    if (soft16 != expected) report_mismatch(report, 16, first_bits, 0, 0, 0);
    if (soft8 != low_expected) report_mismatch(report, 8, first_bits, 0, low_expected, soft8);
    if (any16 != expected) report_mismatch(report, 216, first_bits, 0, 0, 0);
    if (any8 != low_expected) report_mismatch(report, 28, first_bits, 0, low_expected, any8);
  }
}

__global__ void path_of_this_build(int* uses_hardware) { *uses_hardware = SPARKBUILD_E2M1_HW; }

bool ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  std::printf("CUDA error in %s: %s\n", what, cudaGetErrorString(status));
  return false;
}

#define CHECK_CUDA(call) \
  do {                   \
    if (!ok((call), #call)) return 2; \
  } while (0)

}  // namespace

int main() {
  int device = 0;
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  Report* report = nullptr;  // plain device memory, copied back at the end
  int* uses_hardware = nullptr;
  CHECK_CUDA(cudaMalloc(&report, sizeof(Report)));
  CHECK_CUDA(cudaMalloc(&uses_hardware, sizeof(int)));
  CHECK_CUDA(cudaMemset(report, 0, sizeof(Report)));
  path_of_this_build<<<1, 1>>>(uses_hardware);
  CHECK_CUDA(cudaGetLastError());
  int hardware = 0;
  CHECK_CUDA(cudaMemcpy(&hardware, uses_hardware, sizeof hardware, cudaMemcpyDeviceToHost));
  std::printf("device=%s cc=%d.%d\n", prop.name, prop.major, prop.minor);
  std::printf("reference=%s\n", hardware ? "hardware cvt.rn.satfinite.e2m1x2.f32"
                                         : "cuda_fp4.h __nv_cvt_float2_to_fp4x2");

  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaEventRecord(start));
  const int blocks = prop.multiProcessorCount * 8;
  const uint64_t slice = uint64_t{1} << 30;  // launches of a second or less, even on small GPUs
  for (uint64_t begin = 0; begin < (uint64_t{1} << 32); begin += slice) {
    check_pairs<<<blocks, 256>>>(begin, slice, report);
    CHECK_CUDA(cudaGetLastError());
  }
  check_wide_forms<<<blocks, 256>>>(uint64_t{1} << 22, report);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaEventRecord(stop));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0.0f;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  Report result{};
  CHECK_CUDA(cudaMemcpy(&result, report, sizeof result, cudaMemcpyDeviceToHost));

  const unsigned int shown = result.reported < kMaxReported ? result.reported : kMaxReported;
  for (unsigned int i = 0; i < shown; ++i) {
    const Mismatch& m = result.first[i];
    std::printf("MISMATCH form=%u lo=0x%08x hi=0x%08x expected=0x%x got=0x%x\n", m.form,
                m.lo_bits, m.hi_bits, m.expected, m.got);
  }
  const bool all_checked = result.checked == (uint64_t{1} << 32);
  if (!all_checked) std::printf("checked %llu pairs, not 2^32\n", result.checked);
  const bool passed = result.mismatches == 0 && all_checked;
  std::printf("uses_hardware=%d\n", hardware);
  std::printf("RESULT ok=%d checked=%llu mismatches=%llu seconds=%.3f\n", passed ? 1 : 0,
              result.checked, result.mismatches, ms / 1000.0);
  return passed ? 0 : 1;
}
