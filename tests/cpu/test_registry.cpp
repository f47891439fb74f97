// Selection on a described (fake) device: no GPU needed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>

#include "cpu/registry_test_kernels.hpp"
#include "host/registry/registry.hpp"
#include "select_json.hpp"
#include "support/random.hpp"

namespace mxlinear::test {
namespace {

using ::testing::HasSubstr;

const DeviceDescription kH200 = DeviceDescription::parse("sm_90a:132");

std::vector<std::shared_ptr<const Kernel>> kernels() {
  return {
      std::make_shared<FakeKernel>("tuned", true, std::vector<std::string>{"t64", "t128"}),
      std::make_shared<FakeKernel>("general", false, std::vector<std::string>{"g1", "g2"}),
      std::make_shared<FakeKernel>("reference", false, std::vector<std::string>{"fp64"}, "cpu")};
}

// Makes the fake "reference" kernel accept any device, like the real one.
std::vector<std::shared_ptr<const Kernel>> kernels_with_fallback() {
  auto k = kernels();
  k.back() =
      std::make_shared<FakeKernel>("reference", false, std::vector<std::string>{"fp64"}, "sm_90a");
  return k;
}

TableContext context_for(const std::vector<std::shared_ptr<const Kernel>>& ks) {
  TableContext c = table_context(ks);
  return c;
}

std::string row(const std::string& m, const std::string& kernel, const std::string& config,
                std::int64_t n = 2560, std::int64_t k = 6144, const std::string& us = "10.5") {
  const TableContext c = context_for(kernels());
  return "sm_90a,132," + std::to_string(n) + "," + std::to_string(k) + "," + m + "," + kernel +
         "," + config + "," + us + ",0.2," + c.library_version + "," + c.cuda_version + "\n";
}

Registry make(const std::string& table_text, std::map<std::string, std::string> env = {}) {
  auto ks = kernels_with_fallback();
  TunedTable table;
  table.add(table_text, "test.csv", context_for(ks));
  return Registry(ks, std::move(table), Environment::from(env));
}

LayerDescription layer(std::int64_t n, std::int64_t k) {
  LayerDescription l;
  l.n = n;
  l.k = k;
  return l;
}

TEST(Registry, TunedShapePicksTheTunedKernel) {
  const Registry r = make(row("64", "tuned", "t64"));
  const LayerSelection s = r.select(layer(2560, 6144), kH200);
  ASSERT_NE(s.kernel, nullptr);
  EXPECT_EQ(s.kernel->name(), "tuned");
  EXPECT_TRUE(s.rejected.empty());
}

TEST(Registry, UntunedShapeFallsThroughWithTheReason) {
  const Registry r = make(row("64", "tuned", "t64"));
  const LayerSelection s = r.select(layer(6144, 768), kH200);
  ASSERT_NE(s.kernel, nullptr);
  EXPECT_EQ(s.kernel->name(), "general");
  ASSERT_EQ(s.rejected.size(), 1u);
  EXPECT_EQ(s.rejected[0].kernel, "tuned");
  EXPECT_THAT(s.rejected[0].reason, HasSubstr("no tuned rows of tuned for 6144 x 768"));
}

TEST(Registry, TunedRowsOfAnotherSmCountDoNotClaimTheLayer) {
  const Registry r = make(row("64", "tuned", "t64"));
  const LayerSelection s = r.select(layer(2560, 6144), DeviceDescription::parse("sm_90a:114"));
  ASSERT_NE(s.kernel, nullptr);
  EXPECT_EQ(s.kernel->name(), "general");
}

TEST(Registry, DisabledKernelIsSkipped) {
  const Registry r = make(row("64", "tuned", "t64"), {{"MXLINEAR_DISABLED_KERNELS", "tuned"}});
  const LayerSelection s = r.select(layer(2560, 6144), kH200);
  EXPECT_EQ(s.kernel->name(), "general");
  EXPECT_THAT(s.rejected[0].reason, HasSubstr("MXLINEAR_DISABLED_KERNELS"));
}

TEST(Registry, UnknownKernelNamesInTheEnvironmentWarnWithTheValidNames) {
  const Registry r =
      make("", {{"MXLINEAR_DISABLED_KERNELS", "tuned, nope"}, {"MXLINEAR_BACKEND", "fast"}});
  ASSERT_EQ(r.warnings().size(), 2u);
  EXPECT_THAT(r.warnings()[0], HasSubstr("'nope'"));
  EXPECT_THAT(r.warnings()[0], HasSubstr("tuned, general, reference"));
  EXPECT_THAT(r.warnings()[1], HasSubstr("'fast'"));
  EXPECT_EQ(r.environment().backend, "auto");
}

TEST(Registry, ForcedBackendGoesFirst) {
  const Registry r = make(row("64", "tuned", "t64"), {{"MXLINEAR_BACKEND", "general"}});
  const LayerSelection s = r.select(layer(2560, 6144), kH200);
  EXPECT_EQ(s.kernel->name(), "general");
  EXPECT_TRUE(s.warnings.empty());
  // A forced backend also overrides tuned rows that name another kernel.
  const Dispatch d = r.dispatch(s, kH200, 64);
  EXPECT_EQ(d.kernel->name(), "general");
  EXPECT_EQ(d.config, "g1");
}

TEST(Registry, ForcedBackendThatCannotImplementFallsBackWithAWarning) {
  // The tuned kernel has no rows for this shape, so forcing it must not fail the layer.
  const Registry r = make(row("64", "tuned", "t64"), {{"MXLINEAR_BACKEND", "tuned"}});
  const LayerSelection s = r.select(layer(6144, 768), kH200);
  ASSERT_NE(s.kernel, nullptr);
  EXPECT_EQ(s.kernel->name(), "general");
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_THAT(s.warnings[0], HasSubstr("MXLINEAR_BACKEND=tuned cannot run layer 6144 x 768"));
  EXPECT_THAT(s.warnings[0], HasSubstr("using automatic selection: general"));
}

TEST(Registry, EveryKernelRefusingLeavesNoKernelAndAllReasons) {
  const Registry r = make("", {{"MXLINEAR_DISABLED_KERNELS", "general,reference"}});
  const LayerSelection s = r.select(layer(6144, 768), kH200);
  EXPECT_EQ(s.kernel, nullptr);
  EXPECT_EQ(s.rejected.size(), 3u);
}

TEST(Registry, PerMBucketDispatchExactRowsWinAndRowsMayPickTheGeneralKernel) {
  const std::string table = row("1", "general", "g2") + row("64", "tuned", "t64") +
                            row("128", "tuned", "t128") + row("=48", "tuned", "t128");
  const Registry r = make(table);
  const LayerSelection s = r.select(layer(2560, 6144), kH200);
  ASSERT_EQ(s.kernel->name(), "tuned");
  auto at = [&](std::int64_t m) {
    const Dispatch d = r.dispatch(s, kH200, m);
    return std::string(d.kernel->name()) + "/" + d.config;
  };
  EXPECT_EQ(at(1), "general/g2");  // bucket 1 is routed to the general kernel
  EXPECT_EQ(at(33), "tuned/t64");  // bucket 64
  EXPECT_EQ(at(64), "tuned/t64");
  EXPECT_EQ(at(48), "tuned/t128");    // the exact row beats bucket 64
  EXPECT_EQ(at(65), "tuned/t128");    // bucket 128
  EXPECT_EQ(at(4096), "tuned/t128");  // no bucket 4096: the nearest below
  EXPECT_EQ(at(2), "general/g2");     // no bucket 2: the nearest below is bucket 1
}

// The fake tuned kernel with a cost model: t64 a 64 x 64 tile, t128 a 128 x 128 one with two
// consumer warpgroups; the general kernel has none.
Registry make_modelled(const std::string& table_text, std::map<std::string, std::string> env = {},
                       std::int64_t max_k = 1 << 20) {
  auto ks = kernels_with_fallback();
  auto tuned = std::make_shared<FakeKernel>("tuned", true, std::vector<std::string>{"t64", "t128"},
                                            "sm_90a", max_k);
  detail::WorkShape w;
  w.rows = 64;
  w.tokens = 64;
  tuned->set_work("t64", w);
  w.rows = 128;
  w.tokens = 128;
  w.consumer_groups = 2;
  tuned->set_work("t128", w);
  ks.front() = tuned;
  TunedTable table;
  table.add(table_text, "test.csv", context_for(ks));
  return Registry(ks, std::move(table), Environment::from(env));
}

std::string dispatched(const Registry& r, const LayerDescription& l, std::int64_t m = 64,
                       const DeviceDescription& device = kH200) {
  const Dispatch d = r.dispatch(r.select(l, device), device, m);
  return std::string(d.kernel->name()) + "/" + d.config + " (" + d.why + ")";
}

// A call no tuned row covers takes the config the cost model rates fastest, from any kernel
// with a model: the small tile where a few tokens leave the large one's SMs idle, the large one
// where it does less work per flop. The layer's own rows still win where they exist.
TEST(Registry, UntunedCallsTakeTheConfigTheCostModelRatesFastest) {
  const Registry r = make_modelled(row("64", "tuned", "t64"));
  const LayerSelection s = r.select(layer(3000, 6144), kH200);
  ASSERT_EQ(s.kernel->name(), "general");  // the tuned kernel still claims only its own shapes
  const Dispatch at32 = r.dispatch(s, kH200, 32);
  EXPECT_EQ(std::string(at32.kernel->name()) + "/" + at32.config, "tuned/t64");
  EXPECT_THAT(at32.why, HasSubstr("cost model, "));
  EXPECT_GT(at32.estimated_us, 0);
  const Dispatch at4096 = r.dispatch(s, kH200, 4096);
  EXPECT_EQ(at4096.config, "t128");
  // A choice is made once and kept: the same call gets the same answer.
  const Dispatch again = r.dispatch(s, kH200, 32);
  EXPECT_EQ(again.config, at32.config);
  EXPECT_EQ(again.why, at32.why);
  EXPECT_EQ(again.estimated_us, at32.estimated_us);
  // The same shape under another switch is a registry of its own, priced afresh.
  EXPECT_THAT(dispatched(make_modelled(row("64", "tuned", "t64"), {{"MXLINEAR_COST_MODEL", "0"}}),
                         layer(3000, 6144), 32),
              HasSubstr("default config"));
  EXPECT_GT(at4096.estimated_us, at32.estimated_us);
  // The tuned shape keeps its row for the row's bucket; an M of another bucket takes the cost
  // model's choice (a row tuned for 64 tokens may run 4096 badly), and only without the model
  // the nearest bucket's row.
  EXPECT_EQ(dispatched(r, layer(2560, 6144), 64), "tuned/t64 (tuned row test.csv:1)");
  EXPECT_EQ(r.dispatch(r.select(layer(2560, 6144), kH200), kH200, 64).estimated_us, 0);
  EXPECT_THAT(dispatched(r, layer(2560, 6144), 4096), HasSubstr("cost model"));
  EXPECT_EQ(dispatched(make_modelled(row("64", "tuned", "t64"), {{"MXLINEAR_COST_MODEL", "0"}}),
                       layer(2560, 6144), 4096),
            "tuned/t64 (tuned row test.csv:1 (nearest bucket))");
}

// A tuned kernel whose config t128 cannot run K above 4096 (its shared memory, say).
class SmallKConfigKernel : public FakeKernel {
 public:
  using FakeKernel::FakeKernel;
  Verdict can_run(std::int64_t, std::int64_t k, std::string_view config) const override {
    if (config == "t128" && k > 4096) return {"t128 needs K <= 4096"};
    return {};
  }
};

// Rows and the cost model never hand a call to a config that cannot run its K.
TEST(Registry, RowsAndTheCostModelNameOnlyConfigsThatCanRunTheCall) {
  auto ks = kernels_with_fallback();
  auto tuned = std::make_shared<SmallKConfigKernel>(
      "tuned", true, std::vector<std::string>{"t64", "t128"}, "sm_90a");
  detail::WorkShape w;
  w.rows = 128;
  w.tokens = 128;
  w.consumer_groups = 2;
  tuned->set_work("t128", w);  // the model knows only t128
  ks.front() = tuned;
  TunedTable t;
  t.add(row("64", "tuned", "t128") + row("64", "tuned", "t128", 2560, 3072), "test.csv",
        context_for(ks));
  const Registry r(ks, t, Environment{});
  EXPECT_EQ(dispatched(r, layer(2560, 3072)), "tuned/t128 (tuned row test.csv:2)");
  // Its own row cannot run K = 6144, nor can the one modelled config: the default config.
  EXPECT_EQ(dispatched(r, layer(2560, 6144)), "tuned/t64 (default config)");
  EXPECT_THAT(dispatched(r, layer(3000, 4096), 4096), HasSubstr("tuned/t128 (cost model"));
  EXPECT_EQ(dispatched(r, layer(3000, 8192)), "general/g1 (default config)");
}

// A forced backend that cannot claim the layer narrows nothing: its calls take what automatic
// selection gives them (here the cost model's choice among every kernel), as the warning says.
TEST(Registry, ForcedBackendThatCannotClaimTheLayerLeavesItsCallsAutomatic) {
  const std::string table = row("64", "tuned", "t64");
  const std::string automatic = dispatched(make_modelled(table, {}), layer(3000, 6144));
  ASSERT_THAT(automatic, HasSubstr("tuned/"));
  ASSERT_THAT(automatic, HasSubstr("(cost model"));
  const Registry forced = make_modelled(table, {{"MXLINEAR_BACKEND", "tuned"}});
  const LayerSelection s = forced.select(layer(3000, 6144), kH200);
  ASSERT_NE(s.kernel, nullptr);
  EXPECT_EQ(s.kernel->name(), "general");
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_THAT(s.warnings[0], HasSubstr("using automatic selection: general"));
  EXPECT_EQ(dispatched(forced, layer(3000, 6144)), automatic);
}

TEST(Registry, CostModelNeverOverridesWhatTheLayerOrTheEnvironmentRules) {
  const std::string table = row("64", "tuned", "t64");
  // The modelled kernel cannot implement this layer.
  EXPECT_EQ(dispatched(make_modelled(table, {}, 6144), layer(2560, 8192)),
            "general/g1 (default config)");
  // The modelled kernel is disabled, or another backend is forced.
  EXPECT_EQ(
      dispatched(make_modelled(table, {{"MXLINEAR_DISABLED_KERNELS", "tuned"}}), layer(3000, 6144)),
      "general/g1 (default config)");
  EXPECT_EQ(dispatched(make_modelled(table, {{"MXLINEAR_BACKEND", "general"}}), layer(3000, 6144)),
            "general/g1 (default config)");
  // Or the model is switched off.
  EXPECT_EQ(dispatched(make_modelled(table, {{"MXLINEAR_COST_MODEL", "0"}}), layer(3000, 6144)),
            "general/g1 (default config)");
  // A value that is neither 1 nor 0 is a warning and leaves the model on.
  const Registry odd = make_modelled(table, {{"MXLINEAR_COST_MODEL", "no"}});
  ASSERT_EQ(odd.warnings().size(), 1u);
  EXPECT_THAT(odd.warnings()[0], HasSubstr("MXLINEAR_COST_MODEL is 'no'; expected 1 or 0"));
  EXPECT_EQ(dispatched(odd, layer(3000, 6144)).substr(0, 9), "tuned/t64");
  // Rows of another SM count are nothing to this device; the model prices its own SMs.
  const DeviceDescription h100_pcie = DeviceDescription::parse("sm_90a:114");
  EXPECT_THAT(dispatched(make_modelled(table), layer(2560, 6144), 64, h100_pcie),
              HasSubstr("(cost model"));
}

TEST(Registry, DisabledKernelNamedByARowIsNotUsed) {
  const Registry r = make(row("1", "general", "g2") + row("64", "tuned", "t64"),
                          {{"MXLINEAR_DISABLED_KERNELS", "general"}});
  const LayerSelection s = r.select(layer(2560, 6144), kH200);
  const Dispatch d = r.dispatch(s, kH200, 1);
  EXPECT_EQ(d.kernel->name(), "tuned");
  EXPECT_EQ(d.why, "default config");
}

TEST(Registry, ReportForTheBuiltinModelOnADescribedH200) {
  const Registry r = make(row("64", "tuned", "t64") + row("64", "tuned", "t64", 1536, 6144));
  const auto rows = r.report(builtin_model("minimax-m3.1-flash-tp4"), kH200, DType::kBF16);
  ASSERT_EQ(rows.size(), 9u);
  std::map<std::string, std::string> chosen;
  for (const auto& row_ : rows) chosen[row_.layer.name] = row_.selection.kernel->name();
  EXPECT_EQ(chosen["self_attn.qkv_proj"], "tuned");
  EXPECT_EQ(chosen["shared_experts.gate_up_proj"], "tuned");
  EXPECT_EQ(chosen["self_attn.o_proj"], "general");
  EXPECT_EQ(chosen["draft.fused_ctx_kv_proj"], "general");
  const std::string text = format_report(rows, kH200);
  EXPECT_THAT(text, HasSubstr("self_attn.qkv_proj"));
  EXPECT_THAT(text,
              HasSubstr("tuned: no tuned rows of tuned for 6144 x 2048 on sm_90a with 132 SMs"));
  const std::string json = cli::select_report_json(rows, kH200);
  EXPECT_THAT(json, HasSubstr("\"kernel\": \"tuned\""));
  EXPECT_THAT(json, HasSubstr("\"count\": 60"));
}

TEST(Registry, BuiltinKernelsOnTheCpuAndOnADescribedH200) {
  const auto ks = builtin_kernels();
  Registry r(ks, TunedTable{}, Environment{});
  const auto model = builtin_model("minimax-m3.1-flash-tp4");
  for (const auto& row_ : r.report(model, DeviceDescription::parse("cpu"), DType::kBF16)) {
    EXPECT_EQ(row_.selection.kernel->name(), "reference");
    EXPECT_THAT(row_.selection.rejected.at(0).reason, HasSubstr("needs a GPU"));
  }
  // No table: the generic kernel claims every layer; the cost model hands each M to a
  // tensor-core kernel, or, switched off, leaves the generic kernel its default configs.
  const Registry unmodelled(ks, TunedTable{}, Environment::from({{"MXLINEAR_COST_MODEL", "0"}}));
  for (const auto& row_ : r.report(model, kH200, DType::kBF16)) {
    EXPECT_EQ(row_.selection.kernel->name(), "generic");
    EXPECT_EQ(r.dispatch(row_.selection, kH200, 1).kernel->name(), "gemv");
    EXPECT_EQ(r.dispatch(row_.selection, kH200, 8192).kernel->name(), "prefill");
    EXPECT_EQ(unmodelled.dispatch(row_.selection, kH200, 1).config,
              "w32_t16_warp16x16_kwarps4_st8");
    EXPECT_EQ(unmodelled.dispatch(row_.selection, kH200, 8192).config, "w128_t128_warp32x64_st4");
  }
  LayerDescription misaligned = layer(2560, 6144);
  misaligned.alignment = 4;
  const LayerSelection s = r.select(misaligned, kH200);
  EXPECT_EQ(s.kernel->name(), "reference");
  ASSERT_EQ(s.rejected.size(), 4u);
  // What a kernel cannot implement comes before whether it has tuned rows.
  EXPECT_EQ(s.rejected.at(0).kernel, "decode");
  EXPECT_EQ(s.rejected.at(1).kernel, "prefill");
  EXPECT_EQ(s.rejected.at(2).kernel, "gemv");
  for (int i = 0; i < 4; ++i) EXPECT_THAT(s.rejected.at(i).reason, HasSubstr("16-byte aligned"));
  // No table: the tuned kernels claim nothing.
  const LayerSelection aligned = r.select(layer(2560, 6144), kH200);
  EXPECT_THAT(aligned.rejected.at(0).reason, HasSubstr("no tuned rows of decode"));
}

// A tuned kernel claims a shape only through rows that name it; rows of another kernel for the
// same (N, K) do not make it claim the shape.
TEST(Registry, TunedKernelClaimsOnlyShapesWithItsOwnRows) {
  const auto ks = builtin_kernels();
  TunedTable table;
  const TableContext context = table_context(ks);
  ASSERT_EQ(ks.front()->name(), "decode");
  const std::string decode_config = ks.front()->configs().front();
  const auto stats = table.add(
      "arch,sms,n,k,m,kernel,config,us,error_ratio,mxlinear_version,cuda_version\n"
      "sm_90a,132,2560,6144,1,decode," +
          decode_config + ",5.0,0.5," + context.library_version + "," + context.cuda_version +
          "\n"
          "sm_90a,132,2560,6144,8192,generic,w128_t128_warp32x64_st4,1600,0.5," +
          context.library_version + "," + context.cuda_version +
          "\n"
          "sm_90a,132,6144,2048,1,generic,w32_t16_warp16x16_kwarps4_st8,15,0.5," +
          context.library_version + "," + context.cuda_version + "\n",
      "test", context);
  ASSERT_EQ(stats.accepted, 3) << ::testing::PrintToString(table.warnings());
  Registry r(ks, table, Environment{});
  const LayerSelection qkv = r.select(layer(2560, 6144), kH200);
  EXPECT_EQ(qkv.kernel->name(), "decode");
  EXPECT_EQ(r.dispatch(qkv, kH200, 1).config, decode_config);
  EXPECT_EQ(r.dispatch(qkv, kH200, 8192).kernel->name(), "generic");  // a row hands M over
  const LayerSelection o_proj = r.select(layer(6144, 2048), kH200);
  EXPECT_EQ(o_proj.kernel->name(), "generic");
  EXPECT_THAT(o_proj.rejected.at(0).reason, HasSubstr("no tuned rows of decode"));
  LayerDescription k_tail = layer(2560, 6144 - 32);
  const LayerSelection tail = r.select(k_tail, kH200);
  EXPECT_EQ(tail.kernel->name(), "generic");
  LayerDescription odd_scales = layer(2560, 6144);
  odd_scales.scale_alignment = 1;  // the decode kernel copies such scale rows bytewise
  EXPECT_EQ(r.select(odd_scales, kH200).kernel->name(), "decode");
}

// The shipped table (configs/, `mxlinear tune` on an H200, ranked as full linears from bf16)
// hands every seed layer on a 132-SM H200 to the kernel that measured fastest, and every row of
// it is accepted: W8A8 runs the gemv (which quantizes the activation itself) at M = 1, the gemv,
// decode or prefill kernel up to 8 tokens and prefill from 16; W8A16 runs the W8A16 gemv at
// M = 1 and prefill_a16 from 16.
TEST(Registry, ShippedTableHandsSeedLayersToGemvDecodeThenPrefill) {
  const Registry& r = Registry::global();
  EXPECT_TRUE(r.warnings().empty()) << ::testing::PrintToString(r.warnings());
  const auto model = builtin_model("minimax-m3.1-flash-tp4");
  for (const auto& row_ : r.report(model, kH200, DType::kBF16)) {
    SCOPED_TRACE(row_.layer.name);
    EXPECT_EQ(r.dispatch(row_.selection, kH200, 1).kernel->name(), "gemv");
    for (std::int64_t m : {2, 3, 4, 5, 8}) {
      EXPECT_THAT(std::string(r.dispatch(row_.selection, kH200, m).kernel->name()),
                  ::testing::AnyOf("gemv", "decode", "prefill"))
          << "M=" << m;
    }
    for (std::int64_t m : {16, 32, 64, 128, 256, 512, 700, 1024, 2048, 4096, 8192}) {
      EXPECT_EQ(r.dispatch(row_.selection, kH200, m).kernel->name(), "prefill") << "M=" << m;
    }
  }
  for (const auto& row_ : r.report(model, kH200, DType::kBF16, ActivationOperand::kBf16)) {
    SCOPED_TRACE(row_.layer.name + " W8A16");
    EXPECT_EQ(r.dispatch(row_.selection, kH200, 1).kernel->name(), "gemv_a16");
    for (std::int64_t m : {16, 64, 256, 1000, 4096, 8192}) {
      EXPECT_EQ(r.dispatch(row_.selection, kH200, m).kernel->name(), "prefill_a16") << "M=" << m;
    }
  }
}

// fp16 x in W8A16: the W8A16 gemv claims the layer by its rows of up to 8 tokens, and nothing
// modelled runs fp16 x beyond them (prefill_a16 takes bf16 only). Those calls run on the generic
// kernel, never on the gemv's rows or default config far outside the M it serves.
TEST(Registry, Fp16TokensBeyondTheGemvRunOnTheGenericKernel) {
  const Registry& r = Registry::global();
  for (const bool model_on : {true, false}) {
    const Registry reg(builtin_kernels(), r.table(),
                       Environment::from({{"MXLINEAR_COST_MODEL", model_on ? "1" : "0"}}));
    for (const auto& row_ : reg.report(builtin_model("minimax-m3.1-flash-tp4"), kH200, DType::kBF16,
                                       ActivationOperand::kF16)) {
      SCOPED_TRACE(row_.layer.name);
      EXPECT_EQ(row_.selection.kernel->name(), "gemv_a16");
      EXPECT_EQ(reg.dispatch(row_.selection, kH200, 1).kernel->name(), "gemv_a16");
      for (std::int64_t m : {16, 100, 1024, 8192}) {
        const Dispatch d = reg.dispatch(row_.selection, kH200, m);
        EXPECT_EQ(d.kernel->name(), "generic_a16") << "M=" << m << ": " << d.why;
      }
    }
  }
}

// Every shipped row names a config that can run its own shape at its M (the dispatch would
// silently pass over one that cannot).
TEST(Registry, EveryShippedRowsConfigCanRunItsShape) {
  const Registry& r = Registry::global();
  ASSERT_FALSE(r.table().rows().empty());
  for (const auto& [key, value] : r.table().rows()) {
    SCOPED_TRACE(value.source);
    const auto it = std::find_if(r.kernels().begin(), r.kernels().end(), [&](const auto& kernel) {
      return kernel->name() == value.kernel;
    });
    ASSERT_NE(it, r.kernels().end());
    const Kernel* k = it->get();
    const Verdict v = k->can_run(key.m, key.k, value.config);
    EXPECT_TRUE(v.ok()) << value.kernel << ": " << v.reason;
  }
}

// Over random layers on a described H200 with the shipped table, every call the dispatch makes
// (a layer's own row, a borrowed one or a default config) goes to a kernel that can implement
// the layer and a config that can run its K and M.
TEST(Registry, EveryDispatchOnRandomLayersNamesAConfigThatCanRunTheCall) {
  const Registry& r = Registry::global();
  auto rng = make_rng();
  std::uniform_int_distribution<std::int64_t> n_of(1, 20000), k_blocks(1, 1024);
  std::uniform_int_distribution<int> alignment_of(0, 4);
  for (int i = 0; i < 2000; ++i) {
    LayerDescription l = layer(n_of(rng), 32 * k_blocks(rng));
    l.alignment = 1 << alignment_of(rng);  // 1..16 bytes
    l.scale_alignment = l.alignment >= 4 ? 4 : l.alignment;
    SCOPED_TRACE(::testing::Message()
                 << l.n << " x " << l.k << ", " << l.alignment << "-byte rows");
    const LayerSelection s = r.select(l, kH200);
    ASSERT_NE(s.kernel, nullptr);
    for (std::int64_t m : {1, 2, 5, 8, 17, 32, 100, 128, 300, 512, 1000, 2048, 5000, 8192, 20000}) {
      const Dispatch d = r.dispatch(s, kH200, m);
      ASSERT_NE(d.kernel, nullptr);
      EXPECT_TRUE(d.kernel->can_implement(l).ok()) << d.kernel->name() << " at M = " << m;
      const Verdict v = d.kernel->can_run(m, l.k, d.config);
      EXPECT_TRUE(v.ok()) << d.kernel->name() << " at M = " << m << ": " << v.reason;
    }
  }
}

// Layers nobody tuned on an H200, the builtin kernels and the shipped table: every call goes to
// a tensor-core kernel (gemv, decode or prefill), long K and N not a multiple of 128 included.
TEST(Registry, CostModelGivesEveryUntunedCallATensorCoreConfig) {
  const Registry& r = Registry::global();
  auto rng = make_rng();
  std::uniform_int_distribution<std::int64_t> n_of(1, 65536), k_blocks(1, 2048);
  std::vector<std::pair<std::int64_t, std::int64_t>> layers = {
      {4096, 14336}, {2048, 28672}, {5120, 25600}, {1, 32}, {3000, 4096}, {1001, 2048}};
  for (int i = 0; i < 300; ++i) layers.emplace_back(n_of(rng), 32 * k_blocks(rng));
  for (const auto& [n, k] : layers) {
    SCOPED_TRACE(::testing::Message() << n << " x " << k);
    const LayerSelection s = r.select(layer(n, k), kH200);
    ASSERT_NE(s.kernel, nullptr);
    for (std::int64_t m : {1, 2, 7, 8, 16, 17, 31, 64, 100, 256, 257, 1000, 4096, 20000}) {
      const Dispatch d = r.dispatch(s, kH200, m);
      ASSERT_NE(d.kernel, nullptr);
      EXPECT_NE(d.kernel->name(), "generic") << "M = " << m << ": " << d.why;
      EXPECT_TRUE(d.kernel->can_run(m, k, d.config).ok()) << d.kernel->name() << "/" << d.config;
      if (d.why.rfind("cost model", 0) == 0) {
        EXPECT_GT(d.estimated_us, 0);
      }
    }
  }
  // The former cliff: a long-K down projection at M = 1000 runs the prefill kernel, as does the
  // M = 2048 call of 2560 x 16384, whose nearest tuned shape's tile cannot hold its scales.
  EXPECT_EQ(r.dispatch(r.select(layer(4096, 14336), kH200), kH200, 1000).kernel->name(), "prefill");
  EXPECT_EQ(r.dispatch(r.select(layer(2560, 16384), kH200), kH200, 2048).kernel->name(), "prefill");
  EXPECT_EQ(r.dispatch(r.select(layer(4096, 14336), kH200), kH200, 1).kernel->name(), "gemv");
  // The report marks the model's choices apart from tuned rows; its JSON gives the estimate.
  const auto rows =
      r.report({{"near_qkv", 3000, 4096, 1}, {"qkv", 2560, 6144, 1}}, kH200, DType::kBF16);
  const std::string text = format_report(rows, kH200);
  EXPECT_THAT(text, HasSubstr("~ = chosen by the cost model"));
  EXPECT_THAT(text, ::testing::ContainsRegex("M=1 gemv/[a-z0-9_]+~"));
  EXPECT_THAT(text, HasSubstr("M=1 gemv/w16_t8_kwarps8_early*"));
  EXPECT_THAT(cli::select_report_json(rows, kH200), HasSubstr("\"estimated_us\": "));
}

// estimated_call_us is what the model ranks by: the estimate the dispatch reports, and no
// config the model prices for that call (worth sweeping, or keeping the K order in the
// batch-invariant mode) rated lower; none for a config that cannot run the call, or for M < 1.
TEST(Registry, EstimatedCallUsIsWhatTheCostModelRanksBy) {
  const Registry& r = Registry::global();
  for (const bool invariant : {false, true}) {
    for (const auto& [n, k] : {std::pair<std::int64_t, std::int64_t>{3000, 6144}, {1001, 2048}}) {
      LayerDescription l = layer(n, k);
      l.batch_invariant = invariant;
      const LayerSelection s = r.select(l, kH200);
      for (const std::int64_t m : {1, 16, 128, 1000, 4096}) {
        SCOPED_TRACE(::testing::Message()
                     << n << " x " << k << ", M = " << m << (invariant ? ", batch-invariant" : ""));
        const Dispatch d = r.dispatch(s, kH200, m);
        ASSERT_NE(d.kernel, nullptr);
        ASSERT_THAT(d.why, HasSubstr("cost model")) << d.why;
        EXPECT_EQ(estimated_call_us(*d.kernel, d.config, l, m, kH200), d.estimated_us);
        int priced = 0;
        for (const auto& kernel : r.kernels()) {
          if (!kernel->is_supported(kH200).ok() || !kernel->can_implement(l).ok() ||
              (invariant && !in_k_order_of(*kernel, *s.kernel))) {
            continue;
          }
          for (const std::string& config : kernel->configs()) {
            if (invariant ? !kernel->keeps_k_order(config, k)
                          : !kernel->worth_sweeping(m, config)) {
              continue;
            }
            if (const auto us = estimated_call_us(*kernel, config, l, m, kH200)) {
              ++priced;
              EXPECT_GE(*us, d.estimated_us) << kernel->name() << "/" << config;
            }
          }
        }
        EXPECT_GT(priced, 1);
      }
    }
  }
  const Kernel* prefill = r.find("prefill");
  ASSERT_NE(prefill, nullptr);
  const LayerDescription l = layer(3000, 6144);
  EXPECT_GT(estimated_call_us(*prefill, "w128_t128_st4", l, 512, kH200).value_or(0), 0);
  // Stream-K runs from 256 rows; split 8 needs 8 chunks of 128 K; M must be positive.
  EXPECT_FALSE(estimated_call_us(*prefill, "w128_t256_st4_bk64_overlap_streamk", l, 16, kH200));
  EXPECT_FALSE(
      estimated_call_us(*prefill, "w64_t32_st4_overlap_split8", layer(3000, 512), 16, kH200));
  EXPECT_FALSE(estimated_call_us(*prefill, "w128_t128_st4", l, 0, kH200));
  EXPECT_FALSE(estimated_call_us(*prefill, "no_such_config", l, 64, kH200));
}

// One check decides whether a kernel may serve a call, in a fixed order: the layer, the config's
// name, the config at this M and K, the device. Its refusals carry the argument and code that
// linear_with() reports.
TEST(Registry, RunnableChecksLayerConfigShapeAndDeviceInThatOrder) {
  const Registry r(builtin_kernels(), TunedTable{}, Environment{});
  const Kernel& prefill = *r.kernels().at(1);
  ASSERT_EQ(prefill.name(), "prefill");
  const DeviceDescription cpu = DeviceDescription::parse("cpu");
  EXPECT_TRUE(r.runnable(prefill, "w128_t128_st4", layer(2560, 6144), 512, kH200).ok());
  // Each refusal, with everything ahead of it in order and everything after it broken too.
  LayerDescription misaligned = layer(2560, 6144);
  misaligned.alignment = 8;
  const CallVerdict no_layer = r.runnable(prefill, "nope", misaligned, 1, cpu);
  EXPECT_EQ(no_layer.argument, "kernel");
  EXPECT_EQ(no_layer.code, ErrorCode::kUnsupported);
  EXPECT_THAT(no_layer.reason,
              HasSubstr("is 'prefill', which cannot run this 2560 x 6144 layer: needs 16-byte"));
  const CallVerdict no_config = r.runnable(prefill, "nope", layer(2560, 6144), 1, cpu);
  EXPECT_EQ(no_config.argument, "config");
  EXPECT_EQ(no_config.code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(no_config.reason, HasSubstr("is 'nope'; expected one of prefill's: w128_t128_st4, "));
  const CallVerdict no_shape =
      r.runnable(prefill, "w128_t256_st4_bk64_overlap_streamk", layer(2560, 6144), 255, cpu);
  EXPECT_EQ(no_shape.argument, "config");
  EXPECT_EQ(no_shape.code, ErrorCode::kUnsupported);
  EXPECT_THAT(no_shape.reason, HasSubstr("is 'prefill/w128_t256_st4_bk64_overlap_streamk', which "
                                         "cannot run M = 255, K = 6144: "));
  const CallVerdict no_device =
      r.runnable(prefill, "w128_t256_st4_bk64_overlap_streamk", layer(2560, 6144), 256, cpu);
  EXPECT_EQ(no_device.argument, "kernel");
  EXPECT_THAT(no_device.reason,
              HasSubstr("is 'prefill', which does not run on cpu (no GPU): needs a GPU"));
  // A kernel outside the registry is checked the same way.
  const FakeKernel outside("outside", false, {"o1"}, "sm_90a", /*max_k=*/1024);
  EXPECT_TRUE(r.runnable(outside, "o1", layer(64, 1024), 1, kH200).ok());
  EXPECT_EQ(r.runnable(outside, "o2", layer(64, 1024), 1, kH200).argument, "config");
  EXPECT_THAT(r.runnable(outside, "o1", layer(64, 2048), 1, kH200).reason, HasSubstr("K above"));
}

// A tuned row whose config cannot run the call's M (a stream-K config below M = 256) is passed
// over for the kernel's default config, as runnable() says.
TEST(Registry, DispatchPassesOverRowsThatRunnableRefuses) {
  const auto ks = builtin_kernels();
  const TableContext context = table_context(ks);
  TunedTable table;
  const auto stats = table.add(
      "arch,sms,n,k,m,kernel,config,us,error_ratio,mxlinear_version,cuda_version\n"
      "sm_90a,132,2560,6144,128,prefill,w128_t256_st4_bk64_overlap_streamk,5.0,0.5," +
          context.library_version + "," + context.cuda_version + "\n" +
          "sm_90a,132,2560,6144,256,prefill,w128_t256_st4_bk64_overlap_streamk,5.0,0.5," +
          context.library_version + "," + context.cuda_version + "\n",
      "test", context);
  ASSERT_EQ(stats.accepted, 2) << ::testing::PrintToString(table.warnings());
  const Registry r(ks, table, Environment{});
  const LayerSelection s = r.select(layer(2560, 6144), kH200);
  ASSERT_EQ(s.kernel->name(), "prefill");
  EXPECT_THAT(r.dispatch(s, kH200, 128).why, HasSubstr("cost model"));
  // Its own bucket's row where the config can run it.
  EXPECT_EQ(r.dispatch(s, kH200, 256).config, "w128_t256_st4_bk64_overlap_streamk");
  EXPECT_THAT(r.dispatch(s, kH200, 256).why, HasSubstr("tuned row test"));
}

// linear() serves device memory only where a GPU kernel runs: on another GPU (an A100, say) or
// without a GPU it is refused with a reason that names the device, unless
// MXLINEAR_BACKEND=reference asks for the CPU reference there.
TEST(Registry, LinearOnAGpuOtherThanHopperIsRefusedUnlessTheReferenceIsForced) {
  const Registry automatic(builtin_kernels(), TunedTable{}, Environment{});
  DeviceDescription a100 = DeviceDescription::parse("sm_80:108");
  a100.name = "NVIDIA A100-SXM4-80GB";
  const Verdict refused = automatic.check_device(a100, 1);
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(refused.reason,
            "is on device 1 (NVIDIA A100-SXM4-80GB, sm_80); mxlinear's GPU kernels need sm_90a "
            "(Hopper); set MXLINEAR_BACKEND=reference to run the CPU reference");
  EXPECT_THAT(automatic.check_device(DeviceDescription::parse("cpu"), -1).reason,
              HasSubstr("no CUDA device"));
  EXPECT_TRUE(automatic.check_device(kH200, 0).ok());
  EXPECT_TRUE(automatic.check_device(DeviceDescription::parse("sm_90a:114"), 0).ok());
  // Disabling the GPU kernels on a Hopper GPU is no reason to refuse: the reference serves.
  const Registry disabled(
      builtin_kernels(), TunedTable{},
      Environment::from({{"MXLINEAR_DISABLED_KERNELS", "decode,prefill,gemv,generic"}}));
  EXPECT_TRUE(disabled.check_device(kH200, 0).ok());
  EXPECT_EQ(disabled.select(layer(2560, 6144), kH200).kernel->name(), "reference");
  // Forced, the reference serves every layer and M on the A100, with no warning.
  const Registry forced(builtin_kernels(), TunedTable{},
                        Environment::from({{"MXLINEAR_BACKEND", "reference"}}));
  EXPECT_TRUE(forced.warnings().empty()) << ::testing::PrintToString(forced.warnings());
  EXPECT_TRUE(forced.check_device(a100, 1).ok());
  for (const auto& [n, k] : {std::pair<std::int64_t, std::int64_t>{2560, 6144}, {100, 544}}) {
    const LayerSelection s = forced.select(layer(n, k), a100);
    ASSERT_NE(s.kernel, nullptr);
    EXPECT_EQ(s.kernel->name(), "reference");
    EXPECT_TRUE(s.warnings.empty());
    for (const std::int64_t m : {1, 300, 8192}) {
      const Dispatch d = forced.dispatch(s, a100, m);
      EXPECT_EQ(std::string(d.kernel->name()) + "/" + d.config, "reference/fp64");
      const CallPlan plan = d.kernel->plan(
          Problem{LinearShape{m, n, k}, DType::kBF16, true, DType::kBF16, 108}, d.config);
      EXPECT_EQ(plan.activation, ActivationForm::kQuantized);
      EXPECT_EQ(plan.scratch_bytes, 0u);
    }
  }
  // Without it the selection on the A100 still lands on the reference (the report shows it),
  // but linear() refuses before it gets there.
  EXPECT_EQ(automatic.select(layer(2560, 6144), a100).kernel->name(), "reference");
}

TEST(Registry, KernelNamesForTheReport) {
  const auto ks = builtin_kernels();
  std::vector<std::string> names;
  for (const auto& k : ks) names.emplace_back(kernel_name(k.get()));
  EXPECT_EQ(names, (std::vector<std::string>{"decode", "prefill", "gemv", "generic", "prefill_a16",
                                             "gemv_a16", "generic_a16", "reference"}));
  EXPECT_EQ(kernel_name(nullptr), "");
}

// MXLINEAR_ACTIVATION picks the mode of calls that do not choose one; anything but mx or bf16
// is a warning naming the value, and the default (mx) applies.
TEST(Registry, ActivationSwitchFromTheEnvironment) {
  EXPECT_EQ(Environment::from({}).activation, ActivationMode::kW8A8);
  EXPECT_EQ(Environment::from({{"MXLINEAR_ACTIVATION", "bf16"}}).activation,
            ActivationMode::kW8A16);
  EXPECT_EQ(Environment::from({{"MXLINEAR_ACTIVATION", "mx"}}).activation, ActivationMode::kW8A8);
  const Environment bad = Environment::from({{"MXLINEAR_ACTIVATION", "fp8"}});
  EXPECT_EQ(bad.activation, ActivationMode::kW8A8);
  const Registry r(builtin_kernels(), TunedTable{}, bad);
  ASSERT_EQ(r.warnings().size(), 1u);
  EXPECT_THAT(r.warnings()[0], HasSubstr("MXLINEAR_ACTIVATION is 'fp8'; expected mx or bf16"));
  EXPECT_EQ(activation_operand(ActivationMode::kW8A16, DType::kF32), std::nullopt);
  EXPECT_EQ(activation_operand(ActivationMode::kW8A16, DType::kF16), ActivationOperand::kF16);
  EXPECT_EQ(activation_operand(ActivationMode::kW8A16, DType::kE4M3), ActivationOperand::kMx);
  EXPECT_EQ(activation_operand(ActivationMode::kW8A8, DType::kBF16), ActivationOperand::kMx);
  EXPECT_EQ(parse_activation_mode(activation_mode_name(ActivationMode::kW8A16)),
            ActivationMode::kW8A16);
  EXPECT_EQ(parse_activation_mode("BF16"), std::nullopt);
}

// A W8A16 layer on a described H200 is never handed to a W8A8 kernel, nor a W8A8 layer to a
// W8A16 one; bf16 x reaches a tensor-core kernel at prefill sizes for random shapes, and every
// choice can run.
TEST(Registry, EachModeDispatchesToItsOwnKernels) {
  const Registry r(builtin_kernels(), TunedTable{}, Environment::from({}));
  auto rng = make_rng();
  std::uniform_int_distribution<std::int64_t> n_of(1, 30000), k_blocks(1, 600);
  for (int i = 0; i < 60; ++i) {
    LayerDescription layer = LayerDescription{};
    layer.n = n_of(rng);
    layer.k = 32 * k_blocks(rng);
    for (const ActivationOperand operand :
         {ActivationOperand::kMx, ActivationOperand::kBf16, ActivationOperand::kF16}) {
      layer.operand = operand;
      const LayerSelection s = r.select(layer, kH200);
      ASSERT_NE(s.kernel, nullptr);
      for (const std::int64_t m : {1, 7, 64, 300, 4096}) {
        SCOPED_TRACE(::testing::Message() << m << " x " << layer.n << " x " << layer.k
                                          << " operand " << static_cast<int>(operand));
        const Dispatch d = r.dispatch(s, kH200, m);
        ASSERT_NE(d.kernel, nullptr);
        EXPECT_EQ(d.kernel->activation_mode() == ActivationMode::kW8A16,
                  operand != ActivationOperand::kMx);
        EXPECT_TRUE(d.kernel->can_implement(layer).ok());
        EXPECT_TRUE(d.kernel->can_run(m, layer.k, d.config).ok());
        if (operand == ActivationOperand::kBf16 && m >= 300) {
          EXPECT_EQ(d.kernel->name(), "prefill_a16");
        }
      }
    }
  }
}

}  // namespace
}  // namespace mxlinear::test
