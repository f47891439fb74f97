// One benchmarked layer: its weights in every form the kernels and anchors take, and the fp64
// reference rows every config of a figure is checked against.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device_memory.hpp"
#include "mxlinear/linear_types.hpp"

namespace mxlinear::cli {

// One layer shape's weights in every form the kernels and anchors take, rotated through enough
// copies to defeat L2.
struct LayerWeights {
  std::int64_t n, k;
  int copies;
  std::size_t data_bytes, scale_bytes;
  DeviceMemory data, scales, bf16;

  LayerWeights(std::int64_t n_, std::int64_t k_, std::size_t l2, std::uint64_t seed,
               cudaStream_t stream);
  MxWeight view(int copy) const;
  const void* bf16_copy(int copy) const;
};

// The fp64 reference of a few output rows (first, last and two between), computed once per
// figure on the CPU: every config of the sweep is checked against the same rows, which would
// otherwise cost a weight download and 4 N K fp64 products per config.
struct ReferenceRows {
  std::vector<std::int64_t> rows;
  std::vector<std::vector<double>> values;  // [row][n]
};

// The reference rows of activation (xq, xs) [m, k] times w.
ReferenceRows reference_rows(const LayerWeights& w, const DeviceMemory& xq, const DeviceMemory& xs,
                             std::int64_t m);

// Worst relative Frobenius error of the reference rows of a bf16 output [m, n].
double check_rows(const ReferenceRows& ref, const DeviceMemory& out, std::int64_t n);

}  // namespace mxlinear::cli
