// The anchors file parser (bench/anchor_table.hpp): the committed file, each kind of bad line
// named, and random bytes that never crash it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "anchor_table.hpp"
#include "mxlinear/error.hpp"

namespace mxlinear::bench {
namespace {

using ::testing::HasSubstr;

std::map<AnchorKey, double> parse(const std::string& text) {
  std::istringstream in(text);
  return parse_tri_mx(in, "test.csv");
}

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.argument(), "anchors");
    return e.what();
  }
  ADD_FAILURE() << "no error for: " << text;
  return {};
}

constexpr const char* kHeader = "layer,n,k,m,bf16_us,fp8_tensor_us,fp8_block_us,tri_mx_us\n";

TEST(AnchorTable, CommittedH200FileHasEverySeedFigure) {
  const auto table = load_tri_mx(MXLINEAR_SOURCE_DIR "/bench/anchors/h200-2026-11-30.csv");
  EXPECT_EQ(table.size(), 48u);  // 8 shapes x 6 M
  EXPECT_DOUBLE_EQ(table.at({2560, 6144, 1}), 72.4);
  EXPECT_DOUBLE_EQ(table.at({2560, 6144, 32}), 74.7);
}

TEST(AnchorTable, SkipsCommentsBlankLinesAndTheHeaderAndTakesCrLf) {
  const auto table = parse(std::string("# note\n\n") + kHeader + "qkv,2560,6144,1,1,2,3,72.4\r\n");
  ASSERT_EQ(table.size(), 1u);
  EXPECT_DOUBLE_EQ(table.at({2560, 6144, 1}), 72.4);
  EXPECT_TRUE(load_tri_mx("").empty());
}

TEST(AnchorTable, NamesTheLineAndWhatWasExpected) {
  EXPECT_THAT(error_of("qkv,2560,6144,1,1,2,72.4\n"),
              HasSubstr("'test.csv'; line 1 has 7 fields; expected 8"));
  EXPECT_THAT(error_of(std::string(kHeader) + "qkv,2560,abc,1,1,2,3,72.4\n"),
              HasSubstr("line 2 has k = 'abc'; expected a positive integer"));
  EXPECT_THAT(error_of("qkv,2560,6144,0,1,2,3,72.4\n"), HasSubstr("has m = '0'"));
  EXPECT_THAT(error_of("qkv,-5,6144,1,1,2,3,72.4\n"), HasSubstr("has n = '-5'"));
  EXPECT_THAT(error_of("qkv,2560,6144,1,1,2,3,72.4us\n"), HasSubstr("tri_mx_us = '72.4us'"));
  EXPECT_THAT(error_of("qkv,2560,6144,1,1,2,3,nan\n"), HasSubstr("tri_mx_us = 'nan'"));
  EXPECT_THAT(error_of("qkv,2560,6144,1,1,2,3,\n"), HasSubstr("tri_mx_us = ''"));
  EXPECT_THAT(error_of("qkv,99999999999999999999,6144,1,1,2,3,5\n"), HasSubstr("has n = "));
  EXPECT_THAT(error_of("a,1,2,3,4,5,6,7\nb,1,2,3,4,5,6,8\n"),
              HasSubstr("line 2 repeats (n, k, m) = (1, 2, 3) of line 1"));
  EXPECT_THAT(error_of("a,1,2,3,4,5,6," + std::string(500, '9') + "x\n"), HasSubstr("...'"));
}

TEST(AnchorTable, AFileThatCannotBeOpenedIsNamed) {
  try {
    load_tri_mx("/nonexistent/anchors.csv");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'/nonexistent/anchors.csv', which cannot be opened"));
  }
}

// Random bytes, and random truncations and byte flips of the committed file: a table or an
// Error, never anything else.
TEST(AnchorTable, AnyBytesGiveATableOrAnError) {
  std::ifstream in(MXLINEAR_SOURCE_DIR "/bench/anchors/h200-2026-11-30.csv");
  const std::string valid((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(valid.empty());
  std::mt19937_64 rng(std::random_device{}());
  const auto seed = rng();
  SCOPED_TRACE("seed " + std::to_string(seed));
  rng.seed(seed);
  int tables = 0, errors = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    if (i % 3 == 0) {
      text.resize(rng() % 200);
      for (char& c : text) c = static_cast<char>(rng());
    } else {
      text = valid.substr(0, rng() % (valid.size() + 1));
      for (int flips = static_cast<int>(rng() % 4); flips > 0 && !text.empty(); --flips) {
        text[rng() % text.size()] = static_cast<char>(rng());
      }
    }
    try {
      parse(text);
      ++tables;
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(tables, 0);
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace mxlinear::bench
