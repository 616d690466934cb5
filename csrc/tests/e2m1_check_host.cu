// Exhaustive host check of csrc/e2m1.cuh against cuda_fp4.h's host conversion.
//
// Every float32 bit pattern goes through cvt_f32x2_to_e2m1x2 once as `lo` and once as `hi`
// (pairs (i, i ^ sign bit) cover each pattern once in each nibble position), compared with
// __nv_cvt_float2_to_fp4x2(float2{lo, hi}, __NV_E2M1, cudaRoundNearest). The 8- and
// 16-value forms, float2 forms included, are checked on a strided subset against the same
// reference, nibble by nibble.
//
// Usage: e2m1_check_host [--threads N] [--stride S] [--no-ftz]
//   --stride S  check every S-th pair only (default 1: all of them)
//   --no-ftz    leave x86's flush-to-zero off (see below; 3 to 4 times slower)
//
// On x86 the sweep runs with MXCSR.FTZ set (not DAZ): it flushes results below 2^-126 to zero.
// The one such result in the software path is y * 2^-22 for |y| < 2^-104, which adds nothing
// to the sum either way (the formula is exact with or without flushing, see e2m1.cuh), while
// the reference only converts float to double exactly and works on the bits. Left off, each
// of those ~40% of inputs costs a microcode assist.
// Built with -DSPARKBUILD_E2M1_MUTANT_TIE it rounds the tie +2.5 up to 3 instead of down to 2,
// and must then fail: that proves the check sees a single wrong tie.
// Prints "RESULT ok=<0|1> checked=<pairs> mismatches=<n> seconds=<s>" last; exit 0 iff ok.
#include <cuda_fp4.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../e2m1.cuh"

#if SPARKBUILD_E2M1_HW
#error "host code must take the software path"
#endif

namespace {

constexpr uint64_t kAllPatterns = uint64_t{1} << 32;
constexpr uint32_t kSignBit = 0x80000000u;
constexpr int kMaxReported = 8;

float float_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint8_t reference_pair(float lo, float hi) {
  return static_cast<uint8_t>(
      __nv_cvt_float2_to_fp4x2(make_float2(lo, hi), __NV_E2M1, cudaRoundNearest));
}

uint8_t candidate_pair(float lo, float hi) {
  uint8_t out = sparkbuild::cvt_f32x2_to_e2m1x2(lo, hi);
#if defined(SPARKBUILD_E2M1_MUTANT_TIE)
  if (lo == 2.5f) out = static_cast<uint8_t>((out & 0xF0u) | 0x5u);
  if (hi == 2.5f) out = static_cast<uint8_t>((out & 0x0Fu) | 0x50u);
#endif
  return out;
}

struct Mismatch {
  std::string form;
  uint32_t lo_bits;
  uint32_t hi_bits;
  unsigned expected;
  unsigned got;
};

struct Report {
  std::atomic<uint64_t> mismatches{0};
  std::atomic<uint64_t> checked{0};
  std::mutex lock;
  std::vector<Mismatch> first;

  void add(const char* form, uint32_t lo, uint32_t hi, unsigned expected, unsigned got) {
    mismatches.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> guard(lock);
    if (first.size() < kMaxReported) first.push_back({form, lo, hi, expected, got});
  }
};

void set_flush_to_zero(bool on) {
#if defined(__x86_64__) || defined(__i386__)
  _MM_SET_FLUSH_ZERO_MODE(on ? _MM_FLUSH_ZERO_ON : _MM_FLUSH_ZERO_OFF);
#else
  (void)on;
#endif
}

// Pairs [begin, end) of the exhaustive sweep, every `stride`-th one.
void check_pairs(uint64_t begin, uint64_t end, uint64_t stride, bool ftz, Report& report) {
  set_flush_to_zero(ftz);
  uint64_t count = 0;
  for (uint64_t n = begin; n < end; n += stride) {
    const uint32_t lo_bits = static_cast<uint32_t>(n);
    const uint32_t hi_bits = lo_bits ^ kSignBit;
    const float lo = float_from_bits(lo_bits);
    const float hi = float_from_bits(hi_bits);
    const uint8_t expected = reference_pair(lo, hi);
    const uint8_t got = candidate_pair(lo, hi);
    if (expected != got) report.add("x2", lo_bits, hi_bits, expected, got);
    ++count;
  }
  report.checked.fetch_add(count, std::memory_order_relaxed);
}

// Groups of 16 patterns starting at `first`, spread over the whole range: the wide forms
// must give, nibble by nibble, what the reference gives pair by pair.
void check_wide_forms(uint64_t groups, Report& report) {
  for (uint64_t g = 0; g < groups; ++g) {
    const uint32_t base = static_cast<uint32_t>(g * 0x10001ull * 4093u);
    float v[16];
    uint32_t b[16];
    for (int j = 0; j < 16; ++j) {
      b[j] = (base + static_cast<uint32_t>(j) * 0x01000193u) ^ (j & 1 ? 0x80000000u : 0u);
      v[j] = float_from_bits(b[j]);
    }
    uint64_t expected = 0;
    for (int j = 0; j < 16; j += 2) {
      expected |= static_cast<uint64_t>(reference_pair(v[j], v[j + 1])) << (4 * j);
    }
    const float(&low)[8] = *reinterpret_cast<const float(*)[8]>(&v[0]);
    const float2 pairs[8] = {make_float2(v[0], v[1]),   make_float2(v[2], v[3]),
                             make_float2(v[4], v[5]),   make_float2(v[6], v[7]),
                             make_float2(v[8], v[9]),   make_float2(v[10], v[11]),
                             make_float2(v[12], v[13]), make_float2(v[14], v[15])};
    const float2(&low_pairs)[4] = *reinterpret_cast<const float2(*)[4]>(&pairs[0]);
    const uint64_t x16 = sparkbuild::cvt_f32x16_to_e2m1x16(v);
    const uint64_t x16_pairs = sparkbuild::cvt_f32x16_to_e2m1x16(pairs);
    const uint32_t x8 = sparkbuild::cvt_f32x8_to_e2m1x8(low);
    const uint32_t x8_pairs = sparkbuild::cvt_f32x8_to_e2m1x8(low_pairs);
    const uint64_t soft16 = sparkbuild::e2m1_software::cvt_f32x16_to_e2m1x16(v);
    if (x16 != expected) report.add("x16", b[0], b[1], 0, 0);
    if (x16_pairs != expected) report.add("x16 float2", b[0], b[1], 0, 0);
    if (soft16 != expected) report.add("software x16", b[0], b[1], 0, 0);
    if (x8 != static_cast<uint32_t>(expected)) report.add("x8", b[0], b[1], 0, 0);
    if (x8_pairs != static_cast<uint32_t>(expected)) report.add("x8 float2", b[0], b[1], 0, 0);
  }
}

unsigned parse_unsigned(const char* text, const char* what) {
  char* end = nullptr;
  const unsigned long value = std::strtoul(text, &end, 10);
  if (end == text || *end != '\0' || value == 0) {
    std::fprintf(stderr, "bad %s: %s\n", what, text);
    std::exit(2);
  }
  return static_cast<unsigned>(value);
}

void print_report(const Report& report, double seconds) {
  for (const Mismatch& m : report.first) {
    std::printf("MISMATCH form=%s lo=0x%08x (%.9g) hi=0x%08x (%.9g) expected=0x%02x got=0x%02x\n",
                m.form.c_str(), m.lo_bits, float_from_bits(m.lo_bits), m.hi_bits,
                float_from_bits(m.hi_bits), m.expected, m.got);
  }
  const uint64_t mismatches = report.mismatches.load();
  std::printf("RESULT ok=%d checked=%llu mismatches=%llu seconds=%.2f\n", mismatches == 0 ? 1 : 0,
              static_cast<unsigned long long>(report.checked.load()),
              static_cast<unsigned long long>(mismatches), seconds);
}

}  // namespace

int main(int argc, char** argv) {
  unsigned threads = std::thread::hardware_concurrency();
  uint64_t stride = 1;
  bool ftz = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) {
      threads = parse_unsigned(argv[++i], "--threads");
    } else if (arg == "--stride" && i + 1 < argc) {
      stride = parse_unsigned(argv[++i], "--stride");
    } else if (arg == "--no-ftz") {
      ftz = false;
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--stride S] [--no-ftz]\n", argv[0]);
      return 2;
    }
  }
  if (threads == 0) threads = 1;
  const auto started = std::chrono::steady_clock::now();
  Report report;
  std::vector<std::thread> workers;
  const uint64_t chunk = kAllPatterns / threads;
  for (unsigned t = 0; t < threads; ++t) {
    const uint64_t begin = t * chunk;
    const uint64_t end = t + 1 == threads ? kAllPatterns : begin + chunk;
    // Each chunk starts on a multiple of the stride, so the subsets of all threads line up.
    const uint64_t aligned = (begin + stride - 1) / stride * stride;
    workers.emplace_back(check_pairs, aligned, end, stride, ftz, std::ref(report));
  }
  check_wide_forms(uint64_t{1} << 16, report);
  for (std::thread& worker : workers) worker.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("threads=%u stride=%llu ftz=%d\n", threads, static_cast<unsigned long long>(stride),
              ftz ? 1 : 0);
  print_report(report, seconds);
  return report.mismatches.load() == 0 ? 0 : 1;
}
