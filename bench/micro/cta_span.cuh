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

// 0 on success; else prints what failed and returns 1.
inline int check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}

}  // namespace mxlinear::micro
