// The selection report says what runs: the kernels of the per-M dispatch ("runs") apart from
// the kernel that claims the layer ("selected"), which tuned rows may leave with no M at all.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "cpu/registry_test_kernels.hpp"
#include "device/common/grid_walk.hpp"
#include "host/registry/registry.hpp"
#include "mxlinear/models.hpp"
#include "select_json.hpp"

namespace mxlinear::test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const DeviceDescription kH200 = DeviceDescription::parse("sm_90a:132");

std::vector<std::shared_ptr<const Kernel>> kernels() {
  return {std::make_shared<FakeKernel>("tuned", true, std::vector<std::string>{"t"}),
          std::make_shared<FakeKernel>("general", false, std::vector<std::string>{"g"}),
          std::make_shared<FakeKernel>("small", false, std::vector<std::string>{"s"})};
}

std::string row(std::int64_t n, const std::string& m, const std::string& kernel,
                const std::string& config) {
  const TableContext c = table_context(kernels());
  return "sm_90a,132," + std::to_string(n) + ",6144," + m + "," + kernel + "," + config +
         ",1.0,0.2," + c.library_version + "," + c.cuda_version + "\n";
}

// Both layers have rows of "tuned", so "tuned" claims both. Layer a's only "tuned" row is for
// M = 48 exactly, which the report does not show: its M = 1 goes to "small", every other M to
// "general" (the nearest bucket below). Layer b runs "tuned" itself from M = 32. The registry
// outlives the rows, which point at its kernels.
std::vector<ReportRow> report() {
  static const Registry registry = [] {
    TunedTable table;
    table.add(row(2560, "=48", "tuned", "t") + row(2560, "1", "small", "s") +
                  row(2560, "32", "general", "g") + row(4096, "1", "small", "s") +
                  row(4096, "32", "tuned", "t"),
              "t.csv", table_context(kernels()));
    EXPECT_TRUE(table.warnings().empty());
    return Registry(kernels(), std::move(table), Environment{});
  }();
  return registry.report({{"a", 2560, 6144, 3}, {"b", 4096, 6144, 1}}, kH200, DType::kBF16);
}

// The whitespace-separated fields of the report line of `layer`.
std::vector<std::string> fields_of(const std::string& text, const std::string& layer) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(layer + " ", 0) != 0) continue;
    std::istringstream words(line);
    std::vector<std::string> fields;
    for (std::string w; words >> w;) fields.push_back(w);
    return fields;
  }
  return {};
}

TEST(SelectReport, RunsColumnListsTheDispatchedKernelsApartFromTheSelectedOne) {
  const auto rows = report();
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_EQ(rows[0].selection.kernel->name(), "tuned");
  ASSERT_EQ(rows[1].selection.kernel->name(), "tuned");
  const std::string text = format_report(rows, kH200);
  // name, N, x, K, count, runs, selected, rejected
  EXPECT_THAT(fields_of(text, "layer"), ElementsAre("layer", "N", "x", "K", "count", "runs",
                                                    "selected", "rejected", "(reason)"));
  EXPECT_THAT(fields_of(text, "a"),
              ElementsAre("a", "2560", "x", "6144", "3", "small,general", "tuned", "-"))
      << text;
  EXPECT_THAT(fields_of(text, "b"),
              ElementsAre("b", "4096", "x", "6144", "1", "small,tuned", "tuned", "-"))
      << text;
  EXPECT_THAT(text, HasSubstr("selected: the kernel that claims the layer"));
}

TEST(SelectReport, JsonSaysWhatRunsAndWhatClaimsTheLayer) {
  const auto doc = nlohmann::json::parse(cli::select_report_json(report(), kH200));
  const auto& a = doc.at("layers").at(0);
  EXPECT_EQ(a.at("kernels_run"), nlohmann::json({"small", "general"}));
  EXPECT_EQ(a.at("selected_kernel"), "tuned");
  EXPECT_FALSE(a.contains("kernel"));  // no field that reads as "what runs" but is the claim
  for (const auto& m : a.at("per_m")) EXPECT_NE(m.at("kernel"), "tuned") << m.dump();
  EXPECT_EQ(doc.at("layers").at(1).at("kernels_run"), nlohmann::json({"small", "tuned"}));
}

// The report shows the dispatch at the token counts its caller names, in that order, and says
// which; the default is one count per regime.
TEST(SelectReport, DispatchIsShownAtTheTokenCountsAsked) {
  static const Registry r(kernels(), TunedTable{}, Environment{});
  const std::vector<std::int64_t> ms{3, 17, 4096};
  const auto rows =
      r.report({{"a", 2560, 6144, 1}}, kH200, DType::kBF16, ActivationOperand::kMx, false, ms);
  ASSERT_EQ(rows.size(), 1u);
  std::vector<std::int64_t> shown;
  for (const auto& [m, d] : rows[0].per_m) {
    shown.push_back(m);
    const Dispatch direct = r.dispatch(rows[0].selection, kH200, m);
    EXPECT_EQ(d.kernel, direct.kernel) << m;
    EXPECT_EQ(d.config, direct.config) << m;
  }
  EXPECT_EQ(shown, ms);
  EXPECT_THAT(format_report(rows, kH200), HasSubstr("at M = 3, 17, 4096 ("));
  std::vector<std::int64_t> defaults;
  const auto default_rows = report();
  for (const auto& [m, d] : default_rows[0].per_m) defaults.push_back(m);
  EXPECT_THAT(defaults, ElementsAre(1, 32, 128, 512, 2048, 8192));
}

// Token counts the report cannot list in order are refused, naming the argument and the value.
TEST(SelectReport, TokenCountsOutOfOrderOrBelowOneAreRefused) {
  static const Registry r(kernels(), TunedTable{}, Environment{});
  const std::vector<std::vector<std::int64_t>> bad{{}, {0}, {4, -1}, {8, 2}, {16, 16}};
  for (const auto& ms : bad) {
    try {
      (void)r.report({{"a", 2560, 6144, 1}}, kH200, DType::kBF16, ActivationOperand::kMx, false,
                     ms);
      ADD_FAILURE() << "accepted " << ms.size() << " counts";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_EQ(e.argument(), "ms");
      EXPECT_THAT(e.what(), HasSubstr("argument 'ms'"));
      if (!ms.empty()) {
        EXPECT_THAT(e.what(), HasSubstr(std::to_string(ms.back()) + "]"));
      }
    }
  }
}

// Token counts past linear()'s row limit and layers linear() could never run are refused by
// name: K cast to a kernel's int, or M x K in int64, must not wrap into a report.
TEST(SelectReport, LayersAndTokenCountsOutOfRangeAreRefused) {
  static const Registry r(kernels(), TunedTable{}, Environment{});
  const auto error_of = [&](const std::vector<ModelLayer>& layers,
                            const std::vector<std::int64_t>& ms) -> std::string {
    try {
      (void)r.report(layers, kH200, DType::kBF16, ActivationOperand::kMx, false, ms);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    return "accepted";
  };
  const std::vector<std::int64_t> one{1};
  EXPECT_THAT(error_of({{"a", 2560, 6144, 1}}, {1, std::int64_t{1} << 40}),
              HasSubstr("argument 'ms' is [1, 1099511627776]; expected token counts in "
                        "1..2147483647"));
  for (const ModelLayer& bad : std::vector<ModelLayer>{{"n0", 0, 6144, 1},
                                                       {"neg", -5, 64, 1},
                                                       {"k33", 2560, 33, 1},
                                                       {"k0", 2560, 0, 1},
                                                       {"k2^32", 2560, std::int64_t{1} << 32, 1},
                                                       {"nbig", (1 << 24) + 1, 64, 1}}) {
    EXPECT_THAT(
        error_of({{"ok", 2560, 6144, 1}, bad}, one),
        AllOf(HasSubstr("argument 'layers' has '" + bad.name +
                        "' with N = " + std::to_string(bad.n) + ", K = " + std::to_string(bad.k)),
              HasSubstr("expected N in 1..16777216 and K a multiple of 32 in 32..16777216")))
        << bad.name;
  }
  EXPECT_EQ(error_of({{"edge", 1 << 24, 1 << 24, 1}}, {1, (std::int64_t{1} << 31) - 1}),
            "accepted");
}

// A layer name from a user's CSV is escaped in the table and never breaks the JSON.
TEST(SelectReport, UnprintableLayerNamesAreEscapedAndJsonStaysValid) {
  static const Registry r(kernels(), TunedTable{}, Environment{});
  const auto rows = r.report({{"bad\x1b[2J\xff", 2560, 6144, 1}}, kH200, DType::kBF16);
  EXPECT_THAT(format_report(rows, kH200), HasSubstr("bad\\x1b[2J\\xff"));
  const auto doc = nlohmann::json::parse(cli::select_report_json(rows, kH200));
  EXPECT_THAT(doc.at("layers").at(0).at("layer").get<std::string>(), HasSubstr("bad"));
}

// The report of the batch-invariant mode says so in its header and its JSON, and in either
// activation mode runs each layer in one K order: its kernel's configs that keep it, or the
// GEMV's k-parts configs that join it; no decode kernel, no other GEMV config, no alternating
// warpgroups or stream-K config, and no K split other than the layer's parts at any M. The
// default report says nothing of the mode.
TEST(SelectReport, BatchInvariantReportSaysSoAndRunsOneOrderPerLayer) {
  const std::vector<ModelLayer> layers = builtin_model("minimax-m3.1-flash-tp4");
  const Registry& registry = Registry::global();
  for (const ActivationOperand operand : {ActivationOperand::kMx, ActivationOperand::kBf16}) {
    SCOPED_TRACE(std::string(describe(operand)));
    const auto rows = registry.report(layers, kH200, DType::kBF16, operand, true);
    ASSERT_EQ(rows.size(), layers.size());
    const std::string text = format_report(rows, kH200);
    EXPECT_THAT(text, HasSubstr("batch-invariant mode"));
    const auto doc = nlohmann::json::parse(cli::select_report_json(rows, kH200));
    EXPECT_EQ(doc.at("batch_invariant"), true);
    for (const auto& layer : doc.at("layers")) {
      const std::string selected = layer.at("selected_kernel");
      for (const auto& m : layer.at("per_m")) {
        const std::string kernel = m.at("kernel"), config = m.at("config");
        if (kernel != selected) {
          EXPECT_TRUE(selected.starts_with("prefill") && kernel.starts_with("gemv") &&
                      config.find("_kparts") != std::string::npos)
              << m.dump();
        }
        EXPECT_THAT(kernel, Not(HasSubstr("decode"))) << m.dump();
        for (const char* cut : {"_alt", "_streamk"}) {
          EXPECT_THAT(config, Not(HasSubstr(cut))) << m.dump();
        }
        const int parts = device::batch_invariant_parts(layer.at("k").get<int>());
        if (parts == 1) {
          EXPECT_THAT(config, Not(HasSubstr("_split"))) << m.dump();
        }
        if (config.find("_split") != std::string::npos) {
          EXPECT_TRUE(config.ends_with("_split" + std::to_string(parts))) << m.dump();
        }
        EXPECT_THAT(m.at("source").get<std::string>(), HasSubstr("batch-invariant")) << m.dump();
      }
    }
  }
  const auto rows = registry.report(layers, kH200, DType::kBF16, ActivationOperand::kMx);
  EXPECT_THAT(format_report(rows, kH200), Not(HasSubstr("batch-invariant")));
  EXPECT_EQ(nlohmann::json::parse(cli::select_report_json(rows, kH200)).at("batch_invariant"),
            false);
}

}  // namespace
}  // namespace mxlinear::test
