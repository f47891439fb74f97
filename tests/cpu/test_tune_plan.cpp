// What `mxlinear tune` decides without a GPU: its figures, resuming a table an interrupted run
// wrote, rows the table parser accepts, the ETA and the summary.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "host/registry/registry.hpp"
#include "tune_plan.hpp"

namespace mxlinear::cli {
namespace {

using ::testing::HasSubstr;

const TableContext& context() {
  static const TableContext c = table_context(builtin_kernels());
  return c;
}

TEST(TunePlan, FiguresAreEachDistinctShapeAtEachMInModelOrder) {
  const std::vector<ModelLayer> layers = {
      {"qkv", 2560, 6144, 60}, {"o", 6144, 2048, 60}, {"draft.qkv", 2560, 6144, 5}};
  const auto f = tune_figures(layers, {1, 1000});
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].layer, "qkv");
  EXPECT_EQ(f[1].m, 1000);
  EXPECT_EQ(f[2].n, 6144);
  EXPECT_EQ(f[0].m_column(), "1");
  EXPECT_EQ(f[1].m_column(), "=1000");  // not a power of two: a row for that M only
  EXPECT_EQ((TuneFigure{"x", 1, 32, 4096}).m_column(), "4096");
}

// Every row the tuner writes is one the table parser accepts, for the key it was written for.
TEST(TunePlan, RowsRoundTripThroughTheTableParser) {
  std::string text = tuned_table_header("made by a test");
  const TuneFigure bucket{"qkv", 3000, 4096, 128}, exact{"qkv", 3000, 4096, 1000};
  text += tuned_row("sm_90a", 132, bucket, "prefill", "w128_t128_st4", 19.126, 0.42, context());
  text += tuned_row("sm_90a", 132, exact, "gemv", "w16_t8_kwarps8", 7.5, 0.3, context());
  TunedTable table;
  const TableStats stats = table.add(text, "tuned.csv", context());
  EXPECT_EQ(stats.accepted, 2) << ::testing::PrintToString(table.warnings());
  EXPECT_EQ(stats.skipped, 0);
  const auto row = table.lookup("sm_90a", 132, 3000, 4096, 100);
  ASSERT_TRUE(row.has_value());
  EXPECT_EQ(row->config, "w128_t128_st4");
  EXPECT_DOUBLE_EQ(row->us, 19.13);
  EXPECT_EQ(table.lookup("sm_90a", 132, 3000, 4096, 1000)->kernel, "gemv");
}

// A run that stopped part way resumes from what it wrote: the rows it finished count, rows of
// another device, rows the parser refuses and a torn last line do not.
TEST(TunePlan, ResumeSkipsOnlyTheFiguresTheTableHasValidRowsFor) {
  std::string text = tuned_table_header("interrupted");
  text +=
      tuned_row("sm_90a", 132, {"a", 2560, 6144, 1}, "gemv", "w16_t8_kwarps8", 9, 0.4, context());
  text += tuned_row("sm_90a", 132, {"a", 2560, 6144, 1000}, "prefill", "w128_t128_st4", 90, 0.4,
                    context());
  text += tuned_row("sm_90a", 114, {"a", 2560, 6144, 32}, "prefill", "w128_t128_st4", 9, 0.4,
                    context());
  text += tuned_row("sm_90a", 132, {"a", 2560, 6144, 64}, "prefill", "no_such_config", 9, 0.4,
                    context());
  text += "sm_90a,132,2560,6144,128,prefill,w128_t1";  // the line being written when it stopped
  const auto done = figures_in_table(text, "sm_90a", 132, false, context());
  EXPECT_EQ(done, (std::set<FigureKey>{{2560, 6144, "1"}, {2560, 6144, "=1000"}}));
  EXPECT_TRUE(figures_in_table("", "sm_90a", 132, false, context()).empty());
  EXPECT_TRUE(
      figures_in_table(std::string("\xff\x00garbage\n", 10), "sm_90a", 132, false, context())
          .empty());
}

// A table tuned for one mode is resumed for that mode only: a W8A16 run does not count the W8A8
// rows of the same figures as done, nor the other way round.
TEST(TunePlan, ResumeCountsOnlyTheRowsOfTheModeBeingTuned) {
  std::string text = tuned_table_header("both modes");
  text +=
      tuned_row("sm_90a", 132, {"a", 2560, 6144, 1}, "gemv", "w16_t8_kwarps8", 9, 0.4, context());
  text += tuned_row("sm_90a", 132, {"a", 2560, 6144, 64}, "prefill_a16", "w128_t128_st4", 9, 0.4,
                    context());
  EXPECT_EQ(figures_in_table(text, "sm_90a", 132, false, context()),
            (std::set<FigureKey>{{2560, 6144, "1"}}));
  EXPECT_EQ(figures_in_table(text, "sm_90a", 132, true, context()),
            (std::set<FigureKey>{{2560, 6144, "64"}}));
}

// --timings: one line per config under its header, M as the call's token count, a failed
// config's time left empty.
TEST(TunePlan, TimingLinesMatchTheirHeader) {
  const TuneFigure f{"qkv", 3000, 4096, 1000};
  EXPECT_EQ(timings_header(), "layer,n,k,m,kernel,config,us,error_ratio\n");
  EXPECT_EQ(timing_line(f, "prefill", "w128_t128_st4", 19.126, 0.4204, true),
            "qkv,3000,4096,1000,prefill,w128_t128_st4,19.13,0.420\n");
  EXPECT_EQ(timing_line(f, "gemv", "w16_t8_kwarps8", 0, 3.5, false),
            "qkv,3000,4096,1000,gemv,w16_t8_kwarps8,,3.500\n");
}

TEST(TunePlan, EtaIsTheMeanSoFarTimesWhatIsLeft) {
  EXPECT_DOUBLE_EQ(eta_seconds(10, 5, 20), 30);
  EXPECT_DOUBLE_EQ(eta_seconds(10, 20, 20), 0);
  EXPECT_LT(eta_seconds(0, 0, 20), 0);
  EXPECT_EQ(duration_text(eta_seconds(0, 0, 20)), "unknown");
  EXPECT_EQ(duration_text(12.4), "12 s");
  EXPECT_EQ(duration_text(185), "3 min 05 s");
  EXPECT_EQ(duration_text(3720), "1 h 02 min");
}

TEST(TunePlan, SummaryGivesEachGainTheirGeomeanAndTheLargest) {
  std::vector<TuneOutcome> outcomes(2);
  outcomes[0].figure = TuneFigure{"qkv", 2560, 6144, 1};
  outcomes[0].best = "gemv/a";
  outcomes[0].best_us = 10;
  outcomes[0].untuned = "gemv/b";
  outcomes[0].untuned_us = 10;
  outcomes[1].figure = TuneFigure{"qkv", 2560, 6144, 512};
  outcomes[1].best = "prefill/a";
  outcomes[1].best_us = 10;
  outcomes[1].untuned = "prefill/b";
  outcomes[1].untuned_us = 40;
  const std::string s = tune_summary(outcomes);
  EXPECT_THAT(s, HasSubstr("geomean 2.000x over 2 figures; largest 4.00x (2560 x 6144, M = 512)"));
  EXPECT_THAT(s, HasSubstr("prefill/a / prefill/b"));
  EXPECT_THAT(tune_summary({}), HasSubstr("tuned nothing"));
}

}  // namespace
}  // namespace mxlinear::cli
