// The 16-bit MMA the kernels share (the GEMV and the generic kernel): e4m3 weights widened
// exactly to the 16-bit type of the activation operand, and m16n8k16 on that type with fp32
// accumulators. Device code only.
#pragma once

#include <cstdint>

#include "device/ptx/ptx.cuh"
#include "mxlinear/linear_types.hpp"

namespace mxlinear::device {

// Four e4m3 bytes -> two 16-bit pairs in e4m3x4_to_f16x2x2's layout (bytes 0,1 -> lo; 2,3 -> hi;
// the lower byte in the lower half), exactly: bf16 for a bf16 operand, f16 for the MX operand
// (its e4m3 codes widen to f16 too) and for fp16.
template <ActivationOperand kOperand>
__device__ __forceinline__ void widen_weights(std::uint32_t x, std::uint32_t& lo,
                                              std::uint32_t& hi) {
  if constexpr (kOperand == ActivationOperand::kBf16) {
    ptx::e4m3x4_to_bf16x2x2(x, lo, hi);
  } else {
    ptx::e4m3x4_to_f16x2x2(x, lo, hi);
  }
}

// D = A * B + C, m16n8k16 on the operand's 16-bit type, fp32 accumulators.
template <ActivationOperand kOperand>
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4],
                                          std::uint32_t b0, std::uint32_t b1, const float (&c)[4]) {
  if constexpr (kOperand == ActivationOperand::kBf16) {
    ptx::mma_bf16_16816(d, a, b0, b1, c);
  } else {
    ptx::mma_f16_16816(d, a, b0, b1, c);
  }
}

}  // namespace mxlinear::device
