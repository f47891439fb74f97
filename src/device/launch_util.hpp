// Host-side launch helpers shared by the kernels' launchers.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

namespace mxlinear::device {

// The current device's SM count, asked of the runtime once per device (grids sized per SM).
inline cudaError_t current_sm_count(int& count) {
  static std::atomic<int> cached[64] = {};
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (device < 64 && (count = cached[device].load(std::memory_order_relaxed)) > 0) {
    return cudaSuccess;
  }
  if (cudaError_t e = cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
      e != cudaSuccess) {
    return e;
  }
  if (device < 64) cached[device].store(count, std::memory_order_relaxed);
  return cudaSuccess;
}

// Opts kKernel into `bytes` of dynamic shared memory on the current device, once per device
// (the opt-in above 48 KiB is per device and per function: the template argument is the
// function itself, so every kernel instance keeps its own record).
template <auto kKernel>
cudaError_t ensure_max_dynamic_smem(int bytes) {
  static std::atomic<std::uint64_t> configured{0};
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  const std::uint64_t bit = device < 64 ? (std::uint64_t{1} << device) : 0;
  if ((configured.load(std::memory_order_acquire) & bit) != 0 && bit != 0) return cudaSuccess;
  if (cudaError_t e =
          cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      e != cudaSuccess) {
    return e;
  }
  configured.fetch_or(bit, std::memory_order_acq_rel);
  return cudaSuccess;
}

}  // namespace mxlinear::device
