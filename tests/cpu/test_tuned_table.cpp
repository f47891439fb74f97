// The tuned-table parser: every bad line is a warning naming file:line, nothing throws, and no
// line is dropped silently (TableStats accounts for each).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <clocale>
#include <filesystem>
#include <fstream>
#include <random>

#include "cpu/registry_test_kernels.hpp"
#include "cpu/scratch_dir.hpp"
#include "mxlinear/tuned_table.hpp"
#include "support/random.hpp"

namespace mxlinear::test {
namespace {

using ::testing::HasSubstr;

TableContext context() {
  TableContext c;
  c.kernel_configs = {{"tuned", {"t64", "t128"}}, {"generic", {"g"}}};
  c.library_version = "0.1";
  c.cuda_version = "13.0";
  return c;
}

const std::string kGood = "sm_90a,132,2560,6144,64,tuned,t64,10.5,0.25,0.1,13.0";

void expect_accounted(const TableStats& s) {
  EXPECT_EQ(s.data_lines, s.accepted + s.repeats + s.skipped);
}

// The warnings add() left: one per skipped row up to kMaxRowWarnings, then one for the rest.
int expected_warnings(const TableStats& s) {
  EXPECT_EQ(s.skipped_unshown, std::max(0, s.skipped - kMaxRowWarnings));
  return s.skipped - s.skipped_unshown + (s.skipped_unshown > 0 ? 1 : 0);
}

TEST(TunedTable, MBucketIsTheNextPowerOfTwo) {
  EXPECT_EQ(m_bucket(1), 1);
  EXPECT_EQ(m_bucket(2), 2);
  EXPECT_EQ(m_bucket(3), 4);
  EXPECT_EQ(m_bucket(33), 64);
  EXPECT_EQ(m_bucket(64), 64);
  EXPECT_EQ(m_bucket(8192), 8192);
}

// Rows naming a W8A16 kernel are that mode's: a shape keeps a row per mode for the same M, and
// a lookup sees only its mode's rows (never the other mode's nearest bucket).
TEST(TunedTable, RowsOfEachActivationModeAreKeptApart) {
  TableContext c = context();
  c.kernel_configs["tuned_a16"] = {"t64"};
  c.w8a16_kernels = {"tuned_a16"};
  TunedTable t;
  const TableStats s = t.add(kGood + "\nsm_90a,132,2560,6144,64,tuned_a16,t64,9.5,0.25,0.1,13.0\n" +
                                 "sm_90a,132,2560,6144,8,tuned,t128,3.0,0.25,0.1,13.0\n",
                             "modes.csv", c);
  EXPECT_EQ(s.accepted, 3);
  EXPECT_TRUE(t.warnings().empty());
  EXPECT_EQ(t.lookup("sm_90a", 132, 2560, 6144, 64)->kernel, "tuned");
  EXPECT_EQ(t.lookup("sm_90a", 132, 2560, 6144, 64, true)->kernel, "tuned_a16");
  // W8A16 at M = 8: no row of its own; its mode's nearest bucket (64), not W8A8's row for 8.
  EXPECT_FALSE(t.lookup("sm_90a", 132, 2560, 6144, 8, true).has_value());
  EXPECT_EQ(t.nearest("sm_90a", 132, 2560, 6144, 8, true)->kernel, "tuned_a16");
  EXPECT_EQ(t.lookup("sm_90a", 132, 2560, 6144, 8)->config, "t128");
  EXPECT_FALSE(t.lookup("sm_90a", 132, 2560, 2048, 8, true).has_value());
  EXPECT_TRUE(t.has_shape("sm_90a", 132, 2560, 6144, "tuned_a16"));
}

TEST(TunedTable, GoodRowIsAcceptedWithItsSource) {
  TunedTable t;
  const TableStats s = t.add(
      "# comment\narch,sms,n,k,m,kernel,config,us,error_ratio,mxlinear_version,cuda_version\n" +
          kGood + "\r\n",
      "a.csv", context());
  EXPECT_EQ(s.accepted, 1);
  EXPECT_TRUE(t.warnings().empty());
  const auto v = t.lookup("sm_90a", 132, 2560, 6144, 40);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->config, "t64");
  EXPECT_EQ(v->source, "a.csv:3");
  EXPECT_DOUBLE_EQ(v->us, 10.5);
}

// A host application may set a comma-decimal locale; the table's '.' must still parse. Runs where
// such a locale is installed (else a visible skip: no other locale changes strtod's parse).
TEST(TunedTable, RowsParseUnderACommaDecimalLocale) {
  std::string set;
  for (const char* name : {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8"}) {
    if (std::setlocale(LC_NUMERIC, name) != nullptr) {
      set = name;
      break;
    }
  }
  if (set.empty()) GTEST_SKIP() << "no comma-decimal locale is installed";
  TunedTable t;
  const TableStats s = t.add(kGood + "\n", "a.csv", context());
  std::setlocale(LC_NUMERIC, "C");
  EXPECT_EQ(s.accepted, 1) << set << ": " << (t.warnings().empty() ? "" : t.warnings().front());
  const auto v = t.lookup("sm_90a", 132, 2560, 6144, 40);
  ASSERT_TRUE(v.has_value());
  EXPECT_DOUBLE_EQ(v->us, 10.5);
}

// A damaged file of a million bad rows gives its first kMaxRowWarnings warnings and one that
// counts the rest, not a million.
TEST(TunedTable, WarningsOfOneTableAreBounded) {
  std::string text;
  for (int i = 0; i < 1000000; ++i) text += "x\n";
  TunedTable t;
  const TableStats s = t.add(text, "flood.csv", context());
  expect_accounted(s);
  EXPECT_EQ(s.skipped, 1000000);
  ASSERT_EQ(static_cast<int>(t.warnings().size()), expected_warnings(s));
  ASSERT_EQ(t.warnings().size(), static_cast<std::size_t>(kMaxRowWarnings) + 1);
  EXPECT_THAT(t.warnings()[kMaxRowWarnings - 1], HasSubstr("flood.csv:20: row skipped"));
  EXPECT_THAT(t.warnings().back(),
              HasSubstr("flood.csv: 999980 more rows skipped, not shown (the first 20 are)"));
  t.add(kGood + "\n" + text.substr(0, 6), "next.csv", context());  // a later table warns anew
  EXPECT_THAT(t.warnings().back(), HasSubstr("next.csv:4: row skipped"));
}

struct BadRow {
  const char* line;
  const char* expect;
};

TEST(TunedTable, EveryMalformedRowIsAWarningNamingFileAndLine) {
  const BadRow rows[] = {
      {"sm_90a,132,2560,6144,64,tuned,t64,10.5,0.25,0.1", "has 10 fields"},
      {"sm_90a,132,2560,6144,64,tuned,t64,10.5,0.25,0.1,13.0,extra", "more than 11"},
      {"sm_90a,0,2560,6144,64,tuned,t64,10.5,0.25,0.1,13.0", "sms '0'"},
      {"sm_90a,132,-5,6144,64,tuned,t64,10.5,0.25,0.1,13.0", "n '-5'"},
      {"sm_90a,132,99999999999999999999999,6144,64,tuned,t64,1,0.2,0.1,13.0", "has n"},
      {"sm_90a,132,2560,6100,64,tuned,t64,10.5,0.25,0.1,13.0", "multiple of 32"},
      {"sm_90a,132,2560,6144,48,tuned,t64,10.5,0.25,0.1,13.0", "power-of-two bucket"},
      {"sm_90a,132,2560,6144,=0,tuned,t64,10.5,0.25,0.1,13.0", "has m '=0'"},
      {"sm_90a,132,2560,6144,64,fast,t64,10.5,0.25,0.1,13.0",
       "kernel 'fast'; expected one of: generic, tuned"},
      {"sm_90a,132,2560,6144,64,tuned,t256,10.5,0.25,0.1,13.0", "config 't256' of kernel tuned"},
      {"sm_90a,132,2560,6144,64,tuned,t64,nan,0.25,0.1,13.0", "us 'nan'"},
      {"sm_90a,132,2560,6144,64,tuned,t64,1e999,0.25,0.1,13.0", "us '1e999'"},
      {"sm_90a,132,2560,6144,64,tuned,t64,10,1.5,0.1,13.0", "error_ratio '1.5'"},
      {"sm_90a,132,2560,6144,64,tuned,t64,10,0.5,0.0,13.0", "stale: tuned with mxlinear 0.0"},
      {"sm_90a,132,2560,6144,64,tuned,t64,10,0.5,0.1,12.8", "stale: tuned with CUDA 12.8"},
      {",132,2560,6144,64,tuned,t64,10,0.5,0.1,13.0", "empty or unprintable arch"},
  };
  std::string text;
  for (const BadRow& r : rows) text += std::string(r.line) + "\n";
  TunedTable t;
  const TableStats s = t.add(text, "bad.csv", context());
  expect_accounted(s);
  EXPECT_EQ(s.accepted, 0);
  ASSERT_EQ(t.warnings().size(), std::size(rows));
  for (std::size_t i = 0; i < std::size(rows); ++i) {
    EXPECT_THAT(t.warnings()[i], HasSubstr("bad.csv:" + std::to_string(i + 1) + ": row skipped"));
    EXPECT_THAT(t.warnings()[i], HasSubstr(rows[i].expect)) << rows[i].line;
  }
  EXPECT_TRUE(t.rows().empty());
}

TEST(TunedTable, DuplicateKeysResolveDeterministicallyFirstRowWins) {
  TunedTable t;
  const std::string other = "sm_90a,132,2560,6144,64,tuned,t128,9.0,0.25,0.1,13.0";
  const TableStats s = t.add(kGood + "\n" + kGood + "\n" + other + "\n", "d.csv", context());
  EXPECT_EQ(s.accepted, 1);
  EXPECT_EQ(s.repeats, 1);
  EXPECT_EQ(s.skipped, 1);
  ASSERT_EQ(t.warnings().size(), 1u);
  EXPECT_THAT(t.warnings()[0], HasSubstr("d.csv:3: row skipped: it repeats the key of d.csv:1"));
  EXPECT_EQ(t.lookup("sm_90a", 132, 2560, 6144, 64)->config, "t64");
}

TEST(TunedTable, ALaterTableOverridesRowsOfAnEarlierOne) {
  TunedTable t;
  t.add(kGood + "\n", "shipped.csv", context());
  t.add("sm_90a,132,2560,6144,64,tuned,t128,9.0,0.25,0.1,13.0\n", "user.csv", context());
  EXPECT_EQ(t.lookup("sm_90a", 132, 2560, 6144, 64)->config, "t128");
  EXPECT_EQ(t.lookup("sm_90a", 132, 2560, 6144, 64)->source, "user.csv:1");
}

TEST(TunedTable, MissingFileIsAWarning) {
  TunedTable t;
  t.add_file("/nonexistent/mxlinear/table.csv", context());
  ASSERT_EQ(t.warnings().size(), 1u);
  EXPECT_THAT(t.warnings()[0], HasSubstr("/nonexistent/mxlinear/table.csv: tuned table cannot be "
                                         "opened: No such file or directory"));
}

TEST(TunedTable, FileIsReadAndItsRowsNameIt) {
  const ScratchDir dir;
  const std::string path = dir.file("user.csv", "# a table\n" + kGood + "\n");
  TunedTable t;
  t.add_file(path, context());
  EXPECT_TRUE(t.warnings().empty());
  ASSERT_TRUE(t.lookup("sm_90a", 132, 2560, 6144, 64).has_value());
  EXPECT_EQ(t.lookup("sm_90a", 132, 2560, 6144, 64)->source, path + ":2");
}

// A path that is not a regular file is refused at once, without reading: a directory (which
// opens and reads as empty), /dev/zero (which never ends) and a FIFO (whose open waits for a
// writer).
TEST(TunedTable, PathThatIsNotARegularFileIsAWarningAndAddsNothing) {
  const ScratchDir dir;
  const std::string fifo = (dir.path / "fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::pair<std::string, std::string> cases[] = {
      {dir.path.string(), "is a directory, not a regular file"},
      {"/dev/zero", "is a character device, not a regular file"},
      {fifo, "is a FIFO, not a regular file"},
  };
  for (const auto& [path, expect] : cases) {
    TunedTable t;
    t.add_file(path, context());
    ASSERT_EQ(t.warnings().size(), 1u) << path;
    EXPECT_THAT(t.warnings()[0], HasSubstr(path + ": tuned table " + expect)) << path;
    EXPECT_THAT(t.warnings()[0], HasSubstr("it is ignored"));
    EXPECT_TRUE(t.rows().empty());
  }
}

// A table of exactly the cap is read; one byte more is refused whole, naming the cap and how
// much was read, so a truncated last row can never be taken.
TEST(TunedTable, FileOverTheSizeCapIsAWarningNamingTheCap) {
  const ScratchDir dir;
  std::string text = kGood + "\n";
  const std::string comment = "#" + std::string(1000, '-') + "\n";
  while (text.size() + comment.size() <= TunedTable::kMaxFileBytes) text += comment;
  text += "#" + std::string(TunedTable::kMaxFileBytes - text.size() - 1, '-');
  ASSERT_EQ(text.size(), TunedTable::kMaxFileBytes);
  TunedTable at_cap;
  at_cap.add_file(dir.file("at_cap.csv", text), context());
  EXPECT_TRUE(at_cap.warnings().empty());
  EXPECT_EQ(at_cap.rows().size(), 1u);

  TunedTable over;
  const std::string path = dir.file("over.csv", text + "\n");
  over.add_file(path, context());
  ASSERT_EQ(over.warnings().size(), 1u);
  EXPECT_THAT(over.warnings()[0],
              HasSubstr(path + ": tuned table is larger than the cap of 16777216 bytes (16 MiB): "
                               "reading stopped after 16777217 bytes"));
  EXPECT_TRUE(over.rows().empty());
}

// What a warning echoes of a table (its path, its fields) is escaped and cut short: a binary
// file or a control sequence in a path never reaches the terminal as such.
TEST(TunedTable, WarningsEscapeAndBoundWhatTheyEcho) {
  TunedTable t;
  std::string junk_field(900, '\x1b');
  const TableStats s = t.add("sm_90a,132," + junk_field + ",6144,64,tuned,t64,1,0.1,0.1,13.0\n",
                             "evil\x1b[2J.csv", context());
  EXPECT_EQ(s.skipped, 1);
  ASSERT_EQ(t.warnings().size(), 1u);
  const std::string& w = t.warnings()[0];
  EXPECT_THAT(w, HasSubstr("evil\\x1b[2J.csv:1: row skipped: it has n '\\x1b\\x1b"));
  EXPECT_THAT(w, HasSubstr("(850 more bytes not shown)"));
  EXPECT_LT(w.size(), 400u);
  for (const char c : w) EXPECT_TRUE(c >= 0x20 && c < 0x7F) << static_cast<int>(c);
}

TEST(TunedTable, OverlongLineIsSkippedWithAWarning) {
  TunedTable t;
  const TableStats s = t.add(std::string(5000, 'x') + "\n" + kGood, "long.csv", context());
  expect_accounted(s);
  EXPECT_EQ(s.accepted, 1);
  EXPECT_THAT(t.warnings().at(0), HasSubstr("long.csv:1: line of 5000 bytes skipped"));
}

// The shapes a fuzzer throws: random bytes, every truncation of a valid table, huge numbers.
// None may crash, throw, or change the table without a warning.
TEST(TunedTable, RandomBytesTruncationsAndHugeNumbersNeverCrashOrChangeSilently) {
  auto rng = make_rng();
  const std::string table =
      "# t\n" + kGood + "\nsm_90a,132,6144,768,=48,generic,g,3,0.1,0.1,13.0\n";
  for (std::size_t cut = 0; cut <= table.size(); ++cut) {
    TunedTable t;
    const TableStats s = t.add(table.substr(0, cut), "cut.csv", context());
    expect_accounted(s);
    EXPECT_EQ(static_cast<int>(t.rows().size()), s.accepted);
  }
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(0, 400);
  for (int i = 0; i < 2000; ++i) {
    std::string junk(static_cast<std::size_t>(length(rng)), '\0');
    for (char& c : junk) c = static_cast<char>(byte(rng));
    TunedTable t;
    const TableStats s = t.add(junk, "junk.csv", context());
    expect_accounted(s);
    EXPECT_EQ(static_cast<int>(t.warnings().size()), expected_warnings(s));
  }
  for (const char* huge :
       {"9223372036854775808", "18446744073709551616", "1e308", "-0", "0x10", "2147483648"}) {
    TunedTable t;
    const std::string line =
        std::string("sm_90a,132,") + huge + ",6144,64,tuned,t64,1,0.1,0.1,13.0";
    const TableStats s = t.add(line, "huge.csv", context());
    EXPECT_EQ(s.skipped, 1) << huge;
    EXPECT_TRUE(t.rows().empty()) << huge;
  }
}

}  // namespace
}  // namespace mxlinear::test
