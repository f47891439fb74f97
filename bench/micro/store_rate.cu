// How fast the SMs can issue a GEMM tile's 16-byte output stores: the prefill kernel's store
// phase, written as a loop (128 threads, 8 consecutive bf16 outputs a thread and step), took
// ~1.25 us for a 64 x 128 tile on 96 SMs, in back-to-back calls and in one isolated call alike
// (measured on the H200). This times the same store loop alone, one CTA per SM, over grids of 1
// to 132 CTAs, with the output tile laid out as in the GEMM (rows of 128 bytes at a stride of N
// outputs) or as one contiguous block per CTA: if the time per CTA grows with the grid, the
// chip's write path is the bound, if not, each SM's.
//   build/bench/mxlinear_store_rate (the CMake target mxlinear_store_rate)
// Prints, per case, the median and maximum microseconds from a CTA's start to its last store
// issued, and the GB/s of the whole grid (bytes over the span from the first start to the last
// store).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cta_span.cuh"

namespace {

using mxlinear::micro::check;
using mxlinear::micro::global_ns;
using mxlinear::micro::record_cta_span;

constexpr int kThreads = 128;
// Enough dynamic shared memory that two CTAs never share an SM; and the most, as the GEMM
// takes (what is left of the SM's 256 KB is its L1).
constexpr int kSmemBytes = 120 * 1024, kMaxSmemBytes = 227 * 1024;

// CTA c writes `steps` x 128 threads x 16 bytes. Strided: token rows of 128 bytes (8 threads a
// row) at a stride of `row_stride` bytes, the CTA's column block at 128 * c; contiguous: the
// CTA's bytes in one block.
__global__ void __launch_bounds__(kThreads)
    store_tile(std::uint8_t* out, int steps, long long row_stride, bool contiguous,
               unsigned long long* times) {
  extern __shared__ std::uint8_t smem[];
  const int tid = static_cast<int>(threadIdx.x);
  const int cta = static_cast<int>(blockIdx.x);
  // Values the compiler cannot see through, from shared memory as in the GEMM's epilogue.
  reinterpret_cast<float*>(smem)[tid] = static_cast<float>(tid);
  __syncthreads();
  const std::uint64_t start = global_ns();
  for (int s = 0; s < steps; ++s) {
    const int e = tid + s * kThreads;
    const int row = e / 8, col = 16 * (e % 8);
    std::uint8_t* dst = contiguous ? out + (static_cast<long long>(cta) * steps * kThreads + e) * 16
                                   : out + row * row_stride + 128LL * cta + col;
    const float v = reinterpret_cast<const float*>(smem)[(tid + s) % kThreads];
    const unsigned bits = __float_as_uint(v);
    *reinterpret_cast<uint4*>(dst) = make_uint4(bits, bits + 1, bits + 2, bits + 3);
  }
  record_cta_span(times, cta, start);
}

}  // namespace

int main() {
  int sms = 0;
  if (check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count")) return 1;
  if (check(
          cudaFuncSetAttribute(store_tile, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
          "smem attribute")) {
    return 1;
  }
  const long long row_stride = 6144 * 2;  // shared down's output rows (N = 6144, bf16)
  const std::size_t out_bytes = 256ull * row_stride + (64ull << 20);
  std::uint8_t* out = nullptr;
  unsigned long long* times = nullptr;
  if (check(cudaMalloc(&out, out_bytes), "cudaMalloc") ||
      check(cudaMalloc(&times, 2 * sizeof(unsigned long long) * sms), "cudaMalloc")) {
    return 1;
  }
  std::printf("%-10s %5s %6s %6s %10s %10s %10s\n", "layout", "smem KB", "CTAs", "KB/CTA",
              "median us", "max us", "grid GB/s");
  // Cold: 512 MiB of other memory written before each launch, as the bench's rotating weights
  // stream between two calls (L2 and address translations no longer hold the output's).
  std::uint8_t* other = nullptr;
  const std::size_t other_bytes = 512ull << 20;
  if (check(cudaMalloc(&other, other_bytes), "cudaMalloc")) return 1;
  for (const bool cold : {false, true})
    for (const int smem : {kSmemBytes, kMaxSmemBytes}) {
      for (const bool contiguous : {false, true}) {
        for (const int steps : {2, 4, 8}) {
          for (const int ctas : {1, 8, 32, 64, 96, sms}) {
            if (!contiguous && 128LL * ctas > row_stride) continue;
            std::vector<double> per_cta;
            double grid_gbs = 0;
            // The last of several launches (the first pays for cold TLBs and instruction fetch).
            for (int rep = 0; rep < 5; ++rep) {
              if (cold && check(cudaMemset(other, rep, other_bytes), "cudaMemset")) return 1;
              store_tile<<<ctas, kThreads, smem>>>(out, steps, row_stride, contiguous, times);
              if (check(cudaDeviceSynchronize(), "store_tile")) return 1;
              std::vector<unsigned long long> t(2 * static_cast<std::size_t>(ctas));
              if (check(
                      cudaMemcpy(t.data(), times, t.size() * sizeof(t[0]), cudaMemcpyDeviceToHost),
                      "download")) {
                return 1;
              }
              per_cta.clear();
              unsigned long long first = ~0ull, last = 0;
              for (int c = 0; c < ctas; ++c) {
                per_cta.push_back(static_cast<double>(t[2 * c + 1] - t[2 * c]) * 1e-3);
                first = std::min(first, t[2 * c]);
                last = std::max(last, t[2 * c + 1]);
              }
              const double bytes = static_cast<double>(ctas) * steps * kThreads * 16;
              grid_gbs = last > first ? bytes / static_cast<double>(last - first) : 0.0;
            }
            std::sort(per_cta.begin(), per_cta.end());
            std::printf("%-10s %5d %6d %6d %10.2f %10.2f %10.0f\n",
                        contiguous ? (cold ? "contig-cold" : "contiguous")
                                   : (cold ? "strid-cold" : "strided"),
                        smem / 1024, ctas, steps * kThreads * 16 / 1024,
                        per_cta[per_cta.size() / 2], per_cta.back(), grid_gbs);
          }
        }
      }
    }
  cudaFree(other);
  cudaFree(times);
  cudaFree(out);
  return 0;
}
