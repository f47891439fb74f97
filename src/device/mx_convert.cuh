// Exact conversions of MX data on the device. Device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "device/ptx.cuh"

namespace mxlinear::device::mx {

// 2^(b - 127) exactly for a scale byte b; b = 0 is the subnormal 2^-127, b = 255 NaN. Without
// branches: for b = 0 and 255 the bit below the exponent makes 2^-127 and the quiet NaN.
__device__ __forceinline__ float scale_from_byte(std::uint32_t b) {
  const std::uint32_t special = ((b - 1u) & 0xFFu) >= 254u ? 1u : 0u;
  return __uint_as_float((b << 23) | (special << 22));
}

// The 4 scale bytes of one 128-K chunk (blocks 4 * chunk .. 4 * chunk + 3) of `row` of a
// [rows, K/32] scale matrix with 4-byte aligned rows; 0 (four bytes 0: finite 2^-127) for rows
// at or past `rows`, which the kernels' zero-filled tile rows pair with.
__device__ __forceinline__ std::uint32_t scale_word(const std::uint8_t* scales, std::int64_t ld,
                                                    int row, int rows, int chunk) {
  return row < rows ? *reinterpret_cast<const std::uint32_t*>(scales + row * ld + 4 * chunk) : 0u;
}

// Four e4m3 bytes times a power-of-two scale as two bf16x2 (bytes 0,1 -> lo; 2,3 -> hi; the
// lower byte in the lower half). Exact while the scaled value stays in bf16's normal range;
// below 2^-126 it rounds to bf16's subnormal grid (steps of 2^-133), above ~2^128 it is Inf.
__device__ __forceinline__ void e4m3x4_scaled_to_bf16x2x2(std::uint32_t x, float scale,
                                                          std::uint32_t& lo, std::uint32_t& hi) {
  std::uint32_t h0, h1;
  ptx::e4m3x4_to_f16x2x2(x, h0, h1);
  const float2 f0 = __half22float2(*reinterpret_cast<const __half2*>(&h0));
  const float2 f1 = __half22float2(*reinterpret_cast<const __half2*>(&h1));
  const __nv_bfloat162 b0 = __floats2bfloat162_rn(f0.x * scale, f0.y * scale);
  const __nv_bfloat162 b1 = __floats2bfloat162_rn(f1.x * scale, f1.y * scale);
  lo = *reinterpret_cast<const std::uint32_t*>(&b0);
  hi = *reinterpret_cast<const std::uint32_t*>(&b1);
}

}  // namespace mxlinear::device::mx
