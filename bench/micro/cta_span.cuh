// What the micro-benchmarks share: a CTA's span in global-timer nanoseconds (start, end), and a
// CUDA error check that says what failed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace mxlinear::micro {

__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Thread 0 of CTA `cta` records [start, now) at times[2 cta], times[2 cta + 1], after every
// thread of the CTA got here.
__device__ __forceinline__ void record_cta_span(unsigned long long* times, int cta,
                                                std::uint64_t start) {
  __syncthreads();
  const std::uint64_t end = global_ns();
  if (threadIdx.x == 0) {
    times[2 * cta] = start;
    times[2 * cta + 1] = end;
  }
}

// The same with the SM's cycles over the span (clock64), so that the host can tell the clock
// the span ran at: times[3 cta .. 3 cta + 2] = start, end (ns), cycles.
__device__ __forceinline__ void record_cta_span_and_cycles(unsigned long long* times, int cta,
                                                           std::uint64_t start,
                                                           long long start_cycles) {
  __syncthreads();
  const std::uint64_t end = global_ns();
  const long long cycles = clock64() - start_cycles;
  if (threadIdx.x == 0) {
    times[3 * cta] = start;
    times[3 * cta + 1] = end;
    times[3 * cta + 2] = static_cast<unsigned long long>(cycles);
  }
}

// Keeps every SM busy for about `cycles` clocks: launched before a measurement, it lifts the
// clocks from idle, as a kernel in a model's stream finds them.
static __global__ void keep_busy(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// 0 on success; else prints what failed and returns 1.
inline int check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}

}  // namespace mxlinear::micro
