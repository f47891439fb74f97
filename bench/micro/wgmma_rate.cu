// How fast one SM runs the prefill kernel's consumer loop with nothing else in the way: a 64 x
// 128 tile's stages of 8 register-A bf16 wgmma (m64n128k16) from a fixed shared-memory B tile,
// with and without the weight widening that feeds them (the kernel's 16 e4m3x4 conversions a
// thread and stage, from shared memory, into the other of two register sets while the previous
// stage's wgmma run), with one or two consumer warpgroups. No TMA, no barriers: if this runs near
// the tensor pipe's 4096 bf16 flops a clock, the kernel's main loop (shared down at M = 128,
// measured on the H200: ~1.1 us of wgmma and ~0.65 us of widening beyond its copies) is bound by
// how its ring feeds the consumers, not by their own rate.
//   build/bench/mxlinear_wgmma_rate (the CMake target mxlinear_wgmma_rate)
// Prints, per way, the median over the SMs of cycles per stage and the flops per clock and SM.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cta_span.cuh"
#include "device/common/mx_convert.cuh"
#include "device/ptx/hopper_ptx.cuh"
#include "device/ptx/wgmma_f16.cuh"

namespace {

using mxlinear::micro::check;
using mxlinear::micro::keep_busy;
namespace hopper = mxlinear::device::hopper;
namespace mx = mxlinear::device::mx;

constexpr int kTokens = 128;
constexpr int kStages = 512;                    // timed stages a warpgroup
constexpr int kBTileBytes = kTokens * 128 * 2;  // 128 K of bf16 a token: two 64-K atoms
constexpr int kWTileBytes = 64 * 128;           // 64 rows of 128 e4m3
constexpr int kSmemBytes = kBTileBytes + kWTileBytes + 1024;

using Fragments = std::uint32_t[4][2][4];  // [block][k16 of the block][register]

// The consumer's widening of one stage: 4 MX blocks, two rows (r and r + 8) a thread.
__device__ __forceinline__ void widen(const std::uint8_t* w_tile, int row, int t, float scale,
                                      Fragments& a) {
#pragma unroll
  for (int block = 0; block < 4; ++block) {
    const int offset = row * 128 + (((2 * block + t / 2) ^ (row & 7)) << 4) + 8 * (t & 1);
    const uint2 r0 = *reinterpret_cast<const uint2*>(w_tile + offset);
    const uint2 r8 = *reinterpret_cast<const uint2*>(w_tile + offset + 8 * 128);
    mx::e4m3x4_scaled_to_bf16x2x2(r0.x, scale, a[block][0][0], a[block][0][2]);
    mx::e4m3x4_scaled_to_bf16x2x2(r8.x, scale, a[block][0][1], a[block][0][3]);
    mx::e4m3x4_scaled_to_bf16x2x2(r0.y, scale, a[block][1][0], a[block][1][2]);
    mx::e4m3x4_scaled_to_bf16x2x2(r8.y, scale, a[block][1][1], a[block][1][3]);
  }
}

__device__ __forceinline__ void issue(float (&acc)[64], const Fragments& a, std::uint64_t b) {
  hopper::pin(acc);
  hopper::wgmma_fence();
#pragma unroll
  for (int k16 = 0; k16 < 8; ++k16) {
    const int offset = (k16 >> 2) * (kTokens * 128) + (k16 & 3) * 32;
    hopper::WgmmaBF16RS<kTokens>::run(acc, a[k16 >> 1][k16 & 1], b + (offset >> 4), true);
  }
  hopper::wgmma_commit();
}

template <bool kWiden>
__global__ void __launch_bounds__(256, 1) consumer_loop(float* sink, unsigned long long* cycles) {
  extern __shared__ std::uint8_t smem_raw[];
  const auto [smem, smem_ptr] = hopper::align_smem_1024(smem_raw);
  for (int i = static_cast<int>(threadIdx.x); i < (kBTileBytes + kWTileBytes) / 4;
       i += static_cast<int>(blockDim.x)) {
    // Small finite bf16 pairs and e4m3 bytes: the rate does not depend on the values.
    reinterpret_cast<std::uint32_t*>(smem_ptr)[i] = 0x3C003C00u ^ static_cast<std::uint32_t>(i);
  }
  __syncthreads();
  const int tid = static_cast<int>(threadIdx.x) % 128, warp = tid >> 5, lane = tid & 31;
  const int row = 16 * warp + (lane >> 2), t = lane & 3;
  const std::uint8_t* w_tile = smem_ptr + kBTileBytes;
  const std::uint64_t b = hopper::kmajor_sw128_descriptor(smem);
  const float scale = 1.0f / static_cast<float>(1 + (threadIdx.x & 1));
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
  Fragments even, odd;
  widen(w_tile, row, t, scale, even);
  widen(w_tile, row, t, scale, odd);
  __syncthreads();
  const long long start = clock64();
  for (int i = 0; i < kStages; i += 2) {
    if constexpr (kWiden) widen(w_tile, row, t, scale, even);
    issue(acc, even, b);
    hopper::wgmma_wait<1>();
    if constexpr (kWiden) widen(w_tile, row, t, scale, odd);
    issue(acc, odd, b);
    hopper::wgmma_wait<1>();
  }
  hopper::wgmma_wait<0>();
  hopper::pin(acc);
  const long long spent = clock64() - start;
  float sum = 0;
#pragma unroll
  for (int i = 0; i < 64; ++i) sum += acc[i];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;  // keeps the work alive
  if (threadIdx.x == 0) cycles[blockIdx.x] = static_cast<unsigned long long>(spent);
}

template <bool kWiden>
int run(int groups, int sms, float* sink, unsigned long long* cycles) {
  if (check(cudaFuncSetAttribute(consumer_loop<kWiden>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 kSmemBytes),
            "smem attribute")) {
    return 1;
  }
  keep_busy<<<2 * sms, 128>>>(200000);  // the clocks up first
  std::vector<unsigned long long> got(static_cast<std::size_t>(sms));
  for (int rep = 0; rep < 3; ++rep) {  // the last of three: code warm
    consumer_loop<kWiden><<<sms, 128 * groups, kSmemBytes>>>(sink, cycles);
    if (check(cudaGetLastError(), "launch") || check(cudaDeviceSynchronize(), "consumer loop") ||
        check(cudaMemcpy(got.data(), cycles, got.size() * sizeof(got[0]), cudaMemcpyDeviceToHost),
              "download")) {
      return 1;
    }
  }
  std::sort(got.begin(), got.end());
  const double per_stage = static_cast<double>(got[got.size() / 2]) / kStages;
  const double flops = 2.0 * 64 * kTokens * 128 * groups;  // a stage, all warpgroups
  std::printf("%-18s %6d %14.0f %18.0f %8.0f%%\n", kWiden ? "widen + wgmma" : "wgmma only", groups,
              per_stage, flops / per_stage, 100.0 * flops / per_stage / 4096.0);
  return 0;
}

}  // namespace

int main() {
  int device = 0, sms = 0;
  if (check(cudaGetDevice(&device), "device") ||
      check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SMs")) {
    return 1;
  }
  float* sink = nullptr;
  unsigned long long* cycles = nullptr;
  if (check(cudaMalloc(&sink, static_cast<std::size_t>(sms) * 256 * 4), "cudaMalloc") ||
      check(cudaMalloc(&cycles, static_cast<std::size_t>(sms) * 8), "cudaMalloc")) {
    return 1;
  }
  std::printf("%-18s %6s %14s %18s %9s\n", "way", "groups", "cycles/stage", "flops/clock/SM",
              "of 4096");
  int failed = 0;
  for (const int groups : {1, 2}) {
    failed += run<false>(groups, sms, sink, cycles) + run<true>(groups, sms, sink, cycles);
  }
  cudaFree(cycles);
  cudaFree(sink);
  return failed == 0 ? 0 : 1;
}
