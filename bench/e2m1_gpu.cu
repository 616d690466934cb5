// Bandwidth of FP32 -> E2M1 packing on the GPU (issue 3): the software path of
// csrc/e2m1.cuh and cuda_fp4.h's conversion, each against a kernel that moves the same bytes
// (reads the floats, writes one 4-bit field per float) without converting. All kernels run
// in the same process on the same buffers, interleaved, and the medians are compared.
//
// Usage: e2m1_gpu [--gib G] [--reps R]   (input size in GiB of floats, default 1; reps 30)
// Prints one line per kernel and a JSON object last.
#include <cuda_fp4.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../csrc/e2m1.cuh"

namespace {

// ---- 8 floats per thread: two 16-byte loads, one 4-byte store. ----

__device__ __forceinline__ void load8(const float4* in, size_t i, float (&v)[8]) {
  const float4 a = in[2 * i];
  const float4 b = in[2 * i + 1];
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
  v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

// Same loads and stores; the word written depends on every input so nothing is dropped.
__device__ __forceinline__ uint32_t fold8(const float (&v)[8]) {
  uint32_t x = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) x ^= __float_as_uint(v[j]);
  return x;
}

__device__ __forceinline__ uint32_t cuda_fp4_pack8(const float (&v)[8]) {
  uint32_t x = 0;
#pragma unroll
  for (int j = 0; j < 8; j += 2) {
    const uint32_t pair =
        __nv_cvt_float2_to_fp4x2(make_float2(v[j], v[j + 1]), __NV_E2M1, cudaRoundNearest);
    x |= pair << (4 * j);
  }
  return x;
}

enum class Kind { kCopy, kSoftware, kCudaFp4 };

template <Kind kind>
__global__ void pack8(const float4* __restrict__ in, uint32_t* __restrict__ out, size_t words) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= words) return;
  float v[8];
  load8(in, i, v);
  if constexpr (kind == Kind::kCopy) {
    out[i] = fold8(v);
  } else if constexpr (kind == Kind::kSoftware) {
    out[i] = sparkbuild::cvt_f32x8_to_e2m1x8(v);
  } else {
    out[i] = cuda_fp4_pack8(v);
  }
}

// ---- 16 floats per thread: four 16-byte loads, one 8-byte store. ----

template <Kind kind>
__global__ void pack16(const float4* __restrict__ in, uint2* __restrict__ out, size_t pairs) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= pairs) return;
  float lo[8];
  float hi[8];
  load8(in, 2 * i, lo);
  load8(in, 2 * i + 1, hi);
  if constexpr (kind == Kind::kCopy) {
    out[i] = make_uint2(fold8(lo), fold8(hi));
  } else if constexpr (kind == Kind::kSoftware) {
    out[i] = make_uint2(sparkbuild::cvt_f32x8_to_e2m1x8(lo), sparkbuild::cvt_f32x8_to_e2m1x8(hi));
  } else {
    out[i] = make_uint2(cuda_fp4_pack8(lo), cuda_fp4_pack8(hi));
  }
}

// Inputs like the ones a quantizer converts: block-scaled values mostly inside [-6, 6],
// a spread of magnitudes, some beyond 6, and exact ties now and then.
__global__ void fill(float* x, size_t n, uint32_t seed) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed ^ static_cast<uint32_t>(i >> 32);
  h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
  const float unit = (h >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;  // [-1, 1)
  const int octave = static_cast<int>(h & 7u) - 5;                      // 2^-5 .. 2^2
  float value = ldexpf(unit, octave) * 1.75f;
  if ((h & 0xF0u) == 0) value = 0.25f * static_cast<float>(static_cast<int>(h >> 28) - 8);
  x[i] = value;
}

__global__ void count_differences(const uint32_t* a, const uint32_t* b, size_t words,
                                  unsigned long long* differences) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < words && a[i] != b[i]) atomicAdd(differences, 1ull);
}

bool cuda_ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(status));
  return false;
}

#define CHECK_CUDA(call)                 \
  do {                                   \
    if (!cuda_ok((call), #call)) std::exit(2); \
  } while (0)

struct Variant {
  std::string name;
  int floats_per_thread;
  Kind kind;
  std::vector<float> ms;
};

void launch(const Variant& v, const float* in, uint32_t* out, size_t n) {
  constexpr int kThreads = 256;
  const size_t threads = n / v.floats_per_thread;
  const unsigned blocks = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
  const auto* in4 = reinterpret_cast<const float4*>(in);
  if (v.floats_per_thread == 8) {
    switch (v.kind) {
      case Kind::kCopy: pack8<Kind::kCopy><<<blocks, kThreads>>>(in4, out, threads); break;
      case Kind::kSoftware: pack8<Kind::kSoftware><<<blocks, kThreads>>>(in4, out, threads); break;
      case Kind::kCudaFp4: pack8<Kind::kCudaFp4><<<blocks, kThreads>>>(in4, out, threads); break;
    }
  } else {
    auto* out2 = reinterpret_cast<uint2*>(out);
    switch (v.kind) {
      case Kind::kCopy: pack16<Kind::kCopy><<<blocks, kThreads>>>(in4, out2, threads); break;
      case Kind::kSoftware: pack16<Kind::kSoftware><<<blocks, kThreads>>>(in4, out2, threads); break;
      case Kind::kCudaFp4: pack16<Kind::kCudaFp4><<<blocks, kThreads>>>(in4, out2, threads); break;
    }
  }
  CHECK_CUDA(cudaGetLastError());
}

float median(std::vector<float> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t m = xs.size() / 2;
  return xs.size() % 2 ? xs[m] : 0.5f * (xs[m - 1] + xs[m]);
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 1.0;
  int reps = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--gib")) gib = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  }
  const size_t n = static_cast<size_t>(gib * (1ull << 30) / sizeof(float)) / 1024 * 1024;
  const size_t out_words = n / 8;
  const double bytes = static_cast<double>(n) * sizeof(float) + static_cast<double>(n) / 2;

  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  float* in = nullptr;
  uint32_t* out = nullptr;
  uint32_t* out_reference = nullptr;
  unsigned long long* differences = nullptr;
  CHECK_CUDA(cudaMalloc(&in, n * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&out, out_words * sizeof(uint32_t)));
  CHECK_CUDA(cudaMalloc(&out_reference, out_words * sizeof(uint32_t)));
  CHECK_CUDA(cudaMalloc(&differences, sizeof(unsigned long long)));
  fill<<<static_cast<unsigned>((n + 255) / 256), 256>>>(in, n, 0x5EEDu);
  CHECK_CUDA(cudaGetLastError());

  std::vector<Variant> variants = {
      {"copy8", 8, Kind::kCopy, {}},       {"software8", 8, Kind::kSoftware, {}},
      {"cuda_fp4_8", 8, Kind::kCudaFp4, {}}, {"copy16", 16, Kind::kCopy, {}},
      {"software16", 16, Kind::kSoftware, {}}, {"cuda_fp4_16", 16, Kind::kCudaFp4, {}},
  };
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int warm = 0; warm < 3; ++warm)
    for (const Variant& v : variants) launch(v, in, out, n);
  CHECK_CUDA(cudaDeviceSynchronize());
  for (int r = 0; r < reps; ++r) {
    for (Variant& v : variants) {
      CHECK_CUDA(cudaEventRecord(start));
      launch(v, in, out, n);
      CHECK_CUDA(cudaEventRecord(stop));
      CHECK_CUDA(cudaEventSynchronize(stop));
      float ms = 0.0f;
      CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
      v.ms.push_back(ms);
    }
  }

  // The software path must write what cuda_fp4.h writes, word for word.
  launch(variants[2], in, out_reference, n);
  launch(variants[1], in, out, n);
  CHECK_CUDA(cudaMemset(differences, 0, sizeof(unsigned long long)));
  count_differences<<<static_cast<unsigned>((out_words + 255) / 256), 256>>>(
      out, out_reference, out_words, differences);
  unsigned long long host_differences = 0;
  CHECK_CUDA(cudaMemcpy(&host_differences, differences, sizeof host_differences,
                        cudaMemcpyDeviceToHost));

  std::printf("device=%s cc=%d.%d sms=%d input=%.3f GiB reps=%d\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, n * 4.0 / (1ull << 30), reps);
  std::printf("%-12s %10s %10s %10s %10s %8s\n", "kernel", "median_ms", "min_ms", "max_ms",
              "GB/s", "of_copy");
  std::string json = "{\"device\": \"" + std::string(prop.name) + "\", \"input_gib\": " +
                     std::to_string(n * 4.0 / (1ull << 30)) + ", \"reps\": " +
                     std::to_string(reps) + ", \"software_vs_cuda_fp4_word_differences\": " +
                     std::to_string(host_differences) + ", \"kernels\": {";
  for (size_t k = 0; k < variants.size(); ++k) {
    const Variant& v = variants[k];
    const Variant& copy = variants[v.floats_per_thread == 8 ? 0 : 3];
    const float med = median(v.ms);
    const float of_copy = median(copy.ms) / med;
    const float lo = *std::min_element(v.ms.begin(), v.ms.end());
    const float hi = *std::max_element(v.ms.begin(), v.ms.end());
    std::printf("%-12s %10.4f %10.4f %10.4f %10.1f %7.1f%%\n", v.name.c_str(), med, lo, hi,
                bytes / (med * 1e-3) / 1e9, 100.0f * of_copy);
    char entry[256];
    std::snprintf(entry, sizeof entry,
                  "%s\"%s\": {\"median_ms\": %.5f, \"min_ms\": %.5f, \"max_ms\": %.5f, "
                  "\"gb_per_s\": %.1f, \"fraction_of_copy\": %.4f}",
                  k ? ", " : "", v.name.c_str(), med, lo, hi, bytes / (med * 1e-3) / 1e9, of_copy);
    json += entry;
  }
  json += "}}";
  std::printf("software vs cuda_fp4.h: %llu differing words of %zu\n", host_differences,
              out_words);
  std::printf("%s\n", json.c_str());
  return host_differences == 0 ? 0 : 1;
}
