// The bench report's JSON schema and Markdown form, checked on the committed H200 report and on
// broken copies of it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "report.hpp"

namespace mxlinear::bench {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json committed_report() {
  std::ifstream in(MXLINEAR_SOURCE_DIR "/bench/results/h200-2026-11-30/h200-2026-11-30.json");
  EXPECT_TRUE(in.good());
  return json::parse(in);
}

TEST(BenchReport, CommittedH200ReportConformsToTheSchema) {
  const json doc = committed_report();
  EXPECT_EQ(schema_errors(doc), std::vector<std::string>{});
  EXPECT_EQ(doc["rows"].size(), 48u);  // 8 shapes x 6 M
  EXPECT_EQ(doc["step"].size(), 2u);
}

TEST(BenchReport, MissingOrMistypedFieldsAreNamed) {
  json doc = committed_report();
  doc["rows"][3].erase("gemm_us");
  doc["ceilings"]["read_tb_s"] = "fast";
  doc["versions"].erase("cublas");
  const std::vector<std::string> e = schema_errors(doc);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_THAT(e[0], HasSubstr("versions: missing 'cublas'"));
  EXPECT_THAT(e[1], HasSubstr("ceilings: 'read_tb_s' has the wrong type"));
  EXPECT_THAT(e[2], HasSubstr("rows[3]: missing 'gemm_us'"));
  EXPECT_EQ(schema_errors(json::array()),
            std::vector<std::string>{"the report is not a JSON object"});
}

TEST(BenchReport, WrongRowNeedsNoTimings) {
  json doc = committed_report();
  doc["rows"][0]["check"] = "WRONG";
  doc["rows"][0].erase("gemm_us");
  doc["rows"][0].erase("linear_us");
  EXPECT_TRUE(schema_errors(doc).empty());
}

TEST(BenchReport, MarkdownHasEveryRowAndTheGeomeans) {
  const json doc = committed_report();
  const std::string md = markdown_report(doc);
  EXPECT_THAT(md, HasSubstr("# mxlinear bench on NVIDIA H200"));
  EXPECT_THAT(md, HasSubstr("| self_attn.qkv_proj | 2560x6144 | 8192 |"));
  EXPECT_THAT(md, HasSubstr("| draft.fused_ctx_kv_proj | 1280x6144 | 1 |"));
  EXPECT_THAT(md, HasSubstr("Decode-step replay"));
  // nan in older reports
  EXPECT_THAT(md, HasSubstr("| weights read alone | overlapped | overlapped, each waiting for the "
                            "one before | half of each read after the wait |"));
  std::size_t rows = 0;
  for (std::size_t p = md.find("\n| "); p != std::string::npos; p = md.find("\n| ", p + 1)) ++rows;
  EXPECT_EQ(rows, 48u + 6u + 2u + 3u);  // figures, geomeans, steps, three header lines
}

// The report says whether its figures were timed in a burst or after warming (the H200's power
// cap moves large-M figures by up to 10% between the two; docs/PERF.md, session 15).
TEST(BenchReport, TimingNoteSaysBurstOrSustained) {
  json doc = committed_report();  // predates the timing field: burst
  EXPECT_THAT(timing_note(doc), HasSubstr("Burst figures: the median of replays"));
  doc["timing"] = {{"replays", 1000}, {"warm_ms", 0}};
  EXPECT_THAT(timing_note(doc), HasSubstr("Burst figures: the median of 1000 timed replays"));
  doc["timing"]["warm_ms"] = 1500;
  EXPECT_THAT(timing_note(doc), HasSubstr("replayed for at least 1500 ms before the median of "
                                          "1000 timed replays"));
  EXPECT_THAT(markdown_report(doc), HasSubstr("Sustained figures:"));
  doc["timing"] = "garbage";  // a mistyped field reads as absent, never as a crash
  EXPECT_THAT(timing_note(doc), HasSubstr("Burst figures"));
  doc["timing"] = {{"warm_ms", "long"}, {"replays", 2.5}};
  EXPECT_THAT(timing_note(doc), HasSubstr("Burst figures: the median of replays"));
}

TEST(BenchReport, QuantizeSectionIsCheckedAndPrinted) {
  json doc = committed_report();
  doc["quantize"] = json::array({{{"m", 512},
                                  {"k", 6144},
                                  {"us", 1.0},
                                  {"read_tb_s", 3.5},
                                  {"fraction_of_read_ceiling", 0.8}}});
  EXPECT_TRUE(schema_errors(doc).empty());
  EXPECT_THAT(markdown_report(doc), HasSubstr("| 512 | 6144 | 1.00 | 3.50 | 80% | - |"));
  doc["quantize"][0]["moved_fraction_of_read_ceiling"] = 1.21;
  EXPECT_THAT(markdown_report(doc), HasSubstr("| 512 | 6144 | 1.00 | 3.50 | 80% | 121% |"));
  doc["quantize"][0].erase("us");
  ASSERT_EQ(schema_errors(doc).size(), 1u);
  EXPECT_THAT(schema_errors(doc)[0], HasSubstr("quantize[0]: missing 'us'"));
}

}  // namespace
}  // namespace mxlinear::bench
