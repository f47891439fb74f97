// for_display: how every message echoes a value a user supplied (a path, an environment
// variable, a line of a file): printable, escaped, and cut short with a count of the rest.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "cpu/registry_test_kernels.hpp"
#include "host/log.hpp"
#include "host/registry/registry.hpp"

namespace mxlinear::test {
namespace {

using detail::for_display;
using ::testing::HasSubstr;

TEST(ForDisplay, PrintableValuesAreUnchanged) {
  EXPECT_EQ(for_display(""), "");
  EXPECT_EQ(for_display("configs/h200-sm_90a-132.csv"), "configs/h200-sm_90a-132.csv");
  EXPECT_EQ(for_display(" ~!{}\\'\""), " ~!{}\\'\"");
}

TEST(ForDisplay, BytesOutsidePrintableAsciiAreEscaped) {
  EXPECT_EQ(for_display(std::string("a\nb\tc\x1b[2J\x7f", 10)), "a\\x0ab\\x09c\\x1b[2J\\x7f");
  EXPECT_EQ(for_display(std::string("\0\xff\x80", 3)), "\\x00\\xff\\x80");
  EXPECT_EQ(for_display("caf\xc3\xa9"), "caf\\xc3\\xa9");
}

TEST(ForDisplay, LongValuesAreCutAtTheLimitWithTheCountLeftOut) {
  EXPECT_EQ(for_display(std::string(200, 'a')), std::string(200, 'a'));
  EXPECT_EQ(for_display(std::string(201, 'a')),
            std::string(200, 'a') + "... (1 more bytes not shown)");
  EXPECT_EQ(for_display(std::string(100000, 'a')),
            std::string(200, 'a') + "... (99800 more bytes not shown)");
  // An escape is never split: 50 escaped bytes fill 200 characters exactly.
  EXPECT_EQ(for_display(std::string(51, '\x01')), [] {
    std::string s;
    for (int i = 0; i < 50; ++i) s += "\\x01";
    return s;
  }() + "... (1 more bytes not shown)");
  EXPECT_EQ(for_display("abcdef", 3), "abc... (3 more bytes not shown)");
  EXPECT_EQ(for_display("ab\x01", 4), "ab... (1 more bytes not shown)");
}

// The registry's warnings about environment values echo them through for_display: a 100 KB
// value or control bytes never reach the terminal whole.
TEST(ForDisplay, EnvironmentWarningsEchoValuesCutAndEscaped) {
  const std::string huge(100000, 'a');
  const Environment env = Environment::from({{"MXLINEAR_BACKEND", huge},
                                             {"MXLINEAR_DISABLED_KERNELS", "x\x1b[31m,tuned"},
                                             {"MXLINEAR_LOG", std::string(5000, '\x07')},
                                             {"MXLINEAR_COST_MODEL", "2\r"}});
  const std::vector<std::shared_ptr<const Kernel>> kernels = {
      std::make_shared<FakeKernel>("tuned", false, std::vector<std::string>{"t"})};
  const Registry r(kernels, TunedTable{}, env);
  std::string all;
  for (const std::string& w : r.warnings()) {
    EXPECT_LT(w.size(), 500u) << w.substr(0, 300);
    for (const char c : w) EXPECT_TRUE(c >= 0x20 && c < 0x7F) << w.substr(0, 300);
    all += w + "\n";
  }
  EXPECT_THAT(all, HasSubstr("MXLINEAR_BACKEND is '" + std::string(200, 'a') +
                             "... (99800 more bytes not shown)'"));
  EXPECT_THAT(all, HasSubstr("MXLINEAR_DISABLED_KERNELS names 'x\\x1b[31m'"));
  EXPECT_THAT(all, HasSubstr("MXLINEAR_LOG is '\\x07\\x07"));
  EXPECT_THAT(all, HasSubstr("MXLINEAR_COST_MODEL is '2\\x0d'"));
  // Valid values are untouched: the named kernel is still disabled.
  EXPECT_EQ(env.disabled.at(1), "tuned");
}

}  // namespace
}  // namespace mxlinear::test
