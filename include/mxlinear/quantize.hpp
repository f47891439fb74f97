// Host-side MX quantization of whole tensors (the CPU reference; GPU kernels must match it byte
// for byte).
#pragma once

#include <cstdint>

#include "mxlinear/format.hpp"
#include "mxlinear/tensor.hpp"

namespace mxlinear {

// Quantizes one block of 32 values (already widened to fp32; bf16 and fp16 widen exactly) into
// q[0..31] and returns its scale byte, following docs/MXFP8.md step by step.
std::uint8_t quantize_block(const float* values, std::uint8_t* q, ScaleRule rule);

// x: [..., K] fp32, bf16 or fp16 on the host. data: [..., K] e4m3. scales: [..., K/32] e8m0.
// Leading dimensions are flattened into rows; each may have its own row stride.
void quantize_rows(const TensorView& x, const TensorView& data, const TensorView& scales,
                   ScaleRule rule = ScaleRule::kRceil);

// The inverse: out = value(q) * 2^(b-127), rounded to out's dtype (exact for fp32).
void dequantize_rows(const TensorView& data, const TensorView& scales, const TensorView& out);

}  // namespace mxlinear
