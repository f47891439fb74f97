// The batch-invariant mode's selection on a described H200 (no GPU needed): every call of a layer
// runs in one K order, on configs that keep it, whatever M. That the configs really give the same
// bits is the GPU test's (tests/gpu/batch_invariance_gpu_test.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "device/common/grid_walk.hpp"
#include "host/registry/cost_model.hpp"
#include "host/registry/registry.hpp"
#include "support/random.hpp"

namespace mxlinear::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const DeviceDescription kH200 = DeviceDescription::parse("sm_90a:132");

const std::int64_t kMs[] = {1,   2,   3,   7,   8,    9,    16,   31,   32,   64,   100,
                            128, 256, 300, 512, 1000, 1024, 2048, 4096, 5000, 8192, 20000};

const Kernel& kernel_named(const Registry& r, std::string_view name) {
  const Kernel* k = r.find(name);
  if (k == nullptr) throw std::runtime_error("no kernel " + std::string(name));
  return *k;
}

bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

LayerDescription invariant_layer(std::int64_t n, std::int64_t k, ActivationOperand operand) {
  LayerDescription l;
  l.n = n;
  l.k = k;
  l.operand = operand;
  l.batch_invariant = true;
  return l;
}

// The parts of K in the batch-invariant order: one up to 31 chunks of 128 K, then one per 16
// chunks, at most 8 (7 becomes 8); a last short chunk counts.
TEST(BatchInvariantSelection, KFixesTheParts) {
  EXPECT_EQ(device::batch_invariant_parts(32), 1);
  EXPECT_EQ(device::batch_invariant_parts(2048), 1);
  EXPECT_EQ(device::batch_invariant_parts(3968), 1);
  EXPECT_EQ(device::batch_invariant_parts(3968 + 32), 2);
  EXPECT_EQ(device::batch_invariant_parts(4096), 2);
  EXPECT_EQ(device::batch_invariant_parts(6144), 3);
  EXPECT_EQ(device::batch_invariant_parts(6144 + 32), 3);
  EXPECT_EQ(device::batch_invariant_parts(12288), 6);
  EXPECT_EQ(device::batch_invariant_parts(14336), 8);
  EXPECT_EQ(device::batch_invariant_parts(25600), 8);
  EXPECT_EQ(device::batch_invariant_parts(1 << 30), 8);
}

// Which configs keep the K order is a property of each config's name and K: the prefill kernel's
// without alternating warpgroups or stream-K, unsplit where K has one part, else split into
// exactly its parts or summing them apart (kparts); the generic kernel's with one K warp at any
// K; the GEMV's k-parts configs at any K (the prefill kernel's order, which they join), no other
// GEMV config and no decode config (their warps and clusters split K by the config).
TEST(BatchInvariantSelection, WhichConfigsKeepTheKOrder) {
  const Registry& r = Registry::global();
  for (const std::string_view name : {"prefill", "prefill_a16"}) {
    const Kernel& k = kernel_named(r, name);
    for (const std::int64_t kk : {1024, 4096, 6144, 14336}) {
      const int parts = device::batch_invariant_parts(static_cast<int>(kk));
      const std::string split = "_split" + std::to_string(parts);
      int keeping = 0, kparts = 0;
      for (const std::string& c : k.configs()) {
        const bool cut = contains(c, "_alt") || contains(c, "_streamk");
        const bool whole = !contains(c, "_split");
        const bool keeps =
            !cut && (parts == 1 ? whole : contains(c, "_kparts") || (c.ends_with(split) && !whole));
        EXPECT_EQ(k.keeps_k_order(c, kk), keeps) << name << "/" << c << ", K = " << kk;
        keeping += k.keeps_k_order(c, kk) ? 1 : 0;
        kparts += contains(c, "_kparts") ? 1 : 0;
        // The k-parts tiles serve the mode only.
        if (contains(c, "_kparts")) {
          EXPECT_FALSE(k.worth_sweeping(64, c)) << c;
        }
      }
      EXPECT_GE(keeping, 5) << name << ", K = " << kk;
      EXPECT_EQ(kparts, 8) << name;
    }
  }
  for (const std::string_view name : {"generic", "generic_a16"}) {
    const Kernel& k = kernel_named(r, name);
    for (const std::string& c : k.configs()) {
      for (const std::int64_t kk : {1024, 6144}) {
        EXPECT_EQ(k.keeps_k_order(c, kk), !contains(c, "_kwarps")) << name << "/" << c;
      }
    }
  }
  for (const std::string_view name : {"gemv", "gemv_a16", "decode"}) {
    const Kernel& k = kernel_named(r, name);
    int kparts = 0;
    for (const std::string& c : k.configs()) {
      const bool joins = name != "decode" && contains(c, "_kparts");
      kparts += joins ? 1 : 0;
      for (const std::int64_t kk : {1024, 6144, 14336}) {
        EXPECT_EQ(k.keeps_k_order(c, kk), joins) << name << "/" << c << ", K = " << kk;
      }
      // The k-parts configs serve the mode only.
      if (joins) {
        EXPECT_FALSE(k.worth_sweeping(1, c)) << c;
      }
    }
    EXPECT_EQ(kparts, name == "decode" ? 0 : 9) << name;  // 3 tiles x 3 next-launch points
    EXPECT_EQ(k.k_order_family(), name == "gemv"       ? "prefill"
                                  : name == "gemv_a16" ? "prefill_a16"
                                                       : "decode");
  }
  EXPECT_FALSE(kernel_named(r, "prefill").keeps_k_order("no_such_config", 1024));
  EXPECT_FALSE(kernel_named(r, "prefill").keeps_k_order("w64_t32_st4_overlap", 0));
}

// The cost model sees a k-parts tile's part count (its part changes cost), K's parts, and a
// tile without k parts as one part.
TEST(BatchInvariantSelection, TheModelSeesTheKParts) {
  const Registry r(builtin_kernels(), TunedTable{}, Environment::from({}));
  const Kernel& prefill = kernel_named(r, "prefill");
  for (const std::int64_t k : {2048, 6144, 14336, 28672}) {
    const LinearShape shape{128, 4096, k};
    const auto parts = prefill.work_shape(shape, "w128_t128_st4_kparts");
    const auto twin = prefill.work_shape(shape, "w128_t128_st4");
    ASSERT_TRUE(parts.has_value() && twin.has_value()) << k;
    EXPECT_EQ(parts->k_parts, device::batch_invariant_parts(static_cast<int>(k))) << k;
    EXPECT_EQ(twin->k_parts, 1) << k;
  }
}

// The mode prices the prefill tiles at their measured shares of the bf16 rate from
// kMeasuredSharesFromM tokens; the default mode, and the mode below that M, keep the curve.
// Measured, the 128 x 64 tile costs more than the curve gives and the 128 x 256 tile less.
TEST(BatchInvariantSelection, ThePrefillTilesArePricedAtTheirMeasuredShares) {
  const Registry r(builtin_kernels(), TunedTable{}, Environment::from({}));
  const Kernel& prefill = kernel_named(r, "prefill");
  LayerDescription invariant = invariant_layer(6144, 6144, ActivationOperand::kMx);
  LayerDescription plain = invariant;
  plain.batch_invariant = false;
  for (const std::int64_t m :
       {detail::kMeasuredSharesFromM, std::int64_t{128}, std::int64_t{4096}}) {
    const auto narrow = estimated_call_us(prefill, "w128_t64_st4_overlap", invariant, m, kH200);
    const auto narrow_curve = estimated_call_us(prefill, "w128_t64_st4_overlap", plain, m, kH200);
    const auto wide = estimated_call_us(prefill, "w128_t256_st2", invariant, m, kH200);
    const auto wide_curve = estimated_call_us(prefill, "w128_t256_st2", plain, m, kH200);
    ASSERT_TRUE(narrow && narrow_curve && wide && wide_curve) << m;
    EXPECT_GT(*narrow, *narrow_curve) << m;
    EXPECT_LT(*wide, *wide_curve) << m;
  }
  const std::int64_t below = detail::kMeasuredSharesFromM - 1;
  EXPECT_EQ(estimated_call_us(prefill, "w128_t64_st4_overlap", invariant, below, kH200),
            estimated_call_us(prefill, "w128_t64_st4_overlap", plain, below, kH200));
  // Every compiled tile's config gets a share in (0, 1].
  for (const std::string& config : prefill.configs()) {
    const auto w = prefill.work_shape({256, 6144, 6144}, config);
    ASSERT_TRUE(w.has_value()) << config;
    EXPECT_GT(w->measured_share, 0.0) << config;
    EXPECT_LE(w->measured_share, 1.0) << config;
  }
}

// The GEMV's k-parts configs as the model sees them: 8 weight rows per warp, one warp per part
// working (at most the row tile's warps: one of each of four row tiles in w32); and in W8A8 the
// four-chain tile's CTAs quantize x themselves, where the 8-row tiles take the quantize kernel's.
TEST(BatchInvariantSelection, TheModelSeesTheGemvChains) {
  const Registry r(builtin_kernels(), TunedTable{}, Environment::from({}));
  const Kernel& gemv = kernel_named(r, "gemv");
  const Kernel& a16 = kernel_named(r, "gemv_a16");
  for (const std::int64_t k : {2048, 6144, 14336}) {
    const LinearShape shape{1, 2560, k};
    const int parts = device::batch_invariant_parts(static_cast<int>(k));
    const auto eight = gemv.work_shape(shape, "w8_t8_kwarps4_st6_kparts");
    const auto sixteen_tokens = gemv.work_shape(shape, "w8_t16_kwarps4_st6_kparts");
    // Four one-warp 8-row tiles: every warp chains all the parts of its rows.
    const auto four_chains = gemv.work_shape(shape, "w32_t8_st6_kparts");
    ASSERT_TRUE(eight.has_value() && sixteen_tokens.has_value() && four_chains.has_value()) << k;
    EXPECT_EQ(eight->rows, 8) << k;
    EXPECT_EQ(eight->tokens, 8) << k;
    EXPECT_EQ(eight->consumer_warps, std::min(4, parts)) << k;
    EXPECT_EQ(sixteen_tokens->rows, 8) << k;
    EXPECT_EQ(sixteen_tokens->tokens, 16) << k;
    EXPECT_EQ(four_chains->rows, 32) << k;
    EXPECT_EQ(four_chains->tokens, 8) << k;
    EXPECT_EQ(four_chains->consumer_warps, 4) << k;
    EXPECT_TRUE(four_chains->unscaled_chain) << k;
    EXPECT_EQ(eight->engine, detail::WorkShape::Engine::kMmaChained);
    EXPECT_EQ(four_chains->engine, detail::WorkShape::Engine::kMmaChained);
    // The scaled domain: tiles of one token tile, priced at its own rate, in both modes.
    EXPECT_TRUE(eight->unscaled_chain) << k;
    EXPECT_FALSE(sixteen_tokens->unscaled_chain) << k;
    EXPECT_TRUE(a16.work_shape(shape, "w8_t8_kwarps4_st6_kparts")->unscaled_chain) << k;
    // Each CTA stages its tokens as 16-bit rows in both modes, so a k-parts tile costs more per
    // token in W8A16 too (priced flat, the mode took it at M = 4 at 1.15-1.44x the prefill
    // kernel's time); the default W8A16 configs read x as it is.
    EXPECT_TRUE(eight->quantizes_tokens) << k;
    EXPECT_TRUE(a16.work_shape(shape, "w8_t8_kwarps4_st6_kparts")->quantizes_tokens) << k;
    EXPECT_FALSE(a16.work_shape(shape, "w16_t8_kwarps8")->quantizes_tokens) << k;
    const detail::DeviceRates rates;
    auto a16_seconds = [&](std::int64_t m) {
      const LinearShape at_m{m, shape.n, shape.k};
      return detail::estimated_seconds(*a16.work_shape(at_m, "w8_t8_kwarps4_st6_kparts"),
                                       detail::ActivationPass::kNone, at_m, rates);
    };
    EXPECT_GT(a16_seconds(4), a16_seconds(1)) << k;
  }
  Problem problem;
  problem.shape = {1, 2560, 6144};
  problem.sms = 132;
  problem.x_self_quantizable = true;
  // The four-chain k-parts tile quantizes a bf16 or fp16 activation itself, into the scaled
  // domain, as the default mode's configs do (no pass of the linear's); the 8-row k-parts tiles
  // of four K warps take the quantize kernel's output.
  EXPECT_EQ(gemv.plan(problem, "w32_t8_st6_kparts").activation, ActivationForm::kUnquantized);
  EXPECT_EQ(gemv.plan(problem, "w16_t8_kwarps8").activation, ActivationForm::kUnquantized);
  for (const char* config : {"w8_t8_kwarps4_st6_kparts", "w8_t16_kwarps4_st6_kparts"}) {
    EXPECT_EQ(gemv.plan(problem, config).activation, ActivationForm::kQuantized) << config;
  }
  // Where an SM's CTAs would quantize more than 20,480 elements between them (10240 x 5120 at
  // M = 16: five CTAs an SM, each quantizing 8 tokens of K = 5120), the four-chain tile takes
  // the quantize kernel's output too.
  problem.shape = {16, 10240, 5120};
  EXPECT_EQ(gemv.plan(problem, "w32_t8_st6_kparts").activation, ActivationForm::kQuantized);
  EXPECT_EQ(gemv.plan(problem, "w16_t8_kwarps8").activation, ActivationForm::kUnquantized);
  problem.shape = {1, 6144, 6144};
  problem.x_self_quantizable = false;  // rows not 16-byte aligned: the quantize kernel first
  EXPECT_EQ(gemv.plan(problem, "w32_t8_st6_kparts").activation, ActivationForm::kQuantized);
  problem.shape = {1, 2560, 6144};
  problem.x_self_quantizable = true;
  problem.operand = ActivationOperand::kBf16;
  EXPECT_EQ(a16.plan(problem, "w8_t8_kwarps4_st6_kparts").activation, ActivationForm::kAsIs);
}

// The four-chain GEMV tile at one token: on a layer whose K is one part its four one-warp chains
// stage the token once and fill the SM's CTA slots four chains at a time, so the model prices it
// below the 8-row tile (o_proj at M = 1 in W8A16 on the H200: 1.49x the default mode's time,
// 1.60x on the 8-row tile); on layers of two or more parts each of its warps chains every part in
// turn, and the model prices it above (Qwen3-32B qkv at M = 1: ~1.2x the 8-row tile's time). The
// SM's chained throughput and each CTA's fixed cost rank them: without them the two were priced
// alike on one-part layers and the four-chain tile below on Qwen3-32B qkv.
TEST(BatchInvariantSelection, OnePartLayersTakeFourChainsACtaAtOneToken) {
  const Registry r(builtin_kernels(), TunedTable{}, Environment::from({}));
  for (const std::string_view name : {"gemv", "gemv_a16"}) {
    const Kernel& gemv = kernel_named(r, name);
    const ActivationOperand operand =
        name == "gemv" ? ActivationOperand::kMx : ActivationOperand::kBf16;
    for (const auto& [n, k] : {std::pair<std::int64_t, std::int64_t>{6144, 2048},
                               {5120, 2048},
                               {6144, 3072},
                               {2560, 6144},
                               {6144, 6144},
                               {10240, 5120}}) {
      const LayerDescription layer = invariant_layer(n, k, operand);
      const auto four = estimated_call_us(gemv, "w32_t8_st6_kparts", layer, 1, kH200);
      const auto one = estimated_call_us(gemv, "w8_t8_kwarps4_st6_kparts", layer, 1, kH200);
      ASSERT_TRUE(four && one) << name << " " << n << " x " << k;
      if (device::batch_invariant_parts(static_cast<int>(k)) == 1) {
        EXPECT_LT(*four, *one) << name << " " << n << " x " << k;
      } else {
        EXPECT_GT(*four, *one) << name << " " << n << " x " << k;
      }
    }
  }
  // The measured one-part layer in W8A16 runs on it.
  const LayerSelection s = r.select(invariant_layer(6144, 2048, ActivationOperand::kBf16), kH200);
  const Dispatch d = r.dispatch(s, kH200, 1);
  EXPECT_EQ(d.kernel->name(), "gemv_a16");
  EXPECT_EQ(d.config, "w32_t8_st6_kparts") << d.why;
}

// Random layers in each activation form and alignment, every M from 1 to 20000: one K order per
// layer (its kernel's, or where the prefill kernel claims it, also the GEMV's k-parts configs,
// which join it), configs that keep the order and can run the call, and for 16-byte rows the
// tensor-core kernel of the form (fp16 x cannot fold scales exactly: the generic kernel).
TEST(BatchInvariantSelection, EveryCallOfALayerRunsOneOrderOnConfigsThatKeepIt) {
  const Registry r(builtin_kernels(), Registry::global().table(), Environment::from({}));
  auto rng = make_rng();
  std::uniform_int_distribution<std::int64_t> n_of(1, 30000), k_blocks(1, 900);
  std::uniform_int_distribution<int> alignment_of(0, 4);
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {2560, 6144}, {6144, 2048}, {4096, 14336}, {5120, 25600}, {200, 1024}, {1, 32}};
  for (int i = 0; i < 120; ++i) shapes.emplace_back(n_of(rng), 32 * k_blocks(rng));
  for (const auto& [n, k] : shapes) {
    for (const ActivationOperand operand :
         {ActivationOperand::kMx, ActivationOperand::kBf16, ActivationOperand::kF16}) {
      LayerDescription l = invariant_layer(n, k, operand);
      l.alignment = 1 << alignment_of(rng);
      l.scale_alignment = l.alignment >= 4 ? 4 : l.alignment;
      SCOPED_TRACE(::testing::Message()
                   << n << " x " << k << ", operand " << static_cast<int>(operand) << ", "
                   << l.alignment << "-byte rows");
      const LayerSelection s = r.select(l, kH200);
      ASSERT_NE(s.kernel, nullptr);
      // Misaligned rows leave only the kernels of last resort, as in the default mode.
      if (l.alignment >= 16) {
        EXPECT_EQ(s.kernel->name(), operand == ActivationOperand::kMx     ? "prefill"
                                    : operand == ActivationOperand::kBf16 ? "prefill_a16"
                                                                          : "generic_a16");
      }
      for (const std::int64_t m : kMs) {
        const Dispatch d = r.dispatch(s, kH200, m);
        ASSERT_NE(d.kernel, nullptr);
        ASSERT_TRUE(d.kernel == s.kernel || d.kernel->k_order_family() == s.kernel->name())
            << "M = " << m << ": " << d.kernel->name() << ", " << d.why;
        EXPECT_TRUE(d.kernel->keeps_k_order(d.config, k)) << d.config << " at M = " << m;
        EXPECT_TRUE(d.kernel->can_run(m, k, d.config).ok()) << d.config << " at M = " << m;
        EXPECT_TRUE(d.why.starts_with("batch-invariant")) << d.why;
      }
    }
  }
}

// The default mode of the same layers still runs a GEMV config that splits K its own way at one
// token: the mode is what restricts the choice (to configs that keep the K order, GEMV k-parts
// configs among them).
TEST(BatchInvariantSelection, TheDefaultModeOfTheSameLayerIsUnrestricted) {
  const Registry& r = Registry::global();
  LayerDescription l = invariant_layer(2560, 6144, ActivationOperand::kMx);
  const Dispatch invariant = r.dispatch(r.select(l, kH200), kH200, 1);
  EXPECT_TRUE(invariant.kernel->keeps_k_order(invariant.config, 6144)) << invariant.config;
  l.batch_invariant = false;
  const Dispatch unrestricted = r.dispatch(r.select(l, kH200), kH200, 1);
  EXPECT_EQ(unrestricted.kernel->name(), "gemv");
  EXPECT_FALSE(unrestricted.kernel->keeps_k_order(unrestricted.config, 6144))
      << unrestricted.config;
}

// A shipped row is taken only where it names the invariant kernel and a config that keeps the
// order; other rows (the GEMV's, split configs) give way to the cost model's choice among the
// configs that keep it.
TEST(BatchInvariantSelection, TunedRowsServeOnlyWhereTheyKeepTheOrder) {
  const Registry& r = Registry::global();
  ASSERT_FALSE(r.table().rows().empty());
  int taken = 0, passed_over = 0;
  for (const auto& [key, value] : r.table().rows()) {
    const ActivationOperand operand =
        contains(value.kernel, "_a16") ? ActivationOperand::kBf16 : ActivationOperand::kMx;
    const LayerSelection s = r.select(invariant_layer(key.n, key.k, operand), kH200);
    ASSERT_NE(s.kernel, nullptr);
    const Dispatch d = r.dispatch(s, kH200, key.m);
    const bool keeps =
        value.kernel == s.kernel->name() && s.kernel->keeps_k_order(value.config, key.k);
    SCOPED_TRACE(value.source + ": " + value.kernel + "/" + value.config + " -> " + d.why);
    EXPECT_TRUE(d.kernel->keeps_k_order(d.config, key.k));
    if (keeps) {
      EXPECT_EQ(d.config, value.config);
      EXPECT_THAT(d.why, HasSubstr("tuned row"));
      ++taken;
    } else {
      EXPECT_THAT(d.why, Not(HasSubstr("tuned row")));
      ++passed_over;
    }
  }
  EXPECT_GT(taken, 0);
  EXPECT_GT(passed_over, 0);
}

// Neither a forced backend that keeps no order nor the cost model switched off breaks the mode:
// the first gives way with a warning that says why, the second takes a config that keeps it.
TEST(BatchInvariantSelection, TheEnvironmentCannotBreakTheMode) {
  const Registry& global = Registry::global();
  const Registry forced(builtin_kernels(), global.table(),
                        Environment::from({{"MXLINEAR_BACKEND", "gemv"}}));
  const LayerSelection s =
      forced.select(invariant_layer(2560, 6144, ActivationOperand::kMx), kH200);
  ASSERT_NE(s.kernel, nullptr);
  EXPECT_EQ(s.kernel->name(), "prefill");
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_THAT(s.warnings[0], HasSubstr("batch-invariant"));
  const Registry no_model(builtin_kernels(), global.table(),
                          Environment::from({{"MXLINEAR_COST_MODEL", "0"}}));
  for (const std::int64_t n : {2560, 1000, 4096}) {
    const LayerSelection t =
        no_model.select(invariant_layer(n, 14336, ActivationOperand::kBf16), kH200);
    for (const std::int64_t m : kMs) {
      const Dispatch d = no_model.dispatch(t, kH200, m);
      ASSERT_EQ(d.kernel, t.kernel);
      EXPECT_TRUE(d.kernel->keeps_k_order(d.config, 14336)) << d.config << " at M = " << m;
      EXPECT_TRUE(d.kernel->can_run(m, 14336, d.config).ok()) << d.config << " at M = " << m;
    }
  }
}

// linear_with() in the mode refuses a config that keeps no order, naming it.
TEST(BatchInvariantSelection, RunnableRefusesAConfigThatCutsK) {
  const Registry& r = Registry::global();
  const Kernel& prefill = kernel_named(r, "prefill");
  const LayerDescription l = invariant_layer(2560, 6144, ActivationOperand::kMx);
  const CallVerdict v = r.runnable(prefill, "w64_t64_st4_overlap_split2", l, 64, kH200);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.argument, "config");
  EXPECT_EQ(v.code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(v.reason, HasSubstr("does not keep a fixed K order"));
  // K = 6144 has three parts: an unsplit tile that sums them in one chain cuts them wrongly too.
  EXPECT_FALSE(r.runnable(prefill, "w64_t64_st4_overlap", l, 64, kH200).ok());
  EXPECT_TRUE(r.runnable(prefill, "w64_t64_st4_overlap_split3", l, 64, kH200).ok());
  EXPECT_TRUE(r.runnable(prefill, "w64_t64_st4_overlap_kparts", l, 64, kH200).ok());
  // One part (K = 2048): every unsplit tile.
  EXPECT_TRUE(r.runnable(prefill, "w64_t64_st4_overlap",
                         invariant_layer(6144, 2048, ActivationOperand::kMx), 64, kH200)
                  .ok());
}

TEST(BatchInvariantSelection, SwitchFromTheEnvironment) {
  EXPECT_FALSE(Environment::from({}).batch_invariant);
  EXPECT_TRUE(Environment::from({{"MXLINEAR_BATCH_INVARIANT", "1"}}).batch_invariant);
  EXPECT_FALSE(Environment::from({{"MXLINEAR_BATCH_INVARIANT", "0"}}).batch_invariant);
  const Environment bad = Environment::from({{"MXLINEAR_BATCH_INVARIANT", "yes"}});
  EXPECT_FALSE(bad.batch_invariant);
  const Registry r(builtin_kernels(), TunedTable{}, bad);
  ASSERT_EQ(r.warnings().size(), 1u);
  EXPECT_THAT(r.warnings()[0], HasSubstr("MXLINEAR_BATCH_INVARIANT is 'yes'; expected 1 or 0"));
}

// The selection report says which mode it describes, and names no config that cuts K otherwise
// than in its parts (the reference model's K have one part or, at K = 6144, three): no GEMV
// config but the k-parts ones.
TEST(BatchInvariantSelection, TheReportSaysSo) {
  const Registry& r = Registry::global();
  const auto rows = r.report(builtin_model("minimax-m3.1-flash-tp4"), kH200, DType::kBF16,
                             ActivationOperand::kMx, true);
  const std::string text = format_report(rows, kH200);
  EXPECT_THAT(text, HasSubstr("batch-invariant mode"));
  const std::string gemv_cutting_k =
      "gemv[a-z0-9_]*/w[0-9]+_t[0-9]+_kwarps[0-9]+(_st[0-9]+)?(_split[0-9]+)?(_waited|_early)?"
      "[^a-z0-9_]";
  EXPECT_THAT(text, Not(::testing::ContainsRegex(gemv_cutting_k)));
  EXPECT_THAT(text, Not(::testing::ContainsRegex("decode[a-z0-9_]*/")));
  EXPECT_THAT(text, Not(::testing::ContainsRegex("_split[^3]")));
  EXPECT_THAT(text, Not(HasSubstr("_alt")));
  EXPECT_THAT(text, Not(HasSubstr("_streamk")));
  const std::string unrestricted =
      format_report(r.report(builtin_model("minimax-m3.1-flash-tp4"), kH200, DType::kBF16), kH200);
  EXPECT_THAT(unrestricted, Not(HasSubstr("batch-invariant")));
  EXPECT_THAT(unrestricted, ::testing::ContainsRegex(gemv_cutting_k));  // the check can fail
}

}  // namespace
}  // namespace mxlinear::test
