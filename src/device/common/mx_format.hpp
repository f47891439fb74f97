// The MX element and scale formats as exact integer/bit arithmetic, callable from host and
// device code: the one definition that the GPU kernels, the CPU quantizer and the public
// functions of mxlinear/format.hpp share, so host and device agree byte for byte
// (docs/MXFP8.md is the contract these functions implement).
#pragma once

#include <cstdint>
#include <cstring>

#include "device/common/host_device.hpp"
#include "mxlinear/format.hpp"

namespace mxlinear::device {

namespace bits {

MXL_HOST_DEVICE inline std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

MXL_HOST_DEVICE inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// floor(log2(m)) for m > 0.
MXL_HOST_DEVICE inline int floor_log2_u32(std::uint32_t m) {
#if defined(__CUDA_ARCH__)
  return 31 - __clz(static_cast<int>(m));
#else
  return 31 - __builtin_clz(m);
#endif
}

// Exact floor(log2(x)) of a positive finite float, subnormals included.
MXL_HOST_DEVICE inline int floor_log2(float x) {
  const std::uint32_t u = float_bits(x);
  const int biased = static_cast<int>((u >> 23) & 0xFFu);
  const std::uint32_t mant = u & 0x7FFFFFu;
  if (biased == 0) return floor_log2_u32(mant) - 149;
  return biased - 127;
}

// Exact ceil(log2(x)) of a positive finite float: floor, plus one unless x is a power of two.
MXL_HOST_DEVICE inline int ceil_log2(float x) {
  const std::uint32_t u = float_bits(x);
  const int biased = static_cast<int>((u >> 23) & 0xFFu);
  const std::uint32_t mant = u & 0x7FFFFFu;
  if (biased == 0) {
    const bool pow2 = (mant & (mant - 1)) == 0;
    return floor_log2_u32(mant) - 149 + (pow2 ? 0 : 1);
  }
  return biased - 127 + (mant == 0 ? 0 : 1);
}

MXL_HOST_DEVICE inline int clamp_int(int v, int lo, int hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

}  // namespace bits

// --- E4M3 (OCP "fn": no infinities, NaN = S.1111.111, max 448) ---------------------------------

// Decodes one E4M3 byte to fp32, exactly.
MXL_HOST_DEVICE inline float e4m3_to_float(std::uint8_t q) {
  const std::uint32_t sign = static_cast<std::uint32_t>(q & 0x80u) << 24;
  const std::uint32_t mag = q & 0x7Fu;
  if (mag == 0x7Fu) return bits::bits_float(0x7FC00000u | sign);
  // Placing exponent and mantissa under the fp32 fields scales the value by 2^-120 exactly, for
  // subnormals too (fp32 2^-126 * m/8 vs e4m3 2^-6 * m/8); multiplying by 2^120 undoes it.
  const float scaled = bits::bits_float(mag << 20);
  return bits::bits_float(bits::float_bits(scaled * 0x1p120f) | sign);
}

// Encodes fp32 to E4M3: round to nearest even, saturating to +-448; NaN -> 0x7F (sign kept).
MXL_HOST_DEVICE inline std::uint8_t float_to_e4m3(float x) {
  const std::uint32_t u = bits::float_bits(x);
  const std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  const std::uint32_t abs_bits = u & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return static_cast<std::uint8_t>(sign | kE4M3NaN);
  if (abs_bits >= 0x43E00000u) return static_cast<std::uint8_t>(sign | 0x7Eu);  // >= 448 (Inf too)
  if (abs_bits < 0x3C800000u) {
    // Below 2^-6: the e4m3 subnormal grid m * 2^-9. Scaling by 2^9 is exact; the integer part
    // after round-half-even is the code (8 becomes the smallest normal, 0x08).
    const float scaled = bits::bits_float(abs_bits) * 512.0f;
    const std::uint32_t whole = static_cast<std::uint32_t>(scaled);
    const float frac = scaled - static_cast<float>(whole);
    const std::uint32_t up = (frac > 0.5f || (frac == 0.5f && (whole & 1u))) ? 1u : 0u;
    return static_cast<std::uint8_t>(sign | (whole + up));
  }
  // Normal range: keep 3 of 23 mantissa bits, rounding half to even; a carry bumps the exponent.
  const std::uint32_t lsb = (abs_bits >> 20) & 1u;
  const std::uint32_t rounded = abs_bits + 0x7FFFFu + lsb;
  const std::uint32_t code = (((rounded >> 23) - 120u) << 3) | ((rounded >> 20) & 7u);
  return static_cast<std::uint8_t>(sign | (code > 0x7Eu ? 0x7Eu : code));
}

MXL_HOST_DEVICE inline bool e4m3_is_nan(std::uint8_t q) { return (q & 0x7Fu) == 0x7Fu; }

// --- E8M0 (scale: 2^(b-127), b = 0xFF is NaN) ---------------------------------------------------

// Decodes a scale byte to fp32 exactly; b = 0 is the fp32 subnormal 2^-127.
MXL_HOST_DEVICE inline float e8m0_to_float(std::uint8_t b) {
  if (b == kE8M0NaN) return bits::bits_float(0x7FC00000u);
  if (b == 0) return bits::bits_float(0x00400000u);
  return bits::bits_float(static_cast<std::uint32_t>(b) << 23);
}

// 2^e for e in [-126, 127], a normal float.
MXL_HOST_DEVICE inline float pow2_normal(int e) {
  return bits::bits_float(static_cast<std::uint32_t>(e + 127) << 23);
}

// 2^(127-b), the factor that brings a block into E4M3 range, for b in 0..254. It is the product
// of two normal powers of two, exact down to the subnormal 2^-127 (b = 254), with no compare:
// nvcc 13.0 (ptxas, sm_90a) fused an earlier clamp-then-"b == 254" version into a wrong
// predicate (VIMNMX.RELU ... P0) and returned 2^-127 for every b.
MXL_HOST_DEVICE inline float e8m0_inverse_to_float(std::uint8_t b) {
  const int e = 127 - static_cast<int>(b);
  const int half = e / 2;
  return pow2_normal(half) * pow2_normal(e - half);
}

// The scale byte a block with the given amax gets. amax must be finite; it is clamped below to
// FLT_MIN first, so an all-zero block is well defined.
MXL_HOST_DEVICE inline std::uint8_t e8m0_scale_for_amax(float amax, ScaleRule rule) {
  constexpr float kFltMin = 0x1p-126f;
  if (!(amax >= kFltMin)) amax = kFltMin;
  int exponent;
  if (rule == ScaleRule::kRceil) {
    // ceil(log2(fl(amax / 448))), the contract's one IEEE division. While the quotient is normal
    // (amax >= 2^-117) fl() cannot round it across a power of two (the float nearest 448 * 2^e
    // differs by >= 2^-23.8 relative, more than half an ulp of 2^e), so the exponent follows
    // from amax's bits: 448 = 1.75 * 2^8, one more when the significand exceeds 1.75. The
    // quantizers do this per block: a division costs more than the rest of a block's scale.
    const std::uint32_t bits = bits::float_bits(amax);
    const int biased = static_cast<int>(bits >> 23);
    if (biased >= 127 - 117) {
      exponent = biased - 127 - 8 + ((bits & 0x7FFFFFu) > 0x600000u ? 1 : 0);
    } else {
      exponent = bits::ceil_log2(amax / kE4M3Max);
    }
  } else {
    exponent = bits::floor_log2(amax) - 8;
  }
  return static_cast<std::uint8_t>(bits::clamp_int(exponent + 127, 0, 254));
}

}  // namespace mxlinear::device
