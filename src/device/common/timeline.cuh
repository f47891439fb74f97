// Per-CTA phase timestamps, to see where a short kernel's microseconds go (launch, the wait on the
// previous kernel, the main loop, the reduction, the store). Compiled in only with
// -DMXLINEAR_TIMELINE=ON; otherwise a Stamps object holds nothing and every call is empty, so
// the kernels of a normal build are the same instructions. Device code, and the host setter of
// this translation unit's buffer pointer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "device/common/timeline.hpp"

namespace mxlinear::device::timeline {
namespace {

#if defined(MXLINEAR_TIMELINE)
// One buffer per translation unit (each kernel's .cu sets its own through set_buffer), with
// room for g_capacity CTAs: a CTA past it writes nothing.
__device__ std::uint32_t* g_buffer = nullptr;
__device__ std::uint64_t g_capacity = 0;

inline cudaError_t set_buffer(std::uint32_t* buffer, std::uint64_t capacity_ctas) {
  if (cudaError_t e = cudaMemcpyToSymbol(g_capacity, &capacity_ctas, sizeof capacity_ctas);
      e != cudaSuccess) {
    return e;
  }
  return cudaMemcpyToSymbol(g_buffer, &buffer, sizeof buffer);
}

// Thread 0 of each CTA keeps its stamps in registers (the low 32 bits of %globaltimer, ns: few
// registers, so the kernels keep their allocation) and writes them once, at the end, to
// g_buffer[cta * kStamps + i]; 0 where a phase was not reached.
struct Stamps {
  std::uint32_t at[kSmWord] = {};

  __device__ __forceinline__ void mark(int phase) {
    if (threadIdx.x != 0) return;
    std::uint32_t t;
    asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t));
    at[phase] = t;
  }
  __device__ __forceinline__ void flush() const {
    std::uint32_t* const buffer = g_buffer;
    if (threadIdx.x != 0 || buffer == nullptr) return;
    const std::uint64_t cta =
        blockIdx.x + static_cast<std::uint64_t>(gridDim.x) * (blockIdx.y + gridDim.y * blockIdx.z);
    if (cta >= g_capacity) return;
#pragma unroll
    for (int i = 0; i < kSmWord; ++i) buffer[cta * kStamps + i] = at[i];
    std::uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    buffer[cta * kStamps + kSmWord] = sm + 1;
  }
};
#else
inline cudaError_t set_buffer(std::uint32_t*, std::uint64_t) { return cudaErrorNotSupported; }

struct Stamps {
  __device__ __forceinline__ void mark(int) {}
  __device__ __forceinline__ void flush() const {}
};
#endif

}  // namespace
}  // namespace mxlinear::device::timeline
