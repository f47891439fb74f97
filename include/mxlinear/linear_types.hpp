// The operands of an MXFP8 linear layer, as views over the caller's memory.
#pragma once

#include <cstddef>
#include <optional>

#include "mxlinear/tensor.hpp"

namespace mxlinear {

// Checkpoint layout: data [N, K] e4m3 and scales [N, K/32] e8m0, both row-major.
struct MxWeight {
  TensorView data;
  TensorView scales;
};

// An activation a producer already quantized (a fused norm or activation kernel):
// data [..., K] e4m3 (its shape is the activation's original shape), scales [rows, K/32] e8m0
// row-major, and the dtype the unquantized activation had, which the output takes by default.
struct QuantizedActivation {
  TensorView data;
  TensorView scales;
  DType original_dtype = DType::kBF16;
};

// Device scratch memory for one linear() call (the quantized activation, a kernel's scratch). An
// empty workspace (null, 0 bytes) makes the call allocate and free one with
// cudaMallocAsync/cudaFreeAsync on the stream.
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

// The shape of one linear call after validation: x [M, K] times W[N, K]^T.
struct LinearShape {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
};

}  // namespace mxlinear
