// Host-side launch helpers shared by the kernels' launchers.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <utility>

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

// CTAs of kKernel that one SM holds at `threads` threads and no dynamic shared memory, asked of
// the runtime once per kernel instance (grid-stride kernels size their grid by it: a grid
// larger than what is resident runs in waves). The answer depends on the architecture only; a
// process mixing GPU architectures would get the first one's.
template <auto kKernel>
cudaError_t resident_ctas_per_sm(int threads, int& count) {
  static std::atomic<int> cached{0};
  if ((count = cached.load(std::memory_order_relaxed)) > 0) return cudaSuccess;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, kKernel, threads, 0);
      e != cudaSuccess) {
    return e;
  }
  count = count > 0 ? count : 1;
  cached.store(count, std::memory_order_relaxed);
  return cudaSuccess;
}

// The grid of a grid-stride kernel: enough CTAs of `block_threads` for `work_threads` threads of
// work, at most one resident wave on every SM (a larger grid would run its walk in waves).
template <auto kKernel>
cudaError_t one_wave_grid(std::int64_t work_threads, int block_threads, dim3& grid) {
  int sms = 0, per_sm = 0;
  if (cudaError_t e = current_sm_count(sms); e != cudaSuccess) return e;
  if (cudaError_t e = resident_ctas_per_sm<kKernel>(block_threads, per_sm); e != cudaSuccess) {
    return e;
  }
  const std::int64_t needed = (work_threads + block_threads - 1) / block_threads;
  const std::int64_t wave = std::int64_t{sms} * per_sm;
  grid = dim3(static_cast<unsigned>(needed < wave ? needed : wave));
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

// Launches `kernel` as a programmatic dependent of the work before it on `stream` (the kernel
// must execute griddepcontrol.wait before it reads or writes anything earlier kernels touch),
// as clusters of (1, cluster_y, 1) CTAs when cluster_y > 0.
template <class... Params, class... Args>
cudaError_t launch_programmatic(void (*kernel)(Params...), dim3 grid, dim3 block,
                                std::size_t smem_bytes, cudaStream_t stream, unsigned cluster_y,
                                Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = 1;
  attributes[1].val.clusterDim.y = cluster_y;
  attributes[1].val.clusterDim.z = 1;
  config.attrs = attributes;
  config.numAttrs = cluster_y > 0 ? 2 : 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace mxlinear::device
