// E8M0 scales and the two scale rules (RCEIL, FLOOR) of docs/MXFP8.md on crafted blocks. Every
// expected scale byte is derived by hand in a comment; element bytes are checked against the
// brute-force nearest-even oracle (support/mx_oracle) applied to v * 2^(127 - b).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mxlinear/format.hpp"
#include "mxlinear/quantize.hpp"
#include "mxlinear/tensor.hpp"
#include "support/mx_oracle.hpp"
#include "support/random.hpp"

namespace mxlinear {
namespace {

using Block = std::array<float, kBlockSize>;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Quantized {
  std::uint8_t scale = 0;
  std::array<std::uint8_t, kBlockSize> q{};
};

// One block through the public quantize_rows entry point, input of the given dtype.
Quantized QuantizeRaw(const void* values, DType dtype, ScaleRule rule) {
  Quantized out;
  out.scale = 0xAB;  // poison: neither a rule's answer in these tests nor the NaN scale
  out.q.fill(0xAB);
  const TensorView x =
      TensorView::contiguous(const_cast<void*>(values), {1, kBlockSize}, dtype, Location::kHost);
  const TensorView data =
      TensorView::contiguous(out.q.data(), {1, kBlockSize}, DType::kE4M3, Location::kHost);
  const TensorView scales =
      TensorView::contiguous(&out.scale, {1, 1}, DType::kE8M0, Location::kHost);
  quantize_rows(x, data, scales, rule);
  return out;
}

// The elements the contract gives for scale byte `scale`: E4M3(fl32(v * 2^(127 - scale))).
std::array<std::uint8_t, kBlockSize> ExpectedElements(const Block& v, std::uint8_t scale) {
  std::array<std::uint8_t, kBlockSize> q{};
  for (int i = 0; i < kBlockSize; ++i) {
    const auto idx = static_cast<std::size_t>(i);
    if (scale == 0xFF) {
      q[idx] = 0x7F;
      continue;
    }
    const double scaled = static_cast<double>(v[idx]) * std::ldexp(1.0, 127 - scale);
    q[idx] = test::e4m3_nearest(static_cast<float>(scaled));
  }
  return q;
}

void ExpectElements(const Quantized& got, const Block& v, std::uint8_t scale) {
  const auto want = ExpectedElements(v, scale);
  for (int i = 0; i < kBlockSize; ++i) {
    const auto idx = static_cast<std::size_t>(i);
    EXPECT_EQ(got.q[idx], want[idx]) << "element " << i << " = " << std::hexfloat << v[idx];
  }
}

// fp32 block: quantize_rows and quantize_block must both give `scale` (derived by hand) and the
// oracle's elements for it; the oracle's own scale must agree with the hand derivation too.
void ExpectFp32Block(const Block& v, ScaleRule rule, std::uint8_t scale) {
  const Quantized got = QuantizeRaw(v.data(), DType::kF32, rule);
  EXPECT_EQ(static_cast<int>(got.scale), static_cast<int>(scale));
  ExpectElements(got, v, scale);
  std::array<std::uint8_t, kBlockSize> q{};
  EXPECT_EQ(static_cast<int>(quantize_block(v.data(), q.data(), rule)), static_cast<int>(scale));
  EXPECT_EQ(q, got.q);
  EXPECT_EQ(static_cast<int>(test::quantize_block(v.data(), rule).scale), static_cast<int>(scale))
      << "oracle disagrees with the hand derivation";
}

// A block of modest values with `amax_value` at index 7 (and its sign flipped at index 20 when
// `both_signs`), so the element checks see small, mid and extreme values together.
Block BlockWithAmax(float amax_value, bool both_signs = false) {
  Block v{};
  for (int i = 0; i < kBlockSize; ++i) {
    // |v_i| <= amax / 3: a spread of values 2^-12 .. 1/3 of amax, both signs.
    const float fraction = std::ldexp(1.0f + static_cast<float>(i % 8) / 8.0f, -(i % 13) - 2);
    v[static_cast<std::size_t>(i)] = (i % 2 ? -1.0f : 1.0f) * amax_value * fraction;
  }
  v[7] = amax_value;
  if (both_signs) v[20] = -amax_value;
  return v;
}

// --- E8M0 --------------------------------------------------------------------------------------

TEST(E8M0Decode, BoundaryBytesDecodeTo2PowBMinus127) {
  EXPECT_EQ(e8m0_to_float(0), std::ldexp(1.0f, -127));  // the fp32 subnormal 2^-127
  EXPECT_EQ(e8m0_to_float(0), 0x1p-127f);
  EXPECT_EQ(e8m0_to_float(1), 0x1p-126f);
  EXPECT_EQ(e8m0_to_float(127), 1.0f);
  EXPECT_EQ(e8m0_to_float(128), 2.0f);
  EXPECT_EQ(e8m0_to_float(254), 0x1p127f);
  EXPECT_TRUE(std::isnan(e8m0_to_float(255)));
}

TEST(E8M0Decode, EveryByteMatchesLdexp) {
  for (int b = 0; b < 255; ++b) {
    const auto byte = static_cast<std::uint8_t>(b);
    EXPECT_EQ(static_cast<double>(e8m0_to_float(byte)), std::ldexp(1.0, b - 127)) << "b = " << b;
    EXPECT_EQ(static_cast<double>(e8m0_to_float(byte)), test::e8m0_value(byte)) << "b = " << b;
  }
}

TEST(E8M0Inverse, EveryByteGives2Pow127MinusBExactly) {
  EXPECT_EQ(e8m0_inverse_to_float(0), 0x1p127f);
  EXPECT_EQ(e8m0_inverse_to_float(127), 1.0f);
  EXPECT_EQ(e8m0_inverse_to_float(254), 0x1p-127f);  // subnormal, still exact
  for (int b = 0; b < 255; ++b) {
    const auto byte = static_cast<std::uint8_t>(b);
    EXPECT_EQ(static_cast<double>(e8m0_inverse_to_float(byte)), std::ldexp(1.0, 127 - b))
        << "b = " << b;
  }
}

// --- The scale of a given amax -------------------------------------------------------------------

TEST(ScaleForAmax, MatchesFrexpOracleOnASweepOfAllNonNegativeFloats) {
  int failures = 0;
  for (std::uint32_t bits = 0; bits < 0x7F800000u && failures < 20; bits += 509) {
    const float amax = test::bits_float(bits);
    for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kFloor}) {
      const std::uint8_t got = e8m0_scale_for_amax(amax, rule);
      const std::uint8_t want = test::scale_for_amax(amax, rule);
      if (got != want) {
        ++failures;
        ADD_FAILURE() << "amax " << std::hexfloat << amax << " rule "
                      << (rule == ScaleRule::kRceil ? "RCEIL" : "FLOOR") << ": got " << std::dec
                      << int{got} << ", want " << int{want};
      }
    }
  }
}

// The library derives the RCEIL exponent from amax's bits without dividing while amax / 448 is
// normal, and divides below that. Checked against the division oracle where a mistake would
// show: every float whose significand lies near 1.75 (448's) or near a power of two, in every
// binade; every float of the binades around the switch (2^-117); every bf16 and fp16 value.
TEST(ScaleForAmax, MatchesDivisionOracleAtEveryBinadesRceilBoundaryAndEvery16BitValue) {
  int failures = 0;
  const auto check = [&](float amax) {
    const std::uint8_t got = e8m0_scale_for_amax(amax, ScaleRule::kRceil);
    const std::uint8_t want = test::scale_for_amax(amax, ScaleRule::kRceil);
    if (got != want && ++failures <= 20) {
      ADD_FAILURE() << "amax " << std::hexfloat << amax << ": got " << std::dec << int{got}
                    << ", want " << int{want};
    }
  };
  constexpr std::uint32_t kWindow = 1u << 12;
  for (std::uint32_t biased = 0; biased < 255; ++biased) {
    for (const std::uint32_t centre : {0x000000u, 0x600000u, 0x7FFFFFu}) {
      const std::uint32_t lo = centre < kWindow ? 0 : centre - kWindow;
      const std::uint32_t hi = std::min<std::uint32_t>(centre + kWindow, 0x7FFFFFu);
      for (std::uint32_t mant = lo; mant <= hi; ++mant)
        check(test::bits_float(biased << 23 | mant));
    }
  }
  for (std::uint32_t biased = 1; biased <= 20; ++biased) {
    for (std::uint32_t mant = 0; mant <= 0x7FFFFFu; mant += 3)
      check(test::bits_float(biased << 23 | mant));
  }
  for (std::uint32_t h = 0; h < 0x8000u; ++h) {
    if (h < 0x7F80u) check(test::bits_float(h << 16));                                    // bf16
    if (h < 0x7C00u) check(static_cast<float>(test::format_value(test::kF16Format, h)));  // fp16
  }
  EXPECT_EQ(failures, 0);
}

// RCEIL picks the smallest b with amax * 2^(127-b) <= 448 (when no clamp applies); FLOOR puts
// the amax's binade on 2^8: 2^8 <= amax * 2^(127-b) < 2^9. Both checked on random amax over the
// whole normal range, from the definition of ceil/floor rather than from frexp.
TEST(ScaleForAmax, RceilIsTheSmallestNonSaturatingScaleAndFloorPutsAmaxIn256To512) {
  std::mt19937_64 rng = test::make_rng();
  std::uniform_int_distribution<std::uint32_t> bits_dist(0x00800000u, 0x7F7FFFFFu);
  for (int i = 0; i < 100000; ++i) {
    const float amax = test::bits_float(bits_dist(rng));
    const int rceil = e8m0_scale_for_amax(amax, ScaleRule::kRceil);
    const int floor = e8m0_scale_for_amax(amax, ScaleRule::kFloor);
    const double a = amax;
    // amax >= 448 * 2^-126 keeps t = amax / 448 normal, so fl32 cannot round t across 2^k.
    if (amax >= 448.0f * 0x1p-126f) {
      ASSERT_GE(rceil, 1);
      ASSERT_LE(a * std::ldexp(1.0, 127 - rceil), 448.0) << std::hexfloat << amax;
      ASSERT_GT(a * std::ldexp(1.0, 127 - (rceil - 1)), 448.0) << std::hexfloat << amax;
    }
    if (floor > 0) {
      ASSERT_GE(a * std::ldexp(1.0, 127 - floor), 256.0) << std::hexfloat << amax;
      ASSERT_LT(a * std::ldexp(1.0, 127 - floor), 512.0) << std::hexfloat << amax;
    }
  }
}

// --- Crafted blocks, both rules ------------------------------------------------------------------

TEST(ScaleRulesBlock, AllZeroBlockClampsAmaxToFltMinAndGivesScaleZero) {
  // amax = 0 is clamped to FLT_MIN = 2^-126.
  // RCEIL: t = 2^-126 / 448 = 2^-134 / 1.75, in (2^-135, 2^-134): ceil(log2 t) = -134,
  //        b = -134 + 127 = -7 -> clamped to 0.
  // FLOOR: floor(log2 2^-126) - 8 + 127 = -7 -> clamped to 0.
  Block v{};
  for (int i = 0; i < kBlockSize; i += 2) v[static_cast<std::size_t>(i)] = -0.0f;
  for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kFloor}) {
    const Quantized got = QuantizeRaw(v.data(), DType::kF32, rule);
    EXPECT_EQ(got.scale, 0x00);
    for (int i = 0; i < kBlockSize; ++i) {
      // Zeros stay zeros with their sign: -0.0 -> 0x80.
      EXPECT_EQ(got.q[static_cast<std::size_t>(i)], i % 2 == 0 ? 0x80 : 0x00) << "element " << i;
    }
    ExpectFp32Block(v, rule, 0x00);
  }
}

TEST(ScaleRulesBlock, OneHugeValueAmongSmallOnesSetsTheScale) {
  Block v{};
  for (int i = 0; i < kBlockSize; ++i) {
    v[static_cast<std::size_t>(i)] = (i % 2 ? -1.0f : 1.0f) * static_cast<float>(i % 4);
  }
  v[9] = 1e6f;  // exact in fp32 (15625 * 2^6)
  // RCEIL: t = fl(1e6 / 448) = 2232.14..., 2^11 < t < 2^12: b = 12 + 127 = 139.
  //        1e6 * 2^-12 = 244.14 -> nearest of 240 (0x77) / 256 (0x78) is 240.
  //        3 * 2^-12 = 2^-10.4 is below half the smallest subnormal (2^-10): 0.
  // FLOOR: floor(log2 1e6) = 19 (2^19 = 524288): b = 19 - 8 + 127 = 138.
  //        1e6 * 2^-11 = 488.3 > 448 saturates to 0x7E; 3 * 2^-11 = 1.5 * 2^-10 rounds to the
  //        smallest subnormal 0x01.
  ExpectFp32Block(v, ScaleRule::kRceil, 139);
  ExpectFp32Block(v, ScaleRule::kFloor, 138);
  const Quantized rceil = QuantizeRaw(v.data(), DType::kF32, ScaleRule::kRceil);
  EXPECT_EQ(rceil.q[9], 0x77);
  EXPECT_EQ(rceil.q[3], 0x80);  // -3 * 2^-12 -> -0
  const Quantized floor = QuantizeRaw(v.data(), DType::kF32, ScaleRule::kFloor);
  EXPECT_EQ(floor.q[9], 0x7E);
  EXPECT_EQ(floor.q[3], 0x81);  // -3 * 2^-11 -> -2^-9
}

TEST(ScaleRulesBlock, SubnormalOnlyBlockClampsToScaleZero) {
  Block v{};
  v[0] = 0x1p-130f;  // amax, fp32 subnormal
  v[1] = -0x1p-140f;
  v[2] = std::numeric_limits<float>::denorm_min();  // 2^-149
  v[3] = 3 * 0x1p-133f;
  v[4] = -0x1.8p-131f;
  // amax = 2^-130 < FLT_MIN is clamped to 2^-126: b = 0 for both rules (see the all-zero block).
  // Elements are v * 2^127: 2^-130 -> 2^-3 = 0.125 (0.0100.000 = 0x20);
  // -2^-140 -> -2^-13, below 2^-10: 0x80; 2^-149 -> 2^-22: 0x00;
  // 3 * 2^-133 -> 1.5 * 2^-5 (0.0010.100 = 0x14); -1.5 * 2^-131 -> -1.5 * 2^-4 (1.0011.100 = 0x9C).
  for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kFloor}) {
    ExpectFp32Block(v, rule, 0);
    const Quantized got = QuantizeRaw(v.data(), DType::kF32, rule);
    EXPECT_EQ(got.q[0], 0x20);
    EXPECT_EQ(got.q[1], 0x80);
    EXPECT_EQ(got.q[2], 0x00);
    EXPECT_EQ(got.q[3], 0x14);
    EXPECT_EQ(got.q[4], 0x9C);
  }
}

// amax = 448 * 2^e exactly, and the floats just above and below it.
//  exact: RCEIL t = 2^e exactly, b = e + 127; FLOOR floor(log2(1.75 * 2^(e+8))) - 8 = e,
//         b = e + 127. The amax element is 448 (0x7E) under both.
//  above: amax = 448 * 2^e + 2^(e-15) (one ulp). t = 2^e * (1 + 2^-23 / 1.75); the fp32
//         neighbours of t are 2^e and 2^e * (1 + 2^-23), and 1 / 1.75 > 1/2 rounds up, so
//         t > 2^e: RCEIL b = e + 128 and the element is 224.0000x -> 224 (0x76). FLOOR keeps
//         b = e + 127, the scaled amax 448 + 2^-15 > 448 saturates: 0x7E.
//  below: amax = 448 * 2^e - 2^(e-15). t = 2^e - 1.14 * 2^(e-24) rounds to 2^e - 2^(e-24) < 2^e:
//         RCEIL b = e + 127 (no change); FLOOR b = e + 127. Element 448 - 2^-15 -> 448 (0x7E).
TEST(ScaleRulesBlock, AmaxStraddling448Times2PowEForSeveralE) {
  for (int e : {-100, -20, -1, 0, 1, 7, 20, 100, 119}) {
    SCOPED_TRACE(testing::Message() << "e = " << e);
    const float exact = std::ldexp(448.0f, e);
    const float above = std::nextafter(exact, kInf);
    const float below = std::nextafter(exact, 0.0f);
    ASSERT_EQ(static_cast<double>(above) - static_cast<double>(exact), std::ldexp(1.0, e - 15));
    const auto b = static_cast<std::uint8_t>(e + 127);
    const auto b_up = static_cast<std::uint8_t>(e + 128);

    ExpectFp32Block(BlockWithAmax(exact), ScaleRule::kRceil, b);
    ExpectFp32Block(BlockWithAmax(exact), ScaleRule::kFloor, b);
    EXPECT_EQ(QuantizeRaw(BlockWithAmax(exact).data(), DType::kF32, ScaleRule::kRceil).q[7], 0x7E);
    EXPECT_EQ(QuantizeRaw(BlockWithAmax(exact).data(), DType::kF32, ScaleRule::kFloor).q[7], 0x7E);

    ExpectFp32Block(BlockWithAmax(above, true), ScaleRule::kRceil, b_up);
    ExpectFp32Block(BlockWithAmax(above, true), ScaleRule::kFloor, b);
    const Quantized rceil_above =
        QuantizeRaw(BlockWithAmax(above, true).data(), DType::kF32, ScaleRule::kRceil);
    EXPECT_EQ(rceil_above.q[7], 0x76);
    EXPECT_EQ(rceil_above.q[20], 0xF6);
    const Quantized floor_above =
        QuantizeRaw(BlockWithAmax(above, true).data(), DType::kF32, ScaleRule::kFloor);
    EXPECT_EQ(floor_above.q[7], 0x7E);
    EXPECT_EQ(floor_above.q[20], 0xFE);

    ExpectFp32Block(BlockWithAmax(below), ScaleRule::kRceil, b);
    ExpectFp32Block(BlockWithAmax(below), ScaleRule::kFloor, b);
    EXPECT_EQ(QuantizeRaw(BlockWithAmax(below).data(), DType::kF32, ScaleRule::kRceil).q[7], 0x7E);
  }
}

TEST(ScaleRulesBlock, RceilQuotientRoundingInTheSubnormalRangeClampsToScaleZero) {
  // amax = 448 * 2^-127 = 1.75 * 2^-119 (a normal float): t = 2^-127, an exact fp32 subnormal,
  // ceil(log2 t) = -127, b = 0. FLOOR: floor(log2 amax) = -119, b = -119 - 8 + 127 = 0.
  const float exact = std::ldexp(448.0f, -127);
  ExpectFp32Block(BlockWithAmax(exact), ScaleRule::kRceil, 0);
  ExpectFp32Block(BlockWithAmax(exact), ScaleRule::kFloor, 0);
  // One ulp above (2^-142): t = 2^-127 + 2^-142 / 448 = 2^-127 + 2^-150.8; the subnormal spacing
  // is 2^-149, so fl32 rounds t back to 2^-127 and b stays 0. The scaled amax is 448 + 2^-15,
  // which rounds to 448 (0x7E): within rounding, not a saturation that changes the value.
  const float above = std::nextafter(exact, kInf);
  ExpectFp32Block(BlockWithAmax(above), ScaleRule::kRceil, 0);
  EXPECT_EQ(QuantizeRaw(BlockWithAmax(above).data(), DType::kF32, ScaleRule::kRceil).q[7], 0x7E);
  // amax = 448 * 2^-130: t = 2^-130, b = -3 -> clamped to 0; the amax scales to 56 = 1.75 * 2^5
  // (0.1100.110 = 0x66).
  const float lower = std::ldexp(448.0f, -130);
  ExpectFp32Block(BlockWithAmax(lower), ScaleRule::kRceil, 0);
  EXPECT_EQ(QuantizeRaw(BlockWithAmax(lower).data(), DType::kF32, ScaleRule::kRceil).q[7], 0x66);
}

TEST(ScaleRulesBlock, AmaxJustAbove448TimesPowerSaturatesUnderFloorOnly) {
  // amax = 480 * 2^e: RCEIL t = (480/448) * 2^e = 1.07 * 2^e, b = e + 128, amax -> 240 (0x77).
  // FLOOR: floor(log2(1.875 * 2^(e+8))) - 8 = e, b = e + 127, amax -> 480 > 448 saturates: 0x7E.
  for (int e : {-30, 0, 30}) {
    SCOPED_TRACE(testing::Message() << "e = " << e);
    const Block v = BlockWithAmax(std::ldexp(480.0f, e), true);
    ExpectFp32Block(v, ScaleRule::kRceil, static_cast<std::uint8_t>(e + 128));
    ExpectFp32Block(v, ScaleRule::kFloor, static_cast<std::uint8_t>(e + 127));
    EXPECT_EQ(QuantizeRaw(v.data(), DType::kF32, ScaleRule::kRceil).q[7], 0x77);
    EXPECT_EQ(QuantizeRaw(v.data(), DType::kF32, ScaleRule::kFloor).q[7], 0x7E);
    EXPECT_EQ(QuantizeRaw(v.data(), DType::kF32, ScaleRule::kFloor).q[20], 0xFE);
  }
}

TEST(ScaleRulesBlock, FloorSaturatesEveryElementWhoseScaledValueExceeds448) {
  // amax = 511: FLOOR b = floor(log2 511) - 8 + 127 = 127 (factor 1), so the scaled values are the
  // values themselves. RCEIL: t = 511/448 = 1.14, b = 128 (factor 1/2), nothing reaches 448.
  Block v{};
  const float big[] = {511.0f, -500.0f, 480.0f, 470.0f, -464.5f, 449.0f, 448.0f, -447.0f};
  for (int i = 0; i < kBlockSize; ++i) {
    v[static_cast<std::size_t>(i)] = i < 8 ? big[i] : static_cast<float>(i * 7 - 100);
  }
  ExpectFp32Block(v, ScaleRule::kFloor, 127);
  ExpectFp32Block(v, ScaleRule::kRceil, 128);
  const Quantized floor = QuantizeRaw(v.data(), DType::kF32, ScaleRule::kFloor);
  const Quantized rceil = QuantizeRaw(v.data(), DType::kF32, ScaleRule::kRceil);
  for (int i = 0; i < kBlockSize; ++i) {
    const auto idx = static_cast<std::size_t>(i);
    if (std::fabs(v[idx]) > 448.0f) {
      EXPECT_EQ(floor.q[idx], v[idx] > 0 ? 0x7E : 0xFE) << "element " << i;
    }
    // RCEIL: |v| / 2 <= 255.5, so no element is at the saturation value.
    EXPECT_NE(rceil.q[idx] & 0x7F, 0x7E) << "element " << i;
  }
}

TEST(ScaleRulesBlock, RceilNeverSaturatesOnRandomBlocks) {
  std::mt19937_64 rng = test::make_rng();
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> top(-100, 110);
  std::uniform_int_distribution<int> spread(0, 24);
  for (int trial = 0; trial < 5000; ++trial) {
    Block v{};
    const int e0 = top(rng);
    for (auto& x : v) x = (rng() & 1 ? -1.0f : 1.0f) * std::ldexp(mantissa(rng), e0 - spread(rng));
    const Quantized got = QuantizeRaw(v.data(), DType::kF32, ScaleRule::kRceil);
    const double factor = std::ldexp(1.0, 127 - got.scale);
    for (int i = 0; i < kBlockSize; ++i) {
      const auto idx = static_cast<std::size_t>(i);
      ASSERT_LE(std::fabs(static_cast<double>(v[idx]) * factor), 448.0)
          << "element " << i << " = " << std::hexfloat << v[idx] << ", scale " << std::dec
          << int{got.scale};
    }
    ExpectElements(got, v, got.scale);
    ASSERT_EQ(got.scale, test::scale_for_amax(std::fabs(*std::max_element(v.begin(), v.end(),
                                                                          [](float a, float b) {
                                                                            return std::fabs(a) <
                                                                                   std::fabs(b);
                                                                          })),
                                              ScaleRule::kRceil));
  }
}

TEST(ScaleRulesBlock, NaNAnywhereGivesScale0xFFAndAllElements0x7F) {
  for (float bad : {kNaN, -kNaN}) {
    for (int position : {0, 13, 31}) {
      Block v = BlockWithAmax(3.0f);
      v[static_cast<std::size_t>(position)] = bad;
      for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kFloor}) {
        const Quantized got = QuantizeRaw(v.data(), DType::kF32, rule);
        EXPECT_EQ(got.scale, 0xFF);
        for (std::uint8_t q : got.q) EXPECT_EQ(q, 0x7F);
      }
    }
  }
}

TEST(ScaleRulesBlock, PlusOrMinusInfGivesScale0xFFAndAllElements0x7F) {
  for (float bad : {kInf, -kInf}) {
    Block v = BlockWithAmax(1e30f);
    v[5] = bad;
    for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kFloor}) {
      const Quantized got = QuantizeRaw(v.data(), DType::kF32, rule);
      EXPECT_EQ(got.scale, 0xFF);
      for (std::uint8_t q : got.q) EXPECT_EQ(q, 0x7F) << "inf never becomes a finite code";
    }
  }
}

TEST(ScaleRulesBlock, AmaxAtFltMax) {
  // FLT_MAX = (2 - 2^-23) * 2^127.
  // RCEIL: t = FLT_MAX / 448 = 1.1428 * 2^119: ceil = 120, b = 247. The amax scales to
  //        (2 - 2^-23) * 2^7 = 256 - 2^-16 -> 256 (0x78).
  // FLOOR: floor(log2 FLT_MAX) = 127, b = 127 - 8 + 127 = 246. The amax scales to 512 - 2^-15,
  //        saturating to 0x7E (0xFE for -FLT_MAX).
  const Block v = BlockWithAmax(FLT_MAX, true);
  ExpectFp32Block(v, ScaleRule::kRceil, 247);
  ExpectFp32Block(v, ScaleRule::kFloor, 246);
  EXPECT_EQ(QuantizeRaw(v.data(), DType::kF32, ScaleRule::kRceil).q[7], 0x78);
  EXPECT_EQ(QuantizeRaw(v.data(), DType::kF32, ScaleRule::kRceil).q[20], 0xF8);
  EXPECT_EQ(QuantizeRaw(v.data(), DType::kF32, ScaleRule::kFloor).q[7], 0x7E);
  EXPECT_EQ(QuantizeRaw(v.data(), DType::kF32, ScaleRule::kFloor).q[20], 0xFE);
}

TEST(ScaleRulesBlock, AmaxAtFltMin) {
  // amax = FLT_MIN = 2^-126, the clamp value itself: b = 0 for both rules (as the all-zero
  // block). The amax scales to 2^-126 * 2^127 = 2 (0.1000.000 = 0x40).
  const Block v = BlockWithAmax(FLT_MIN);
  for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kFloor}) {
    ExpectFp32Block(v, rule, 0);
    EXPECT_EQ(QuantizeRaw(v.data(), DType::kF32, rule).q[7], 0x40);
  }
}

// --- bf16 and fp16 inputs
// --------------------------------------------------------------------------

std::array<std::uint16_t, kBlockSize> ToBf16(const Block& v) {
  std::array<std::uint16_t, kBlockSize> bits{};
  for (std::size_t i = 0; i < v.size(); ++i) bits[i] = test::to_bf16_bits(v[i]);
  return bits;
}

Block FromBf16(const std::array<std::uint16_t, kBlockSize>& bits) {
  Block v{};
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = test::bf16_bits_to_float(bits[i]);
  return v;
}

std::array<std::uint16_t, kBlockSize> ToF16(const Block& v) {
  std::array<std::uint16_t, kBlockSize> bits{};
  for (std::size_t i = 0; i < v.size(); ++i) bits[i] = test::to_f16_bits(v[i]);
  return bits;
}

Block FromF16(const std::array<std::uint16_t, kBlockSize>& bits) {
  Block v{};
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = test::f16_bits_to_float(bits[i]);
  return v;
}

void ExpectBf16Block(const std::array<std::uint16_t, kBlockSize>& bits, ScaleRule rule,
                     std::uint8_t scale) {
  const Quantized got = QuantizeRaw(bits.data(), DType::kBF16, rule);
  EXPECT_EQ(static_cast<int>(got.scale), static_cast<int>(scale));
  ExpectElements(got, FromBf16(bits), scale);
}

void ExpectF16Block(const std::array<std::uint16_t, kBlockSize>& bits, ScaleRule rule,
                    std::uint8_t scale) {
  const Quantized got = QuantizeRaw(bits.data(), DType::kF16, rule);
  EXPECT_EQ(static_cast<int>(got.scale), static_cast<int>(scale));
  ExpectElements(got, FromF16(bits), scale);
}

TEST(ScaleRulesBf16, AmaxAt448Times8AndAtBf16Max) {
  // 3584 = 448 * 2^3 = 1.75 * 2^11 is exact in bf16: both rules b = 3 + 127 = 130, amax -> 0x7E.
  Block v = BlockWithAmax(3584.0f, true);
  v[1] = -1.5f;    // -1.5 * 2^-3 = -0.1875 = -1.5 * 2^-3 -> 1.0100.100 = 0xA4
  v[2] = 0x1p-7f;  // 2^-10: exactly half the smallest subnormal, ties to even 0x00
  const auto bits = ToBf16(v);
  ASSERT_EQ(FromBf16(bits)[1], -1.5f);
  ExpectBf16Block(bits, ScaleRule::kRceil, 130);
  ExpectBf16Block(bits, ScaleRule::kFloor, 130);
  const Quantized got = QuantizeRaw(bits.data(), DType::kBF16, ScaleRule::kRceil);
  EXPECT_EQ(got.q[7], 0x7E);
  EXPECT_EQ(got.q[20], 0xFE);
  EXPECT_EQ(got.q[1], 0xA4);
  EXPECT_EQ(got.q[2], 0x00);

  // bf16 max 0x7F7F = (2 - 2^-7) * 2^127. RCEIL: t = 1.1384 * 2^119, b = 247, amax -> 255 ->
  // 256 (0x78; 255 is past the 248 midpoint of 240/256). FLOOR: b = 246, amax -> 510 -> 0x7E.
  std::array<std::uint16_t, kBlockSize> max_bits = ToBf16(BlockWithAmax(1e38f));
  max_bits[7] = 0x7F7F;
  ExpectBf16Block(max_bits, ScaleRule::kRceil, 247);
  ExpectBf16Block(max_bits, ScaleRule::kFloor, 246);
  EXPECT_EQ(QuantizeRaw(max_bits.data(), DType::kBF16, ScaleRule::kRceil).q[7], 0x78);
  EXPECT_EQ(QuantizeRaw(max_bits.data(), DType::kBF16, ScaleRule::kFloor).q[7], 0x7E);
}

TEST(ScaleRulesBf16, SubnormalNaNAndInf) {
  // bf16 0x0001 = 2^-133 alone: amax clamped to FLT_MIN, b = 0, element 2^-133 * 2^127 = 2^-6,
  // the smallest normal E4M3 (0x08).
  std::array<std::uint16_t, kBlockSize> bits{};
  bits[3] = 0x0001;
  bits[4] = 0x8002;  // -2^-132 -> -2^-5 = 0.0010.000 with sign: 0x90
  for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kFloor}) {
    ExpectBf16Block(bits, rule, 0);
    EXPECT_EQ(QuantizeRaw(bits.data(), DType::kBF16, rule).q[3], 0x08);
    EXPECT_EQ(QuantizeRaw(bits.data(), DType::kBF16, rule).q[4], 0x90);
  }
  for (std::uint16_t bad : {std::uint16_t{0x7FC0}, std::uint16_t{0xFF80}, std::uint16_t{0x7F80}}) {
    std::array<std::uint16_t, kBlockSize> special = ToBf16(BlockWithAmax(2.0f));
    special[11] = bad;
    const Quantized got = QuantizeRaw(special.data(), DType::kBF16, ScaleRule::kRceil);
    EXPECT_EQ(got.scale, 0xFF);
    for (std::uint8_t q : got.q) EXPECT_EQ(q, 0x7F);
  }
}

TEST(ScaleRulesF16, AmaxAtF16MaxAndSubnormalOnly) {
  // 65504 = (2 - 2^-10) * 2^15. RCEIL: t = 146.2, 2^7 < t < 2^8: b = 8 + 127 = 135, amax ->
  // 255.875 -> 256 (0x78). FLOOR: floor(log2 65504) = 15, b = 134, amax -> 511.75 -> 0x7E.
  Block v = BlockWithAmax(65504.0f, true);
  const auto bits = ToF16(v);
  ASSERT_EQ(FromF16(bits)[7], 65504.0f);
  ExpectF16Block(bits, ScaleRule::kRceil, 135);
  ExpectF16Block(bits, ScaleRule::kFloor, 134);
  EXPECT_EQ(QuantizeRaw(bits.data(), DType::kF16, ScaleRule::kRceil).q[7], 0x78);
  EXPECT_EQ(QuantizeRaw(bits.data(), DType::kF16, ScaleRule::kFloor).q[20], 0xFE);

  // Subnormal fp16 only: amax 0x03FF = 1023 * 2^-24 (above FLT_MIN, so no clamp).
  // RCEIL: t = 2.28 * 2^-24 in (2^-23, 2^-22): b = -22 + 127 = 105, amax -> 255.75 -> 256 (0x78),
  //        0x0001 = 2^-24 -> 2^-2 (0.0101.000 = 0x28).
  // FLOOR: floor(log2(1023 * 2^-24)) = -15, b = 104, amax -> 511.5 -> 0x7E, 2^-24 -> 2^-1 (0x30).
  std::array<std::uint16_t, kBlockSize> sub{};
  sub[0] = 0x03FF;
  sub[1] = 0x0001;
  sub[2] = 0x8155;
  ExpectF16Block(sub, ScaleRule::kRceil, 105);
  ExpectF16Block(sub, ScaleRule::kFloor, 104);
  const Quantized rceil = QuantizeRaw(sub.data(), DType::kF16, ScaleRule::kRceil);
  EXPECT_EQ(rceil.q[0], 0x78);
  EXPECT_EQ(rceil.q[1], 0x28);
  const Quantized floor = QuantizeRaw(sub.data(), DType::kF16, ScaleRule::kFloor);
  EXPECT_EQ(floor.q[0], 0x7E);
  EXPECT_EQ(floor.q[1], 0x30);
}

TEST(ScaleRulesF16, NaNAndInfGiveScale0xFF) {
  for (std::uint16_t bad : {std::uint16_t{0x7C00}, std::uint16_t{0xFC00}, std::uint16_t{0x7E00}}) {
    std::array<std::uint16_t, kBlockSize> bits = ToF16(BlockWithAmax(2.0f));
    bits[30] = bad;
    for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kFloor}) {
      const Quantized got = QuantizeRaw(bits.data(), DType::kF16, rule);
      EXPECT_EQ(got.scale, 0xFF);
      for (std::uint8_t q : got.q) EXPECT_EQ(q, 0x7F);
    }
  }
}

}  // namespace
}  // namespace mxlinear
