// Owned device memory for the CLI's jobs; allocation failures become mxlinear::Error.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "mxlinear/error.hpp"

namespace mxlinear::cli {

inline void cuda_or_throw(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw Error(ErrorCode::kCudaError, "", fmt::format("{}: {}", what, cudaGetErrorString(e)));
  }
}

struct DeviceMemory {
  void* ptr = nullptr;
  explicit DeviceMemory(std::size_t bytes) {
    cuda_or_throw(cudaMalloc(&ptr, std::max<std::size_t>(bytes, 16)), "cudaMalloc");
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { cudaFree(ptr); }
  std::uint8_t* bytes() const { return static_cast<std::uint8_t*>(ptr); }
};

}  // namespace mxlinear::cli
