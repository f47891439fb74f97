// The bench report's JSON schema and Markdown form, checked on a report shaped like the one
// `mxlinear bench` writes for the seed model (fresh random figures every run), on broken copies
// of it, and on the published reports where bench/results/<gpu>/ holds them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "report.hpp"

namespace mxlinear::bench {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// The seed model's eight layer shapes at the six M the bench reports, as `mxlinear bench --model
// builtin:minimax-m3.1-flash-tp4 --m 1,32,128,512,2048,8192 --step` writes them (less the
// optional columns, which older reports lack and the Markdown prints as nan). With `w8a16`, each
// row has the W8A16 figure and each geomean its W8A16 ratio, as the bench writes them now;
// without, the report is shaped like one from before the bench timed W8A16. With `invariant`,
// each row has the batch-invariant mode's figures and each geomean their ratios, as `mxlinear
// bench --batch-invariant` writes them.
json seed_report(bool w8a16 = false, bool invariant = false) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> us(1.0, 1000.0);
  const struct {
    const char* layer;
    std::int64_t n, k;
  } layers[] = {{"self_attn.qkv_proj", 2560, 6144},
                {"self_attn.o_proj", 6144, 2048},
                {"shared_experts.gate_up_proj", 1536, 6144},
                {"shared_experts.down_proj", 6144, 768},
                {"dense_mlp.gate_up_proj", 6144, 6144},
                {"dense_mlp.down_proj", 6144, 3072},
                {"draft.qkv_proj", 2304, 6144},
                {"draft.fused_ctx_kv_proj", 1280, 6144}};
  const std::int64_t ms[] = {1, 32, 128, 512, 2048, 8192};
  json doc = {{"gpu", "NVIDIA H200"},
              {"sms", 132},
              {"versions",
               {{"driver_cuda", "13.0"},
                {"cuda_runtime", "13.0"},
                {"cublas", "13.1.0"},
                {"mxlinear", "0.1.0"}}},
              {"ceilings", {{"read_tb_s", 4.45}, {"bf16_tflop_s", 812.4}, {"fp8_tflop_s", 1433.7}}},
              {"rows", json::array()},
              {"geomeans", json::array()},
              {"step", json::array()}};
  for (const std::int64_t m : ms) {
    for (const auto& l : layers) {
      doc["rows"].push_back({{"layer", l.layer},
                             {"n", l.n},
                             {"k", l.k},
                             {"m", m},
                             {"kernel", "prefill/w128_t256_st2"},
                             {"check", "ok"},
                             {"check_rel_error", 1e-3},
                             {"floor_us", us(rng)},
                             {"gemm_us", us(rng)},
                             {"linear_us", us(rng)},
                             {"cublas_bf16_us", us(rng)},
                             {"cublaslt_fp8_tensor_us", us(rng)},
                             {"tri_mx_us", us(rng)}});
      if (w8a16) {
        json& row = doc["rows"].back();
        row["kernel_w8a16"] = "prefill_a16/w128_t256_st2";
        row["check_w8a16"] = "ok";
        row["check_w8a16_rel_error"] = 1e-4;
        row["w8a16_us"] = us(rng);
        row["w8a16_spread"] = 0.01;
        row["w8a16_tb_s"] = 3.5;
      }
      if (invariant) {
        json& row = doc["rows"].back();
        row["kernel_invariant"] = "prefill/w128_t256_st2";
        row["check_invariant"] = "ok";
        row["check_invariant_rel_error"] = 1e-3;
        row["invariant_us"] = us(rng);
        row["invariant_spread"] = 0.01;
        row["kernel_invariant_w8a16"] = "prefill_a16/w128_t256_st2";
        row["check_invariant_w8a16"] = "ok";
        row["check_invariant_w8a16_rel_error"] = 1e-4;
        row["invariant_w8a16_us"] = us(rng);
        row["invariant_w8a16_spread"] = 0.01;
        row["invariant_rows_equal"] = true;
      }
    }
    doc["geomeans"].push_back(
        {{"m", m}, {"vs_cublas_bf16", 0.8}, {"vs_cublaslt_fp8", 0.5}, {"vs_tri_mx", 5.0}});
    if (w8a16) doc["geomeans"].back()["w8a16_vs_cublas_bf16"] = 1.25;
    if (w8a16) doc["geomeans"].back()["linear_vs_cublas_bf16"] = 0.7;
    if (invariant) {
      doc["geomeans"].back()["invariant_over_default"] = 1.5;
      doc["geomeans"].back()["invariant_w8a16_over_default"] = 1.75;
    }
  }
  for (const std::int64_t m : {32, 128}) {
    doc["step"].push_back({{"m", m}, {"gemms", 261}, {"mxlinear_ms", us(rng) / 100}});
  }
  return doc;
}

TEST(BenchReport, SeedShapedReportConformsToTheSchema) {
  for (const bool w8a16 : {false, true}) {
    for (const bool invariant : {false, true}) {
      const json doc = seed_report(w8a16, invariant);
      EXPECT_EQ(schema_errors(doc), std::vector<std::string>{})
          << "w8a16 " << w8a16 << " invariant " << invariant;
      EXPECT_EQ(doc["rows"].size(), 48u);  // 8 shapes x 6 M
      EXPECT_EQ(doc["step"].size(), 2u);
    }
  }
}

// The reports docs/PERFORMANCE.md quotes: once published, each must be one the bench's own
// schema accepts and the Markdown form can print (pybench.json is the Python bench's and
// humming-w8a16.json the Humming runner's, in their own forms). Every GPU's folder is read.
TEST(BenchReport, PublishedReportsConformToTheSchema) {
  const std::filesystem::path root = MXLINEAR_SOURCE_DIR "/bench/results";
  std::vector<std::filesystem::path> reports;
  if (std::filesystem::is_directory(root)) {
    for (const auto& folder : std::filesystem::directory_iterator(root)) {
      if (!folder.is_directory()) continue;
      for (const auto& entry : std::filesystem::directory_iterator(folder.path())) {
        const std::string name = entry.path().filename().string();
        if (entry.path().extension() == ".json" && name != "pybench.json" &&
            name != "humming-w8a16.json") {
          reports.push_back(entry.path());
        }
      }
    }
  }
  if (reports.empty()) GTEST_SKIP() << root << " holds no published report in this tree";
  for (const auto& path : reports) {
    SCOPED_TRACE(path.string());
    std::ifstream in(path);
    ASSERT_TRUE(in.good());
    const json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(doc.is_discarded()) << "not valid JSON";
    EXPECT_EQ(schema_errors(doc), std::vector<std::string>{});
    EXPECT_FALSE(doc["rows"].empty());
    for (const auto& row : doc["rows"]) EXPECT_TRUE(row.contains("w8a16_us")) << "both modes";
    EXPECT_THAT(markdown_report(doc), HasSubstr("# mxlinear bench on "));
  }
}

TEST(BenchReport, MissingOrMistypedFieldsAreNamed) {
  json doc = seed_report();
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

// The bench rewrites its JSON after each figure with "complete": false, true once it ends; a
// report cut short says so in its Markdown form.
TEST(BenchReport, AReportCutShortSaysSo) {
  json doc = seed_report();
  EXPECT_THAT(markdown_report(doc), Not(HasSubstr("Incomplete")));
  doc["complete"] = true;
  EXPECT_TRUE(schema_errors(doc).empty());
  EXPECT_THAT(markdown_report(doc), Not(HasSubstr("Incomplete")));
  doc["complete"] = false;
  doc["geomeans"] = json::array();
  EXPECT_TRUE(schema_errors(doc).empty());
  EXPECT_THAT(markdown_report(doc), HasSubstr("Incomplete: the run stopped before its end"));
  doc["complete"] = "no";
  const std::vector<std::string> e = schema_errors(doc);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_THAT(e[0], HasSubstr("report: 'complete' has the wrong type"));
}

TEST(BenchReport, WrongRowNeedsNoTimings) {
  json doc = seed_report();
  doc["rows"][0]["check"] = "WRONG";
  doc["rows"][0].erase("gemm_us");
  doc["rows"][0].erase("linear_us");
  EXPECT_TRUE(schema_errors(doc).empty());
}

TEST(BenchReport, MarkdownHasEveryRowAndTheGeomeans) {
  const json doc = seed_report();
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

// The cells of a Markdown table line, trimmed: "| a | b |" is {"a", "b"}.
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells;
  std::size_t begin = line.find('|');
  while (begin != std::string::npos) {
    const std::size_t end = line.find('|', begin + 1);
    if (end == std::string::npos) break;
    std::string cell = line.substr(begin + 1, end - begin - 1);
    cell.erase(0, cell.find_first_not_of(' '));
    cell.erase(cell.find_last_not_of(' ') + 1);
    cells.push_back(cell);
    begin = end;
  }
  return cells;
}

// The first line of `md` that starts with `prefix`, as a map from its table's header cells to
// its own cells; empty where no line starts so. The table's header is the first line of the
// block of '|' lines the line is in.
std::map<std::string, std::string> table_row(const std::string& md, const std::string& prefix) {
  const std::size_t at = md.find("\n" + prefix);
  if (at == std::string::npos) return {};
  std::size_t header = at;  // the newline before the line
  while (header > 0) {
    const std::size_t before = md.rfind('\n', header - 1);
    if (before == std::string::npos || md[before + 1] != '|') break;
    header = before;
  }
  const auto line_at = [&](std::size_t newline) {
    const std::size_t end = md.find('\n', newline + 1);
    return md.substr(newline + 1, end == std::string::npos ? std::string::npos : end - newline - 1);
  };
  const std::vector<std::string> names = cells_of(line_at(header));
  const std::vector<std::string> values = cells_of(line_at(at));
  std::map<std::string, std::string> row;
  for (std::size_t i = 0; i < names.size() && i < values.size(); ++i) row[names[i]] = values[i];
  return row;
}

// A figure timed in both modes shows W8A16's kernel, time, ratio to cuBLAS bf16 and check; one
// from a report that predates W8A16 shows "-" in those columns, and so does its geomean.
TEST(BenchReport, MarkdownShowsTheW8A16FiguresOrDashes) {
  json doc = seed_report();
  json& timed = doc["rows"][0];  // self_attn.qkv_proj at M = 1
  timed["cublas_bf16_us"] = 30.0;
  timed["kernel_w8a16"] = "generic_a16/t64";
  timed["check_w8a16"] = "ok";
  timed["check_w8a16_rel_error"] = 2e-4;
  timed["w8a16_us"] = 12.0;
  timed["w8a16_spread"] = 0.02;
  timed["w8a16_tb_s"] = 1.5;
  doc["geomeans"][0]["w8a16_vs_cublas_bf16"] = 2.5;
  ASSERT_EQ(schema_errors(doc), std::vector<std::string>{});
  const std::string md = markdown_report(doc);

  const auto with = table_row(md, "| self_attn.qkv_proj | 2560x6144 | 1 |");
  ASSERT_FALSE(with.empty()) << md;
  EXPECT_EQ(with.at("kernel/config"), "prefill/w128_t256_st2");
  EXPECT_EQ(with.at("W8A16 kernel/config"), "generic_a16/t64");
  EXPECT_EQ(with.at("W8A16 us"), "12.00");
  EXPECT_EQ(with.at("W8A16 x bf16"), "2.50");
  EXPECT_EQ(with.at("W8A16 check"), "ok");
  EXPECT_EQ(with.at("check"), "ok");
  EXPECT_EQ(with.at("cuBLAS bf16 us"), "30.00");

  const auto without = table_row(md, "| self_attn.o_proj | 6144x2048 | 1 |");
  ASSERT_FALSE(without.empty()) << md;
  EXPECT_EQ(without.at("kernel/config"), "prefill/w128_t256_st2");
  for (const char* column : {"W8A16 kernel/config", "W8A16 us", "W8A16 x bf16", "W8A16 check"}) {
    EXPECT_EQ(without.at(column), "-") << column;
  }
  EXPECT_EQ(without.at("check"), "ok");

  // A failed W8A16 check is shown, and its time is not.
  doc["rows"][1]["kernel_w8a16"] = "generic_a16/t64";
  doc["rows"][1]["check_w8a16"] = "WRONG";
  doc["rows"][1]["check_w8a16_rel_error"] = 0.5;
  ASSERT_EQ(schema_errors(doc), std::vector<std::string>{});
  const auto wrong = table_row(markdown_report(doc), "| self_attn.o_proj | 6144x2048 | 1 |");
  ASSERT_FALSE(wrong.empty());
  EXPECT_EQ(wrong.at("W8A16 check"), "WRONG");
  EXPECT_EQ(wrong.at("W8A16 us"), "-");
  EXPECT_EQ(wrong.at("W8A16 x bf16"), "-");

  const auto geomean_with = table_row(md, "| 1 | 0.80 |");
  ASSERT_FALSE(geomean_with.empty()) << md;
  EXPECT_EQ(geomean_with.at("W8A16 x cuBLAS bf16"), "2.50");
  const auto geomean_without = table_row(md, "| 32 | 0.80 |");
  ASSERT_FALSE(geomean_without.empty()) << md;
  EXPECT_EQ(geomean_without.at("W8A16 x cuBLAS bf16"), "-");
}

// A geomean that lacks some of its M's rows (a failed check, an anchor error) says over how many
// rows it is taken; the counts are checked like every other field.
TEST(BenchReport, AGeomeanOverFewerRowsSaysHowMany) {
  json doc = seed_report(/*w8a16=*/true);
  doc["geomeans"][0]["rows"] = 8;
  doc["geomeans"][0]["rows_left_out"] = {{"vs_tri_mx", 3}, {"w8a16_vs_cublas_bf16", 1}};
  ASSERT_EQ(schema_errors(doc), std::vector<std::string>{});
  const auto counted = table_row(markdown_report(doc), "| 1 | 0.80 |");
  ASSERT_FALSE(counted.empty());
  EXPECT_EQ(counted.at("x tri_mx"), "5.00 (5 of 8 rows)");
  EXPECT_EQ(counted.at("W8A16 x cuBLAS bf16"), "1.25 (7 of 8 rows)");
  EXPECT_EQ(counted.at("x cuBLAS bf16"), "0.80");
  const auto whole = table_row(markdown_report(doc), "| 32 | 0.80 |");
  ASSERT_FALSE(whole.empty());
  EXPECT_EQ(whole.at("x tri_mx"), "5.00");

  const auto errors_with = [&](const std::function<void(json&)>& change) {
    json bad = doc;
    change(bad["geomeans"][0]);
    return schema_errors(bad);
  };
  EXPECT_THAT(errors_with([](json& g) { g["rows_left_out"]["vs_tri_mx"] = 9; }),
              ::testing::Contains(HasSubstr("rows_left_out 'vs_tri_mx' is not a count")));
  EXPECT_THAT(errors_with([](json& g) { g["rows_left_out"]["vs_tri_mx"] = -1; }),
              ::testing::Contains(HasSubstr("rows_left_out 'vs_tri_mx' is not a count")));
  EXPECT_THAT(errors_with([](json& g) { g["rows_left_out"]["made_up\x1b[2J"] = 1; }),
              ::testing::Contains(HasSubstr("names a ratio the report does not have")));
  EXPECT_THAT(errors_with([](json& g) { g.erase("rows"); }),
              ::testing::Contains(HasSubstr("'rows_left_out' without a row count")));
  EXPECT_THAT(errors_with([](json& g) { g["rows_left_out"] = "3"; }),
              ::testing::Contains(HasSubstr("'rows_left_out' has the wrong type")));
  EXPECT_THAT(
      errors_with([](json& g) { g.erase("w8a16_vs_cublas_bf16"); }),
      ::testing::Contains(HasSubstr("rows_left_out 'w8a16_vs_cublas_bf16' is not a count")));
}

// The W8A8 call from bf16 has its own check: where it failed, neither W8A8 time is needed; where
// it passed (or a report predates it), both are.
TEST(BenchReport, TheCallFromBf16IsCheckedBeforeItsTimesAreRequired) {
  json doc = seed_report(/*w8a16=*/true);
  doc["rows"][0]["check_linear"] = "WRONG";
  doc["rows"][0].erase("linear_us");
  doc["rows"][0].erase("gemm_us");
  EXPECT_EQ(schema_errors(doc), std::vector<std::string>{});
  doc["rows"][0]["check_linear"] = "ok";
  std::vector<std::string> e = schema_errors(doc);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_THAT(e[0], HasSubstr("rows[0]: missing 'gemm_us'"));
  EXPECT_THAT(e[1], HasSubstr("rows[0]: missing 'linear_us'"));
  doc["rows"][0]["check_linear"] = 3;
  EXPECT_THAT(schema_errors(doc)[0], HasSubstr("rows[0]: 'check_linear' has the wrong type"));
}

// The W8A16 fields are optional as a whole (older reports lack them), but a row that has the
// W8A16 figure must have its kernel and check, and its time where the check passed.
TEST(BenchReport, W8A16FieldsAreCheckedWherePresent) {
  json doc = seed_report(/*w8a16=*/true);
  ASSERT_EQ(schema_errors(doc), std::vector<std::string>{});
  doc["rows"][2].erase("kernel_w8a16");
  doc["rows"][3].erase("w8a16_us");
  doc["rows"][4]["check_w8a16"] = 1;
  doc["geomeans"][1]["w8a16_vs_cublas_bf16"] = "fast";
  std::vector<std::string> e = schema_errors(doc);
  ASSERT_EQ(e.size(), 4u);
  EXPECT_THAT(e[0], HasSubstr("rows[2]: missing 'kernel_w8a16'"));
  EXPECT_THAT(e[1], HasSubstr("rows[3]: missing 'w8a16_us'"));
  EXPECT_THAT(e[2], HasSubstr("rows[4]: 'check_w8a16' has the wrong type"));
  EXPECT_THAT(e[3], HasSubstr("geomeans[1]: 'w8a16_vs_cublas_bf16' has the wrong type"));

  // A failed W8A16 check needs no W8A16 time, nor an error where the call itself was refused.
  doc = seed_report(/*w8a16=*/true);
  doc["rows"][0]["check_w8a16"] = "WRONG";
  doc["rows"][0].erase("w8a16_us");
  doc["rows"][0].erase("w8a16_spread");
  doc["rows"][0].erase("w8a16_tb_s");
  doc["rows"][0].erase("check_w8a16_rel_error");
  doc["rows"][0]["w8a16_error"] = "no enabled kernel can run it";
  EXPECT_EQ(schema_errors(doc), std::vector<std::string>{});

  // A lone W8A16 time makes the row one with the W8A16 figure, which then lacks its check.
  doc = seed_report();
  doc["rows"][5]["w8a16_us"] = 3.0;
  e = schema_errors(doc);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_THAT(e[0], HasSubstr("rows[5]: missing 'kernel_w8a16'"));
  EXPECT_THAT(e[1], HasSubstr("rows[5]: missing 'check_w8a16'"));
}

// The batch-invariant mode's fields are optional as a whole (reports of a bench run without
// --batch-invariant lack them), but a row with one mode's figure must have its kernel and check,
// and its time where the check passed; every present field must have its type.
TEST(BenchReport, InvariantFieldsAreCheckedWherePresent) {
  json doc = seed_report(/*w8a16=*/true, /*invariant=*/true);
  ASSERT_EQ(schema_errors(doc), std::vector<std::string>{});
  doc["rows"][0].erase("kernel_invariant");
  doc["rows"][1].erase("invariant_us");
  doc["rows"][2]["check_invariant_w8a16"] = true;
  doc["rows"][3]["invariant_w8a16_us"] = "fast";
  doc["rows"][4]["invariant_rows_equal"] = "yes";
  doc["rows"][5]["invariant_spread"] = "small";
  doc["rows"][6].erase("check_invariant_w8a16_rel_error");
  doc["rows"][8]["invariant_default_us"] = "fast";
  doc["rows"][9]["invariant_w8a16_default_spread"] = true;
  doc["geomeans"][0]["invariant_over_default"] = "slower";
  doc["geomeans"][1]["invariant_w8a16_over_default"] = json::array();
  std::vector<std::string> e = schema_errors(doc);
  ASSERT_EQ(e.size(), 11u) << ::testing::PrintToString(e);
  EXPECT_THAT(e[0], HasSubstr("rows[0]: missing 'kernel_invariant'"));
  EXPECT_THAT(e[1], HasSubstr("rows[1]: missing 'invariant_us'"));
  EXPECT_THAT(e[2], HasSubstr("rows[2]: 'check_invariant_w8a16' has the wrong type"));
  EXPECT_THAT(e[3], HasSubstr("rows[3]: 'invariant_w8a16_us' has the wrong type"));
  EXPECT_THAT(e[4], HasSubstr("rows[4]: 'invariant_rows_equal' has the wrong type"));
  EXPECT_THAT(e[5], HasSubstr("rows[5]: 'invariant_spread' has the wrong type"));
  EXPECT_THAT(e[6], HasSubstr("rows[6]: missing 'check_invariant_w8a16_rel_error'"));
  EXPECT_THAT(e[7], HasSubstr("rows[8]: 'invariant_default_us' has the wrong type"));
  EXPECT_THAT(e[8], HasSubstr("rows[9]: 'invariant_w8a16_default_spread' has the wrong type"));
  EXPECT_THAT(e[9], HasSubstr("geomeans[0]: 'invariant_over_default' has the wrong type"));
  EXPECT_THAT(e[10], HasSubstr("geomeans[1]: 'invariant_w8a16_over_default' has the wrong type"));

  // A refused call: a WRONG check with its error needs no time nor rel error; the error is text.
  doc = seed_report(/*w8a16=*/true, /*invariant=*/true);
  for (const char* k :
       {"invariant_w8a16_us", "invariant_w8a16_spread", "check_invariant_w8a16_rel_error"}) {
    doc["rows"][0].erase(k);
  }
  doc["rows"][0]["check_invariant_w8a16"] = "WRONG";
  doc["rows"][0]["invariant_w8a16_error"] = "no enabled kernel keeps a fixed K order";
  EXPECT_EQ(schema_errors(doc), std::vector<std::string>{});
  doc["rows"][0]["invariant_w8a16_error"] = 7;
  e = schema_errors(doc);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_THAT(e[0], HasSubstr("rows[0]: 'invariant_w8a16_error' has the wrong type"));

  // A lone invariant field makes the row one with that figure, which then lacks its kernel and
  // check.
  doc = seed_report(/*w8a16=*/true);
  doc["rows"][7]["invariant_error"] = "refused";
  e = schema_errors(doc);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_THAT(e[0], HasSubstr("rows[7]: missing 'kernel_invariant'"));
  EXPECT_THAT(e[1], HasSubstr("rows[7]: missing 'check_invariant'"));
}

// Sets a row's four full-linear times: the default mode's and the batch-invariant mode's, W8A8
// (linear_us, invariant_us) and W8A16 (w8a16_us, invariant_w8a16_us).
void set_linear_times(json& row, double linear, double invariant, double w8a16,
                      double invariant_w8a16) {
  row["linear_us"] = linear;
  row["invariant_us"] = invariant;
  row["w8a16_us"] = w8a16;
  row["invariant_w8a16_us"] = invariant_w8a16;
}

// A report with the batch-invariant figures shows them in a table of their own (kernel, time,
// ratio to the default mode, check, per activation mode, and the rows-alone check) and in the
// geomean table's extra columns; a report without prints neither.
TEST(BenchReport, MarkdownShowsTheInvariantFiguresOnlyWhenPresent) {
  const std::string plain = markdown_report(seed_report(/*w8a16=*/true));
  EXPECT_THAT(plain, Not(HasSubstr("invariant")));
  EXPECT_THAT(plain,
              HasSubstr("\n| M | x cuBLAS bf16 | from bf16 x cuBLAS bf16 | x cuBLASLt FP8 | x "
                        "tri_mx | W8A16 x cuBLAS bf16 |\n|---|---|---|---|---|---|\n| 1 | 0.80 | "
                        "0.70 | 0.50 | 5.00 | 1.25 |\n"));

  json doc = seed_report(/*w8a16=*/true, /*invariant=*/true);
  json& row = doc["rows"][0];  // self_attn.qkv_proj at M = 1
  set_linear_times(row, 10.0, 15.0, 20.0, 25.0);
  row["kernel_invariant"] = "generic/t64_k1";
  row["kernel_invariant_w8a16"] = "generic_a16/t64_k1";
  doc["rows"][1]["invariant_rows_equal"] = false;
  doc["rows"][2]["check_invariant"] = "WRONG";
  doc["rows"][2].erase("invariant_us");
  doc["geomeans"][1].erase("invariant_over_default");
  ASSERT_EQ(schema_errors(doc), std::vector<std::string>{});
  const std::string md = markdown_report(doc);
  EXPECT_THAT(md, HasSubstr("The batch-invariant mode"));

  // The main table is the same as without the mode: its line for the row comes first.
  const auto main_row = table_row(md, "| self_attn.qkv_proj | 2560x6144 | 1 |");
  ASSERT_FALSE(main_row.empty()) << md;
  EXPECT_EQ(main_row.count("invariant us"), 0u);
  EXPECT_EQ(main_row.at("linear us"), "10.00");

  const std::size_t table = md.find("| layer | N x K | M | invariant kernel/config |");
  ASSERT_NE(table, std::string::npos) << md;
  const std::string invariant_md = md.substr(table - 1);
  const auto with = table_row(invariant_md, "| self_attn.qkv_proj | 2560x6144 | 1 |");
  ASSERT_FALSE(with.empty()) << md;
  EXPECT_EQ(with.at("invariant kernel/config"), "generic/t64_k1");
  EXPECT_EQ(with.at("invariant us"), "15.00");
  EXPECT_EQ(with.at("x default"), "1.50");
  EXPECT_EQ(with.at("invariant check"), "ok");
  EXPECT_EQ(with.at("W8A16 invariant kernel/config"), "generic_a16/t64_k1");
  EXPECT_EQ(with.at("W8A16 invariant us"), "25.00");
  EXPECT_EQ(with.at("W8A16 x default"), "1.25");
  EXPECT_EQ(with.at("W8A16 invariant check"), "ok");
  EXPECT_EQ(with.at("rows alone"), "equal");
  const auto differ = table_row(invariant_md, "| self_attn.o_proj | 6144x2048 | 1 |");
  ASSERT_FALSE(differ.empty()) << md;
  EXPECT_EQ(differ.at("rows alone"), "DIFFERENT");
  const auto wrong = table_row(invariant_md, "| shared_experts.gate_up_proj | 1536x6144 | 1 |");
  ASSERT_FALSE(wrong.empty()) << md;
  EXPECT_EQ(wrong.at("invariant check"), "WRONG");
  EXPECT_EQ(wrong.at("invariant us"), "-");
  EXPECT_EQ(wrong.at("x default"), "-");

  const auto geomean = table_row(md, "| 1 | 0.80 |");
  ASSERT_FALSE(geomean.empty()) << md;
  EXPECT_EQ(geomean.at("W8A16 x cuBLAS bf16"), "1.25");
  EXPECT_EQ(geomean.at("batch-invariant / default"), "1.50");
  EXPECT_EQ(geomean.at("W8A16 batch-invariant / default"), "1.75");
  const auto geomean_without = table_row(md, "| 32 | 0.80 |");
  ASSERT_FALSE(geomean_without.empty()) << md;
  EXPECT_EQ(geomean_without.at("batch-invariant / default"), "-");
  EXPECT_EQ(geomean_without.at("W8A16 batch-invariant / default"), "1.75");
}

// Under the mode's table, its cost per regime: the geomean of the figures' ratios at M <= 128 and
// at M >= 512, each mode on its own, a figure without the ratio left out and counted so.
TEST(BenchReport, MarkdownGivesTheInvariantCostPerRegime) {
  json doc = seed_report(/*w8a16=*/true, /*invariant=*/true);
  for (json& r : doc["rows"]) {
    const bool decode = r["m"].get<std::int64_t>() <= 128;
    r["invariant_default_us"] = 10.0;
    r["invariant_us"] = decode ? 12.0 : 15.0;
    r["w8a16_us"] = 10.0;  // no invariant_w8a16_default_us: the ratio falls back to w8a16_us
    r["invariant_w8a16_us"] = decode ? 11.0 : 13.0;
  }
  doc["rows"][3]["check_invariant"] = "WRONG";  // M = 1
  doc["rows"][3].erase("invariant_us");
  ASSERT_EQ(schema_errors(doc), std::vector<std::string>{});
  const std::string md = markdown_report(doc);
  EXPECT_THAT(md, HasSubstr("| regime | W8A8 x default | W8A16 x default |\n|---|---|---|\n"
                            "| M <= 128 | 1.20 (23 figures) | 1.10 (24 figures) |\n"
                            "| M >= 512 | 1.50 (24 figures) | 1.30 (24 figures) |\n"))
      << md;
}

// The mode's ratio divides by the default mode's same call timed in alternation with it
// (<prefix>_default_us) where the report has that; reports from before it divide by linear_us
// and w8a16_us, timed apart. Each activation mode on its own.
TEST(BenchReport, InvariantRatioTakesTheDefaultTimedInAlternationWherePresent) {
  json row = {{"linear_us", 10.0},
              {"invariant_us", 15.0},
              {"invariant_default_us", 12.0},
              {"w8a16_us", 20.0},
              {"invariant_w8a16_us", 25.0}};
  EXPECT_EQ(invariant_default_key(row, "invariant", "linear_us"), "invariant_default_us");
  EXPECT_DOUBLE_EQ(invariant_over_default(row, "invariant", "linear_us"), 1.25);
  EXPECT_EQ(invariant_default_key(row, "invariant_w8a16", "w8a16_us"), "w8a16_us");
  EXPECT_DOUBLE_EQ(invariant_over_default(row, "invariant_w8a16", "w8a16_us"), 1.25);
  row.erase("invariant_us");
  EXPECT_TRUE(std::isnan(invariant_over_default(row, "invariant", "linear_us")));

  json doc = seed_report(/*w8a16=*/true, /*invariant=*/true);
  json& first = doc["rows"][0];  // self_attn.qkv_proj at M = 1
  set_linear_times(first, 10.0, 15.0, 20.0, 25.0);
  first["invariant_default_us"] = 12.0;
  first["invariant_default_spread"] = 0.02;
  first["invariant_w8a16_default_us"] = 25.0;
  ASSERT_EQ(schema_errors(doc), std::vector<std::string>{});
  const std::string md = markdown_report(doc);
  const std::size_t table = md.find("| layer | N x K | M | invariant kernel/config |");
  ASSERT_NE(table, std::string::npos) << md;
  const auto with = table_row(md.substr(table - 1), "| self_attn.qkv_proj | 2560x6144 | 1 |");
  ASSERT_FALSE(with.empty()) << md;
  EXPECT_EQ(with.at("x default"), "1.25");
  EXPECT_EQ(with.at("W8A16 x default"), "1.00");
  EXPECT_THAT(md, HasSubstr("replayed in alternation"));
}

// Whether `line` holds a number with more than four digits after its decimal point.
bool has_long_fraction(const std::string& line) {
  for (std::size_t dot = line.find('.'); dot != std::string::npos; dot = line.find('.', dot + 1)) {
    std::size_t digits = 0;
    while (dot + 1 + digits < line.size() &&
           std::isdigit(static_cast<unsigned char>(line[dot + 1 + digits]))) {
      ++digits;
    }
    if (digits > 4) return true;
  }
  return false;
}

// Every row of every Markdown table has as many cells as its header, and no figure is printed
// unrounded (a placeholder short in a row's format once shifted every cell after it).
TEST(BenchReport, MarkdownRowsHaveTheirHeadersCellCount) {
  // Rows with the W8A16 and batch-invariant figures and rows without (an older report's) in one
  // table.
  json doc = seed_report(/*w8a16=*/true, /*invariant=*/true);
  const json old = seed_report();
  for (std::size_t i = 0; i < doc["rows"].size(); i += 2) doc["rows"][i] = old["rows"][i];
  doc["geomeans"][0] = old["geomeans"][0];
  doc["rows"][1]["check_w8a16"] = "WRONG";
  doc["rows"][1].erase("w8a16_us");
  ASSERT_EQ(schema_errors(doc), std::vector<std::string>{});
  const std::string md = markdown_report(doc);
  std::size_t header_cells = 0;
  int tables = 0;
  std::size_t begin = 0;
  while (begin < md.size()) {
    std::size_t end = md.find('\n', begin);
    if (end == std::string::npos) end = md.size();
    const std::string line = md.substr(begin, end - begin);
    begin = end + 1;
    if (line.empty() || line[0] != '|') {
      header_cells = 0;
      continue;
    }
    const auto cells = static_cast<std::size_t>(std::count(line.begin(), line.end(), '|')) - 1;
    if (header_cells == 0) {
      header_cells = cells;
      ++tables;
      continue;
    }
    EXPECT_EQ(cells, header_cells) << line;
    EXPECT_FALSE(has_long_fraction(line)) << line;
  }
  EXPECT_GE(tables, 4);
}

// The report says whether its figures were timed in a burst or after warming (the H200's power
// cap moves large-M figures by up to 10% between the two; docs/PERFORMANCE.md).
TEST(BenchReport, TimingNoteSaysBurstOrSustained) {
  json doc = seed_report();  // no timing field, as in reports that predate it: burst
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
  json doc = seed_report();
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
