// E4M3 encode/decode (mxlinear/format.hpp) against the contract (docs/MXFP8.md): the decoder is
// checked against the field formula, the encoder against exact rounding boundaries and a
// brute-force nearest-even search (support/mx_oracle), never against the library itself.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "mxlinear/format.hpp"
#include "support/mx_oracle.hpp"
#include "support/random.hpp"

namespace mxlinear {
namespace {

using test::bits_float;
using test::e4m3_nearest;
using test::e4m3_value;

constexpr float kInf = std::numeric_limits<float>::infinity();

std::uint8_t Negate(std::uint8_t code) { return static_cast<std::uint8_t>(code | 0x80); }

// The oracle itself, pinned to values read off the format definition by hand: 1 sign, 4 exponent
// bits (bias 7), 3 mantissa bits, subnormals m * 2^-9, largest finite S.1111.110 = 1.75 * 2^8.
TEST(E4M3Oracle, MatchesHandDerivedValuesOfTheFormatTable) {
  EXPECT_EQ(e4m3_value(0x00), 0.0);
  EXPECT_FALSE(std::signbit(e4m3_value(0x00)));
  EXPECT_EQ(e4m3_value(0x80), 0.0);
  EXPECT_TRUE(std::signbit(e4m3_value(0x80)));
  EXPECT_EQ(e4m3_value(0x01), 0x1p-9);      // smallest subnormal: 1 * 2^-9
  EXPECT_EQ(e4m3_value(0x07), 7 * 0x1p-9);  // largest subnormal
  EXPECT_EQ(e4m3_value(0x08), 0x1p-6);      // smallest normal: 1.000 * 2^(1-7)
  EXPECT_EQ(e4m3_value(0x38), 1.0);         // 0.0111.000: 2^(7-7)
  EXPECT_EQ(e4m3_value(0x3C), 1.5);         // 0.0111.100
  EXPECT_EQ(e4m3_value(0x7E), 448.0);       // 0.1111.110: 1.75 * 2^8
  EXPECT_EQ(e4m3_value(0x78), 256.0);       // 0.1111.000
  EXPECT_EQ(e4m3_value(0xFE), -448.0);
  EXPECT_TRUE(std::isnan(e4m3_value(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_value(0xFF)));
  // The brute-force encoder: ties go to the even code.
  EXPECT_EQ(e4m3_nearest(1.0625), 0x38);  // halfway 1.0 (0x38) / 1.125 (0x39)
  EXPECT_EQ(e4m3_nearest(1.1875), 0x3A);  // halfway 1.125 (0x39) / 1.25 (0x3A)
  EXPECT_EQ(e4m3_nearest(464.0), 0x7E);   // saturates
  EXPECT_EQ(e4m3_nearest(-0.0), 0x80);
}

TEST(E4M3Decode, MatchesFieldFormulaForAll256Codes) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    const float decoded = e4m3_to_float(code);
    const double expected = e4m3_value(code);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(decoded)) << "code 0x" << std::hex << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(decoded), expected) << "code 0x" << std::hex << c;
    EXPECT_EQ(std::signbit(decoded), std::signbit(expected)) << "code 0x" << std::hex << c;
  }
}

TEST(E4M3Decode, OnlyCodes0x7FAnd0xFFAreNaN) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    const bool nan_code = c == 0x7F || c == 0xFF;
    EXPECT_EQ(std::isnan(e4m3_to_float(code)), nan_code) << "code 0x" << std::hex << c;
    EXPECT_EQ(e4m3_is_nan(code), nan_code) << "code 0x" << std::hex << c;
    EXPECT_FALSE(std::isinf(e4m3_to_float(code))) << "E4M3 fn has no infinities; code " << c;
  }
}

TEST(E4M3RoundTrip, EncodeOfDecodeReturnsEveryNonNaNCode) {
  for (int c = 0; c < 256; ++c) {
    if (c == 0x7F || c == 0xFF) continue;
    const auto code = static_cast<std::uint8_t>(c);
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(code)), code) << "code 0x" << std::hex << c;
  }
}

TEST(E4M3RoundTrip, NaNCodesDecodeToNaNAndEncodeBackToNaNCodes) {
  for (std::uint8_t code : {std::uint8_t{0x7F}, std::uint8_t{0xFF}}) {
    const float decoded = e4m3_to_float(code);
    ASSERT_TRUE(std::isnan(decoded));
    EXPECT_EQ(float_to_e4m3(decoded) & 0x7F, 0x7F);
  }
}

TEST(E4M3Encode, NaNInputOfAnyPayloadGivesANaNCode) {
  for (std::uint32_t bits : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu,
                             0xFFFFFFFFu, 0x7FA00000u}) {
    const std::uint8_t code = float_to_e4m3(bits_float(bits));
    EXPECT_EQ(code & 0x7F, 0x7F) << "fp32 bits 0x" << std::hex << bits;
    EXPECT_TRUE(std::isnan(e4m3_to_float(code)));
  }
}

// For every pair of adjacent non-negative E4M3 values lo < hi (0 and the smallest subnormal
// included), the midpoint is exact in fp32 (5 significant bits, >= 2^-10). The midpoint must go
// to the code with the even mantissa, the float just below it to lo, the float just above to hi.
TEST(E4M3Encode, RoundsHalfToEvenAtEveryBoundary) {
  for (int c = 0; c < 0x7E; ++c) {
    const auto lo = static_cast<std::uint8_t>(c);
    const auto hi = static_cast<std::uint8_t>(c + 1);
    const double mid_exact = (e4m3_value(lo) + e4m3_value(hi)) / 2;
    const auto mid = static_cast<float>(mid_exact);
    ASSERT_EQ(static_cast<double>(mid), mid_exact) << "midpoint not exact in fp32";
    const std::uint8_t even = (c % 2 == 0) ? lo : hi;
    const float below = std::nextafter(mid, 0.0f);
    const float above = std::nextafter(mid, kInf);
    SCOPED_TRACE(testing::Message() << "between codes 0x" << std::hex << c << " and 0x" << c + 1
                                    << ", midpoint " << std::hexfloat << mid);
    EXPECT_EQ(float_to_e4m3(mid), even);
    EXPECT_EQ(float_to_e4m3(below), lo);
    EXPECT_EQ(float_to_e4m3(above), hi);
    EXPECT_EQ(float_to_e4m3(-mid), Negate(even));
    EXPECT_EQ(float_to_e4m3(-below), Negate(lo));
    EXPECT_EQ(float_to_e4m3(-above), Negate(hi));
    // The representable values themselves, and the floats right next to them.
    const auto lo_value = static_cast<float>(e4m3_value(lo));
    EXPECT_EQ(float_to_e4m3(lo_value), lo);
    EXPECT_EQ(float_to_e4m3(std::nextafter(lo_value, kInf)), lo);
    EXPECT_EQ(float_to_e4m3(-lo_value), Negate(lo));
  }
}

TEST(E4M3Encode, SaturatesEverythingFrom448UpToInfinityTo0x7E) {
  // 448 is the largest finite value; the next E4M3 step would be 480, so (448, 464] rounds to 448
  // even without saturation and everything above saturates.
  const float cases[] = {448.0f,
                         std::nextafter(448.0f, kInf),
                         450.0f,
                         463.99997f,
                         std::nextafter(464.0f, 0.0f),
                         464.0f,
                         std::nextafter(464.0f, kInf),
                         480.0f,
                         512.0f,
                         1e6f,
                         1e30f,
                         FLT_MAX,
                         kInf};
  for (float x : cases) {
    EXPECT_EQ(float_to_e4m3(x), 0x7E) << std::hexfloat << x;
    EXPECT_EQ(float_to_e4m3(-x), 0xFE) << std::hexfloat << -x;
  }
  // Just below 448 still rounds up to 448 (the value below, 416, is 32 away).
  EXPECT_EQ(float_to_e4m3(std::nextafter(448.0f, 0.0f)), 0x7E);
  EXPECT_EQ(float_to_e4m3(432.0f), 0x7E);  // halfway 416 (0x7D, odd) / 448 (0x7E, even)
}

TEST(E4M3Encode, SignedZeroAndTinyNegativesGive0x80) {
  EXPECT_EQ(float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3(-0x1p-11f), 0x80);  // below half the smallest subnormal
  EXPECT_EQ(float_to_e4m3(-0x1p-10f), 0x80);  // exactly half: ties to even, 0
  EXPECT_EQ(float_to_e4m3(0x1p-10f), 0x00);
  EXPECT_EQ(float_to_e4m3(-1e-30f), 0x80);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::denorm_min()), 0x80);
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));
}

TEST(E4M3Encode, Fp32SubnormalInputsGiveZero) {
  for (std::uint32_t bits = 1; bits < 0x00800000u; bits += 4093) {
    EXPECT_EQ(float_to_e4m3(bits_float(bits)), 0x00) << "fp32 bits 0x" << std::hex << bits;
    EXPECT_EQ(float_to_e4m3(bits_float(bits | 0x80000000u)), 0x80)
        << "fp32 bits 0x" << std::hex << (bits | 0x80000000u);
  }
  EXPECT_EQ(float_to_e4m3(bits_float(0x007FFFFFu)), 0x00);  // largest subnormal
  EXPECT_EQ(float_to_e4m3(FLT_MIN), 0x00);                  // smallest normal: still far below
}

void ExpectEncodeMatchesBruteForce(float x) {
  const std::uint8_t got = float_to_e4m3(x);
  const std::uint8_t want = e4m3_nearest(static_cast<double>(x));
  if (std::isnan(x)) {
    EXPECT_EQ(got & 0x7F, 0x7F) << "fp32 bits 0x" << std::hex << test::float_bits(x);
  } else {
    EXPECT_EQ(got, want) << std::hexfloat << x << " (fp32 bits 0x" << std::hex
                         << test::float_bits(x) << ")";
  }
}

TEST(E4M3Encode, MatchesBruteForceNearestEvenOnAStridedSweepOfAllFloatBitPatterns) {
  // 1021 is prime, so the sweep visits every residue of mantissa and exponent bits.
  int failures = 0;
  for (std::uint64_t bits = 0; bits <= 0xFFFFFFFFull && failures < 20; bits += 1021) {
    const float x = bits_float(static_cast<std::uint32_t>(bits));
    const std::uint8_t got = float_to_e4m3(x);
    const bool ok = std::isnan(x) ? (got & 0x7F) == 0x7F : got == e4m3_nearest(x);
    if (!ok) {
      ++failures;
      ExpectEncodeMatchesBruteForce(x);
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(E4M3Encode, MatchesBruteForceNearestEvenOnRandomFloatsInRange) {
  std::mt19937_64 rng = test::make_rng();
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-14, 9);
  int failures = 0;
  for (int i = 0; i < 200000 && failures < 20; ++i) {
    float x = std::ldexp(mantissa(rng), exponent(rng));
    if (rng() & 1) x = -x;
    if (float_to_e4m3(x) != e4m3_nearest(x)) {
      ++failures;
      ExpectEncodeMatchesBruteForce(x);
    }
  }
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace mxlinear
