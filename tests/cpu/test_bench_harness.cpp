// The benchmark method's own arithmetic: rotation, statistics, byte and flop counts.
#include <gtest/gtest.h>

#include <cmath>

#include "harness.hpp"

namespace mxlinear::bench {
namespace {

TEST(BenchHarness, RotationCoversThreeTimesL2) {
  const std::size_t l2 = 60u << 20;
  // shared_experts.down_proj: 6144 x 768 e4m3 = 4.72 MB; 3 x 60 MiB / 4.72 MB = 40 exactly.
  const int copies = rotation_copies(6144 * 768, l2);
  EXPECT_EQ(copies, 40);
  EXPECT_GE(static_cast<double>(copies) * 6144 * 768, 3.0 * l2);
  EXPECT_LT(static_cast<double>(copies - 1) * 6144 * 768, 3.0 * l2);
  EXPECT_EQ(rotation_copies(std::size_t{1} << 34, l2), 2);  // never fewer than two
}

// Whole rotations of at least 8 calls: no copy is read again before every other copy is.
TEST(BenchHarness, RotationCallsAreWholeRotationsOfAtLeastEight) {
  for (int copies = 1; copies <= 40; ++copies) {
    const int calls = rotation_calls(copies);
    EXPECT_GE(calls, 8) << copies;
    EXPECT_EQ(calls % copies, 0) << copies;
    EXPECT_LT(calls - copies, 8) << copies;  // no more than needed
  }
  EXPECT_EQ(rotation_calls(5), 10);
  EXPECT_EQ(rotation_calls(3), 9);
  EXPECT_EQ(rotation_calls(12), 12);
}

TEST(BenchHarness, SummaryIsMedianMinMax) {
  const Summary odd = summarize({5, 1, 3});
  EXPECT_EQ(odd.median, 3);
  EXPECT_EQ(odd.min, 1);
  EXPECT_EQ(odd.max, 5);
  EXPECT_DOUBLE_EQ(odd.spread(), 4.0 / 3.0);
  EXPECT_EQ(summarize({4, 1, 3, 2}).median, 2.5);
  EXPECT_EQ(summarize({}).median, 0);
}

TEST(BenchHarness, TrafficCountsEachOperandOnce) {
  // M = 32, N = 2560, K = 6144, bf16 out, bf16 activation quantized inside.
  const Traffic t = count_traffic(32, 2560, 6144, 2, true);
  const double weights = 2560.0 * 6144 * (1 + 1.0 / 32);
  EXPECT_DOUBLE_EQ(t.bytes, weights + 32.0 * 6144 * 2 + 32.0 * 2560 * 2);
  EXPECT_DOUBLE_EQ(t.flops, 2.0 * 32 * 2560 * 6144);
  const Traffic q = count_traffic(32, 2560, 6144, 2, false);
  EXPECT_DOUBLE_EQ(q.bytes, weights + 32.0 * 6144 * (1 + 1.0 / 32) + 32.0 * 2560 * 2);
}

TEST(BenchHarness, FloorIsTheLargerOfBytesAndFlops) {
  const Traffic t{4.36e6, 790e6};
  EXPECT_DOUBLE_EQ(floor_us(t, 4.36e12, 790e12), 1.0);
  EXPECT_DOUBLE_EQ(floor_us(Traffic{8.72e6, 1}, 4.36e12, 790e12), 2.0);
  EXPECT_DOUBLE_EQ(floor_us(Traffic{1, 1580e6}, 4.36e12, 790e12), 2.0);
}

TEST(BenchHarness, PaddingAndGeometricMean) {
  EXPECT_EQ(pad16(1), 16);
  EXPECT_EQ(pad16(16), 16);
  EXPECT_EQ(pad16(17), 32);
  EXPECT_DOUBLE_EQ(geomean({2, 8}), 4);
  EXPECT_DOUBLE_EQ(geomean({2, NAN, 8}), 4);  // NaN (a missing anchor) is left out
  EXPECT_EQ(geomean({}), 0);
  // A figure with no anchors at all prints as missing, not as 0x.
  EXPECT_EQ(ratio_text(geomean({NAN, NAN})), "n/a");
  EXPECT_EQ(ratio_text(geomean({2, 8})), "4.00");
}

}  // namespace
}  // namespace mxlinear::bench
