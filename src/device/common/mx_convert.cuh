// Exact conversions of MX data on the device. Device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "device/common/mx_format.hpp"
#include "device/ptx/ptx.cuh"

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

// scale_word for rows of any alignment and a K that may end inside the chunk: the bytes one by
// one, 0 (finite 2^-127) for blocks at or past `blocks` = K / 32, whose data TMA zero-filled.
__device__ __forceinline__ std::uint32_t scale_word_bytewise(const std::uint8_t* scales,
                                                             std::int64_t ld, int row, int rows,
                                                             int chunk, int blocks) {
  std::uint32_t word = 0;
  if (row >= rows) return word;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int block = 4 * chunk + j;
    if (block < blocks) word |= std::uint32_t{scales[row * ld + block]} << (8 * j);
  }
  return word;
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

// Eight bf16 or fp16 values (16 bytes, the lowest k in the low half of raw.x) widened to fp32,
// exactly.
__device__ __forceinline__ void widen_eight(const uint4& raw, bool is_f16, float (&v)[8]) {
  const std::uint32_t pairs[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = is_f16
                         ? __half22float2(*reinterpret_cast<const __half2*>(&pairs[j]))
                         : __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pairs[j]));
    v[2 * j] = f.x;
    v[2 * j + 1] = f.y;
  }
}

// The amax of an MX block and whether any of its values is NaN or Inf, when 4 consecutive lanes
// (4i..4i+3) hold 8 of its values each. Every lane of the warp must call it (two shuffles).
struct BlockExtent {
  float amax;
  bool non_finite;
};
__device__ __forceinline__ BlockExtent block_extent_of_four_lanes(const float (&v)[8]) {
  float amax = 0.0f;
  bool non_finite = false;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    non_finite |= !isfinite(v[i]);
    amax = fmaxf(amax, fabsf(v[i]));
  }
#pragma unroll
  for (int offset = 1; offset < 4; offset <<= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
    non_finite |= __shfl_xor_sync(0xFFFFFFFFu, static_cast<int>(non_finite), offset) != 0;
  }
  return {amax, non_finite};
}

// The largest magnitude of a float format's values as its bit pattern with the sign cleared:
// for IEEE formats the order of those patterns is the order of the magnitudes, and Inf and NaN
// are the largest, so an integer max yields both a block's amax and whether it holds a
// non-finite value (a pattern at or above its Inf). Cheaper than comparing floats: the quantizers
// spend most of their instructions per element, not per byte moved.
template <int kWords>
__device__ __forceinline__ std::uint32_t max_magnitude_bits_16(const std::uint32_t* words) {
  std::uint32_t m = words[0] & 0x7FFF7FFFu;  // bf16 or fp16, two per word
#pragma unroll
  for (int i = 1; i < kWords; ++i) m = ptx::max_u16x2(m, words[i] & 0x7FFF7FFFu);
  return max(m >> 16, m & 0xFFFFu);
}
template <int kWords>
__device__ __forceinline__ std::uint32_t max_magnitude_bits_32(const std::uint32_t* words) {
  std::uint32_t m = words[0] & 0x7FFFFFFFu;
#pragma unroll
  for (int i = 1; i < kWords; ++i) m = max(m, words[i] & 0x7FFFFFFFu);
  return m;
}

// The larger of two neighbouring lanes' (2i, 2i+1) values. Every lane of the warp must call it.
__device__ __forceinline__ std::uint32_t max_of_lane_pair(std::uint32_t x) {
  return max(x, __shfl_xor_sync(0xFFFFFFFFu, x, 1));
}

// kCount consecutive values of one MX block (v[0] at the lowest k) to e4m3, given the whole
// block's amax and whether any of its values is NaN or Inf: words[w] holds v[4w..4w+3] (the
// lowest in the low byte). Returns the block's scale byte. A block with a non-finite value gets
// the NaN scale and NaN data (MXFP8.md). Every quantizing kernel goes through this, so they all
// write the CPU reference's bytes.
template <int kCount>
__device__ __forceinline__ std::uint8_t quantize_values(const float (&v)[kCount], float amax,
                                                        bool non_finite, ScaleRule rule,
                                                        std::uint32_t (&words)[kCount / 4]) {
  if (non_finite) {
#pragma unroll
    for (int w = 0; w < kCount / 4; ++w) words[w] = 0x7F7F7F7Fu;
    return kE8M0NaN;
  }
  // Qualified: lookup through `rule` would also find mxlinear's host-only declaration.
  const std::uint8_t scale = device::e8m0_scale_for_amax(amax, rule);
  // 2^(127 - scale) as a normal float: a finite amax gets scale <= 247 under either rule
  // (FLT_MAX gives 247 and 246), so the general e8m0_inverse_to_float, which also covers the
  // subnormal 2^-127 of scale 254, is not needed; this is two instructions instead of ~14.
  const float inverse = __uint_as_float((254u - scale) << 23);
#pragma unroll
  for (int w = 0; w < kCount / 4; ++w) {
    const std::uint32_t lo = ptx::f32x2_to_e4m3x2(v[4 * w + 1] * inverse, v[4 * w] * inverse);
    const std::uint32_t hi = ptx::f32x2_to_e4m3x2(v[4 * w + 3] * inverse, v[4 * w + 2] * inverse);
    words[w] = lo | (hi << 16);
  }
  return scale;
}

}  // namespace mxlinear::device::mx
