// An independent model of docs/MXFP8.md for tests: every function here is written from the
// contract's formulas (bit fields, ldexp, frexp, brute-force nearest-even search) and calls
// nothing from the library, so a test that compares the library against it checks the library
// against the contract rather than against itself. Only the ScaleRule enum is shared.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "mxlinear/format.hpp"

namespace mxlinear::test {

// --- E4M3 / E8M0 ---------------------------------------------------------------------------------

// The value of an E4M3 code from its fields: sign, 4-bit exponent (bias 7), 3-bit mantissa;
// subnormals m * 2^-9; S.1111.111 is NaN. Signed zero keeps its sign.
double e4m3_value(std::uint8_t code);

// The E4M3 code nearest to x by a linear search over the 127 non-negative finite codes, ties to
// the even code (even mantissa), saturating to +-448 (Inf too); the sign bit is x's sign bit
// (so -0.0 and tiny negatives give 0x80). NaN gives 0x7F with x's sign bit.
std::uint8_t e4m3_nearest(double x);

// 2^(b-127) for b in 0..254; NaN for 255.
double e8m0_value(std::uint8_t b);

// The scale byte of a block with the given (finite) amax, from frexp: clamp amax below to
// FLT_MIN, then RCEIL: ceil(log2(fl32(amax / 448))) + 127, FLOOR: floor(log2(amax)) - 8 + 127,
// clamped to 0..254.
std::uint8_t scale_for_amax(float amax, ScaleRule rule);

struct QuantizedBlock {
  std::uint8_t scale = 0;
  std::array<std::uint8_t, 32> q{};
};

// One block of 32 values quantized step by step as the contract says.
QuantizedBlock quantize_block(const float* values, ScaleRule rule);

// --- IEEE binary formats (bf16, fp16, fp32) ------------------------------------------------------

struct BinaryFormat {
  int exponent_bits;
  int mantissa_bits;
};
inline constexpr BinaryFormat kBF16Format{8, 7};
inline constexpr BinaryFormat kF16Format{5, 10};
inline constexpr BinaryFormat kF32Format{8, 23};

// The value of a code (sign bit included) from its fields. Inf and NaN decode to Inf and NaN.
long double format_value(BinaryFormat format, std::uint32_t code);

// x rounded to nearest, ties to even code, to the format, found by binary search over the
// monotone non-negative codes (the Inf code standing for 2^(emax+1), so overflow follows IEEE).
// NaN gives the canonical quiet NaN. Returns the code with its sign bit.
std::uint32_t round_to_format(long double x, BinaryFormat format);

// fp32 <-> bits.
std::uint32_t float_bits(float x);
float bits_float(std::uint32_t bits);

// bf16 / fp16 bits of a float, rounded to nearest even by the CUDA host conversions
// (__float2bfloat16_rn / __float2half_rn), and the exact widening back.
std::uint16_t to_bf16_bits(float x);
std::uint16_t to_f16_bits(float x);
float bf16_bits_to_float(std::uint16_t bits);
float f16_bits_to_float(std::uint16_t bits);

// --- W8A16: 16-bit activation as it is, MX weights -----------------------------------------------

// One W8A16 product (GemmParams::x_as_is): x [m, k] as 16-bit codes of x_format (bf16 or fp16)
// with row stride ld_x; w [n, k] as e4m3 codes and e8m0 scales [n, k/32], dense rows.
struct W8A16Operands {
  std::int64_t m = 0, n = 0, k = 0;
  const std::uint16_t* x = nullptr;
  std::int64_t ld_x = 0;
  BinaryFormat x_format = kBF16Format;
  const std::uint8_t* w = nullptr;
  const std::uint8_t* w_scales = nullptr;
};

// out[m, n] = sum_k x[m, k] * deq(w)[n, k] (+ bias[n]) in fp64, row-major [m, n]: x widened from
// its fields, deq(w) = e4m3_value * e8m0_value, both exact; each product is exact in fp64 (at
// most 11 + 4 significant bits), summed in k order. bias is empty or holds n values.
std::vector<double> w8a16_reference(const W8A16Operands& op, const std::vector<double>& bias);

// sum_k |x[m, k] * deq(w)[n, k]| in fp64, the scale of the fp32 accumulation bound.
std::vector<double> w8a16_abs_product_sums(const W8A16Operands& op);

}  // namespace mxlinear::test
