// csrc/e2m1.cuh through a plain C++17 compiler, with no CUDA header anywhere: the named
// cases of the E2M1 rounding rules, and the packing order of the 2-, 8- and 16-value forms.
// Prints "RESULT ok=<0|1> cases=<n> failures=<n>" last; exit 0 iff ok.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>

#include "../e2m1.cuh"

#if defined(__CUDACC__) || defined(__CUDA_ARCH__)
#error "this file checks the header without CUDA: compile it with the C++ compiler"
#endif
#if SPARKBUILD_E2M1_HW
#error "without CUDA the software path must be selected"
#endif

namespace {

struct Case {
  float value;
  unsigned code;
  const char* why;
};

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

const Case kCases[] = {
    {0.0f, 0x0, "zero"},
    {-0.0f, 0x8, "negative zero keeps its sign"},
    {-1e-30f, 0x8, "tiny negative rounds to -0"},
    {from_bits(0x80000001u), 0x8, "negative denormal rounds to -0"},
    {from_bits(0x00000001u), 0x0, "denormal rounds to 0"},
    {0.25f, 0x0, "tie 0.25 -> 0 (even)"},
    {from_bits(0x3E800001u), 0x1, "just above 0.25 -> 0.5"},
    {0.5f, 0x1, "0.5"},
    {0.75f, 0x2, "tie 0.75 -> 1 (even)"},
    {from_bits(0x3F3FFFFFu), 0x1, "just below 0.75 -> 0.5"},
    {1.0f, 0x2, "1"},
    {1.25f, 0x2, "tie 1.25 -> 1 (even)"},
    {1.5f, 0x3, "1.5"},
    {1.75f, 0x4, "tie 1.75 -> 2 (even)"},
    {2.0f, 0x4, "2"},
    {2.5f, 0x4, "tie 2.5 -> 2 (even)"},
    {3.0f, 0x5, "3"},
    {3.5f, 0x6, "tie 3.5 -> 4 (even)"},
    {4.0f, 0x6, "4"},
    {5.0f, 0x6, "tie 5 -> 4 (even)"},
    {from_bits(0x40A00001u), 0x7, "just above 5 -> 6"},
    {6.0f, 0x7, "6"},
    {7.0f, 0x7, "7 saturates to 6"},
    {1e30f, 0x7, "large saturates to 6"},
    {kInf, 0x7, "+inf saturates to +6"},
    {-kInf, 0xF, "-inf saturates to -6"},
    {-2.5f, 0xC, "tie -2.5 -> -2"},
    {-3.5f, 0xE, "tie -3.5 -> -4"},
    {-6.0f, 0xF, "-6"},
    {-100.0f, 0xF, "-100 saturates to -6"},
    {kNaN, 0x7, "NaN -> +6"},
    {-kNaN, 0x7, "negative NaN -> +6"},
    {from_bits(0xFF800001u), 0x7, "negative signalling NaN -> +6"},
};

int failures = 0;
int cases = 0;

void expect(const char* what, uint64_t got, uint64_t want) {
  ++cases;
  if (got == want) return;
  ++failures;
  std::printf("FAIL %s: got 0x%llx, want 0x%llx\n", what, static_cast<unsigned long long>(got),
              static_cast<unsigned long long>(want));
}

}  // namespace

int main() {
  for (const Case& c : kCases) {
    expect(c.why, sparkbuild::cvt_f32x2_to_e2m1x2(c.value, 0.0f), c.code);
    expect(c.why, sparkbuild::cvt_f32x2_to_e2m1x2(0.0f, c.value), c.code << 4);
  }
  const float eight[8] = {0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.5f};
  expect("x8 puts v[j] in bits 4j+3..4j", sparkbuild::cvt_f32x8_to_e2m1x8(eight), 0x97654321u);
  float sixteen[16];
  for (int j = 0; j < 16; ++j) sixteen[j] = j < 8 ? eight[j] : -eight[j - 8];
  expect("x16 puts v[j] in bits 4j+3..4j", sparkbuild::cvt_f32x16_to_e2m1x16(sixteen),
         0x1FEDCBA997654321ull);
  expect("software namespace agrees", sparkbuild::e2m1_software::cvt_f32x8_to_e2m1x8(eight),
         0x97654321u);
  std::printf("RESULT ok=%d cases=%d failures=%d\n", failures == 0 ? 1 : 0, cases, failures);
  return failures == 0 ? 0 : 1;
}
