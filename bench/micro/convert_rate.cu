// How many e4m3 -> f16 widenings (and m16n8k16 f16 mma) one SM retires per clock: the rates the
// gemv's block math leans on (it widens every weight byte once). Measured on the H200, cvt runs
// at ~54 lanes per clock, near the integer rate, so it does not bound the gemv.
// Each way runs in one CTA of 1024 threads per SM, 8 independent chains per thread, timed by
// the SM's clock.
//   build/bench/mxlinear_convert_rate (the CMake target mxlinear_convert_rate)
// Prints lanes (results of one thread) per clock and SM for each way; for the mma, warp
// instructions per clock and SM.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace {

constexpr int kThreads = 1024;
constexpr int kChains = 8;
constexpr int kSteps = 4096;

// cvt.rn.f16x2.e4m3x2 of the low two bytes: the hardware widening.
__device__ __forceinline__ std::uint32_t widen_cvt(std::uint32_t x) {
  std::uint32_t r;
  asm volatile("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %1;\ncvt.rn.f16x2.e4m3x2 %0, l;\n}\n"
               : "=r"(r)
               : "r"(x));
  return r;
}

// The same two values times 2^-8 in integer ops: each byte with its sign replicated above it
// (prmt), shifted into f16's exponent and mantissa, the stray sign bits cleared.
__device__ __forceinline__ std::uint32_t widen_int(std::uint32_t x) {
  std::uint32_t r;
  asm volatile("prmt.b32 %0, %1, 0, 0x9180;\n" : "=r"(r) : "r"(x));
  return (r << 7) & 0xBF80BF80u;
}

__device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                    std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

enum Way { kCvt, kInt, kHalfEach, kMma };

template <Way kWay>
__global__ void __launch_bounds__(kThreads, 1)
    rate(std::uint32_t seed, long long* cycles, std::uint32_t* sink) {
  std::uint32_t x[kChains];
  for (int c = 0; c < kChains; ++c) x[c] = seed * (threadIdx.x + 1) + c * 0x01030507u;
  float acc[kChains / 2][4] = {};
  __syncthreads();
  const long long start = clock64();
  for (int s = 0; s < kSteps; ++s) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (kWay == kCvt) x[c] = widen_cvt(x[c]);
      if constexpr (kWay == kInt) x[c] = widen_int(x[c]);
      if constexpr (kWay == kHalfEach) x[c] = c % 2 == 0 ? widen_cvt(x[c]) : widen_int(x[c]);
    }
    if constexpr (kWay == kMma) {
#pragma unroll
      for (int c = 0; c < kChains / 2; ++c) {
        const std::uint32_t a[4] = {x[0], x[1], x[2], x[3]};
        mma(acc[c], a, x[4 + c % 4], x[c]);
      }
    }
  }
  __syncthreads();
  const long long end = clock64();
  std::uint32_t folded = 0;
  for (int c = 0; c < kChains; ++c) folded ^= x[c];
  for (int c = 0; c < kChains / 2; ++c) folded ^= __float_as_uint(acc[c][0] + acc[c][3]);
  sink[blockIdx.x * kThreads + threadIdx.x] = folded;
  if (threadIdx.x == 0) cycles[blockIdx.x] = end - start;
}

template <Way kWay>
bool report(const char* name, const char* unit, int sms, long long* cycles, std::uint32_t* sink,
            double results_per_step) {
  rate<kWay><<<sms, kThreads>>>(3u, cycles, sink);  // warm-up
  rate<kWay><<<sms, kThreads>>>(5u, cycles, sink);
  if (cudaDeviceSynchronize() != cudaSuccess) return false;
  long long most = 0;
  for (int i = 0; i < sms; ++i) most = cycles[i] > most ? cycles[i] : most;
  const double lanes = double{kThreads} * kSteps * results_per_step;
  std::printf("%-34s %7.1f %s per clock and SM (%lld clocks, slowest SM)\n", name,
              lanes / static_cast<double>(most), unit, most);
  return true;
}

}  // namespace

int main() {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) return 1;
  long long* cycles = nullptr;
  std::uint32_t* sink = nullptr;
  if (cudaMallocManaged(&cycles, sizeof(long long) * sms) != cudaSuccess ||
      cudaMalloc(&sink, sizeof(std::uint32_t) * kThreads * sms) != cudaSuccess) {
    return 1;
  }
  const bool ok =
      report<kCvt>("cvt.rn.f16x2.e4m3x2", "lanes", sms, cycles, sink, kChains) &&
      report<kInt>("prmt + shl + and (3 integer ops)", "lanes", sms, cycles, sink, kChains) &&
      report<kHalfEach>("half cvt, half integer", "lanes", sms, cycles, sink, kChains) &&
      report<kMma>("mma m16n8k16 f16", "warp instructions", sms, cycles, sink, kChains / 2 / 32.0);
  std::printf("%s\n", ok ? "ok" : cudaGetErrorString(cudaGetLastError()));
  return ok ? 0 : 1;
}
