// The GPU quantization pass that quantize() and the linear's 16-bit entry point share.
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

#include "host/registry/kernel.hpp"
#include "mxlinear/format.hpp"
#include "mxlinear/tensor.hpp"

namespace mxlinear::detail {

// What the pass writes besides (or instead of) the e4m3 data and scales: x dequantized to bf16
// in the prefill GEMM's layout into `scratch` (ActivationForm::kDequantized), and zeroes for the
// kernel after it.
struct DequantizedOutput {
  void* scratch = nullptr;  // null: none
  bool only = false;        // write the bf16 values and nothing else
  ScratchWords zero;        // words of `scratch` to zero
  // W8A16: a bf16 x copied into that layout as it is, not quantized (`only` must be set).
  bool as_is = false;
};

// Quantizes x ([M, K] bf16, fp16 or fp32) into data and scales on `stream` (checked views).
// Throws Error(kCudaError) naming `op` if the launch fails.
void launch_quantize_pass(std::string_view op, const TensorView& x, const TensorView& data,
                          const TensorView& scales, ScaleRule rule, cudaStream_t stream,
                          const DequantizedOutput& dequantized = {});

}  // namespace mxlinear::detail
