// The MX element and scale formats (docs/MXFP8.md is the contract these functions implement):
// exact integer/bit arithmetic, the same definition the GPU kernels use, so host and device agree
// byte for byte.
#pragma once

#include <cstdint>

namespace mxlinear {

inline constexpr int kBlockSize = 32;  // elements along K that share one E8M0 scale
inline constexpr float kE4M3Max = 448.0f;
inline constexpr std::uint8_t kE4M3NaN = 0x7F;
inline constexpr std::uint8_t kE8M0NaN = 0xFF;

// How a block's shared exponent is chosen from its amax.
enum class ScaleRule : std::uint8_t {
  kRceil,  // b = ceil(log2(amax / 448)) + 127: never saturates (NVIDIA, FlashInfer, vLLM)
  kFloor,  // b = floor(log2(amax)) - 8 + 127: the OCP MX v1.0 text; may saturate to +-448
};

// Decodes one E4M3 byte (OCP "fn": no infinities, NaN = S.1111.111, max 448) to fp32, exactly.
float e4m3_to_float(std::uint8_t q);

// Encodes fp32 to E4M3: round to nearest even, saturating to +-448; NaN -> 0x7F (sign kept).
std::uint8_t float_to_e4m3(float x);

bool e4m3_is_nan(std::uint8_t q);

// Decodes an E8M0 scale byte (2^(b-127), b = 0xFF is NaN) to fp32 exactly; b = 0 is the fp32
// subnormal 2^-127.
float e8m0_to_float(std::uint8_t b);

// 2^(127-b), the factor that brings a block into E4M3 range, for b in 0..254, exact down to the
// subnormal 2^-127 (b = 254).
float e8m0_inverse_to_float(std::uint8_t b);

// The scale byte a block with the given amax gets. amax must be finite; it is clamped below to
// FLT_MIN first, so an all-zero block is well defined.
std::uint8_t e8m0_scale_for_amax(float amax, ScaleRule rule);

}  // namespace mxlinear
