// The cost model's estimates behave as the physics they stand for, whatever the shape.
#include <gtest/gtest.h>

#include <random>

#include "host/registry/cost_model.hpp"
#include "support/random.hpp"

namespace mxlinear::detail {
namespace {

WorkShape folded(int rows, int tokens, int splits = 1) {
  WorkShape w;
  w.rows = rows;
  w.tokens = tokens;
  w.splits = splits;
  w.consumer_groups = rows / 64;
  w.activation_bytes_per_element = 2;
  return w;
}

double us(const WorkShape& w, std::int64_t m, std::int64_t n, std::int64_t k, int sms = 132) {
  DeviceRates r;
  r.sms = sms;
  return estimated_seconds(w, ActivationPass::kDequantize, {m, n, k}, r) * 1e6;
}

// More rows, more columns or more K never make a call cheaper, and fewer SMs never make it
// faster; every estimate is positive and finite.
TEST(CostModel, EstimatesGrowWithTheProblemAndShrinkWithSms) {
  auto rng = test::make_rng();
  std::uniform_int_distribution<std::int64_t> dim(1, 20000), blocks(1, 900);
  const WorkShape shapes[] = {folded(128, 256), folded(64, 32, 4), folded(128, 128, 3)};
  for (int i = 0; i < 2000; ++i) {
    const WorkShape& w = shapes[i % 3];
    const std::int64_t m = dim(rng), n = dim(rng), k = 32 * blocks(rng);
    const double t = us(w, m, n, k);
    ASSERT_GT(t, 0);
    ASSERT_TRUE(std::isfinite(t));
    EXPECT_LE(t, us(w, m + 1, n, k) * (1 + 1e-12)) << m << " x " << n << " x " << k;
    EXPECT_LE(t, us(w, m, n + 64, k) * (1 + 1e-12)) << m << " x " << n << " x " << k;
    EXPECT_LE(t, us(w, m, n, k + 128) * (1 + 1e-12)) << m << " x " << n << " x " << k;
    EXPECT_LE(t, us(w, m, n, k, 114) * (1 + 1e-12)) << m << " x " << n << " x " << k;
  }
}

// No estimate beats the floors: the weight bytes at the read ceiling, the flops at the bf16 rate.
TEST(CostModel, NoEstimateBeatsTheByteAndFlopFloors) {
  const DeviceRates r;
  for (const std::int64_t m : {1, 64, 512, 8192}) {
    for (const WorkShape& w : {folded(128, 256), folded(64, 64, 2), folded(192, 128)}) {
      const double n = 6144, k = 6144;
      const double bytes_floor = n * k / r.read_bytes_per_s * 1e6;
      const double flop_floor =
          2.0 * static_cast<double>(m) * n * k / (r.bf16_flops_per_sm_s * r.sms) * 1e6;
      EXPECT_GE(us(w, m, 6144, 6144), std::max(bytes_floor, flop_floor)) << m;
    }
  }
}

// A grid one CTA larger than the SMs hold at once pays for a second wave.
TEST(CostModel, ASecondWaveCosts) {
  const WorkShape w = folded(128, 128);
  // 132 tiles fill the H200 once; 133 need a second wave.
  EXPECT_GT(us(w, 128, 133 * 128, 8192), 1.5 * us(w, 128, 132 * 128, 8192));
}

// Splitting K fills idle SMs where tiles are few, and costs a meeting where they are not.
TEST(CostModel, SplitsPayWhereSmsIdleAndCostWhereTheyDoNot) {
  EXPECT_LT(us(folded(64, 32, 4), 32, 2048, 8192), us(folded(64, 32, 1), 32, 2048, 8192));
  EXPECT_GT(us(folded(128, 256, 2), 8192, 8192, 4096), us(folded(128, 256, 1), 8192, 8192, 4096));
}

// A tile that sums K parts apart stops at each part change, the longer the wider the tile;
// one part costs nothing.
TEST(CostModel, EachPartChangeCostsAndCostsMoreOnWiderTiles) {
  const auto with_parts = [](WorkShape w, int parts) {
    w.k_parts = parts;
    return w;
  };
  for (const WorkShape& w : {folded(64, 32), folded(128, 128), folded(128, 256)}) {
    for (const std::int64_t m : {1, 128, 4096}) {
      EXPECT_DOUBLE_EQ(us(with_parts(w, 1), m, 6144, 6144), us(w, m, 6144, 6144));
      EXPECT_LT(us(with_parts(w, 2), m, 6144, 6144), us(with_parts(w, 3), m, 6144, 6144));
      EXPECT_LT(us(w, m, 6144, 6144), us(with_parts(w, 2), m, 6144, 6144));
    }
  }
  // Per CTA and part change, on a call of one wave each: the 128 x 256 tile's stop is 16 times
  // the 64 x 32 tile's (it grows with rows x tokens).
  const double narrow = us(with_parts(folded(64, 32), 3), 32, 64 * 100, 6144) -
                        us(folded(64, 32), 32, 64 * 100, 6144);
  const double wide = us(with_parts(folded(128, 256), 3), 256, 128 * 100, 6144) -
                      us(folded(128, 256), 256, 128 * 100, 6144);
  EXPECT_NEAR(wide / narrow, 16.0, 1e-6);
}

// A measured share replaces the curve only where the rates ask for it, and a smaller share
// costs more.
TEST(CostModel, AMeasuredShareCountsWhereAsked) {
  WorkShape w = folded(128, 128);
  DeviceRates curve, measured;
  measured.measured_shares = true;
  const LinearShape shape{512, 6144, 6144};
  const double unmeasured = estimated_seconds(w, ActivationPass::kDequantize, shape, measured);
  w.measured_share = 0.5;
  EXPECT_EQ(estimated_seconds(w, ActivationPass::kDequantize, shape, curve), unmeasured);
  const double half = estimated_seconds(w, ActivationPass::kDequantize, shape, measured);
  w.measured_share = 0.9;
  const double most = estimated_seconds(w, ActivationPass::kDequantize, shape, measured);
  EXPECT_GT(half, unmeasured);
  EXPECT_LT(most, half);
}

TEST(CostModel, ClustersOfThreeFillFewerSlotsThanPairs) {
  EXPECT_LT(cluster_fill(3), cluster_fill(2));
  EXPECT_DOUBLE_EQ(cluster_fill(1), 1.0);
  for (int size = 1; size <= 8; ++size) {
    EXPECT_GT(cluster_fill(size), 0.5);
    EXPECT_LE(cluster_fill(size), 1.0);
  }
}

// Splits meet in memory where the kernel can and a cluster launch would not hold the CTAs one
// to an SM: two fit an SM, or not every cluster fits the GPCs (36 of 3 on 132 SMs). The CTAs
// must fit the SMs one each.
TEST(CostModel, SplitsMeetInMemoryWhereAClusterWouldNotHoldTheCtasOneAnSm) {
  WorkShape w = folded(64, 32, 3);
  w.splits_can_meet_in_memory = true;
  w.ctas_per_sm = 2;
  EXPECT_TRUE(meets_splits_in_memory(w, 40, 132));   // 120 CTAs, two an SM over a cluster
  EXPECT_FALSE(meets_splits_in_memory(w, 45, 132));  // 135 CTAs: not one an SM
  EXPECT_FALSE(meets_splits_in_memory(w, 40, 114));
  w.ctas_per_sm = 1;
  EXPECT_TRUE(meets_splits_in_memory(w, 37, 132));   // 37 clusters of 3: 36 fit
  EXPECT_FALSE(meets_splits_in_memory(w, 36, 132));  // they all fit: the cluster meets
  WorkShape cannot = w;
  cannot.splits_can_meet_in_memory = false;
  EXPECT_FALSE(meets_splits_in_memory(cannot, 40, 132));
  WorkShape unsplit = folded(64, 32, 1);
  unsplit.splits_can_meet_in_memory = true;
  EXPECT_FALSE(meets_splits_in_memory(unsplit, 40, 132));
  // Priced so: qkv (2560 x 6144) at M = 16, 40 tiles of 64 x 32 in three splits, meeting in
  // memory costs less than the same CTAs two to an SM over clusters of which only 36 hold.
  w.ctas_per_sm = 2;
  EXPECT_LT(us(w, 16, 2560, 6144), us(cannot, 16, 2560, 6144));
}

}  // namespace
}  // namespace mxlinear::detail
