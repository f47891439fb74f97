// Config names: each kernel's config prints and parses its own name, one vocabulary across the
// kernels (config_name.hpp). Every compiled config survives the round trip, the registry lists
// exactly those names, and the parser accepts nothing but the names the printer writes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "device/kernels/decode/decode_gemm.hpp"
#include "device/kernels/gemv/gemv_gemm.hpp"
#include "device/kernels/generic/generic_gemm.hpp"
#include "device/kernels/prefill/prefill_gemm.hpp"
#include "host/registry/decode_config.hpp"
#include "host/registry/gemv_config.hpp"
#include "host/registry/generic_config.hpp"
#include "host/registry/prefill_config.hpp"
#include "host/registry/registry.hpp"
#include "mxlinear/tuned_table.hpp"

namespace mxlinear::test {
namespace {

using detail::DecodeConfig;
using detail::GemvConfig;
using detail::GenericConfig;
using detail::PrefillConfig;
using ::testing::HasSubstr;

std::vector<GemvConfig> every_gemv_config() {
  std::vector<GemvConfig> out;
  for (const auto next : {device::NextLaunch::kAfterActivation, device::NextLaunch::kAfterWait,
                          device::NextLaunch::kAtEntry}) {
    for (const auto& i : device::gemv_gemm_instances()) out.push_back(GemvConfig::of(i, next));
  }
  return out;
}

std::vector<DecodeConfig> every_decode_config() {
  std::vector<DecodeConfig> out;
  for (const auto& i : device::decode_gemm_instances()) {
    for (const int splits : {1, 2, 4, 8}) out.push_back(DecodeConfig::of(i, splits));
  }
  return out;
}

std::vector<PrefillConfig> every_prefill_config() {
  std::vector<PrefillConfig> out;
  const auto instances = device::prefill_gemm_instances();
  for (std::size_t i = 0; i < instances.size(); ++i) {
    for (int splits = 1; splits <= device::kPrefillMaxSplits; ++splits) {
      if (device::prefill_gemm_splits_fit(static_cast<int>(i), splits)) {
        out.push_back(PrefillConfig::of(instances[i], splits));
      }
    }
  }
  return out;
}

std::vector<GenericConfig> every_generic_config() {
  std::vector<GenericConfig> out;
  for (const auto& i : device::generic_gemm_configs()) out.push_back(GenericConfig::of(i));
  return out;
}

template <class Config>
std::vector<std::string> names_of(const std::vector<Config>& configs) {
  std::vector<std::string> names;
  for (const Config& c : configs) names.push_back(c.name());
  return names;
}

const Kernel& builtin(std::string_view name) {
  static const auto kernels = builtin_kernels();
  const auto it = std::find_if(kernels.begin(), kernels.end(),
                               [&](const auto& k) { return k->name() == name; });
  return **it;
}

// parse(name(c)) == c for every compiled config, and distinct configs have distinct names.
template <class Config>
void expect_round_trips(const std::vector<Config>& configs) {
  ASSERT_FALSE(configs.empty());
  std::set<std::string> names;
  for (const Config& c : configs) {
    const std::string name = c.name();
    SCOPED_TRACE(name);
    const std::optional<Config> parsed = Config::parse(name);
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, c);
    EXPECT_EQ(parsed->name(), name);
    names.insert(name);
  }
  EXPECT_EQ(names.size(), configs.size()) << "two configs share a name";
}

TEST(ConfigNames, EveryCompiledConfigRoundTrips) {
  expect_round_trips(every_gemv_config());
  expect_round_trips(every_decode_config());
  expect_round_trips(every_prefill_config());
  expect_round_trips(every_generic_config());
}

// The registry offers exactly the compiled configs, by the names they print.
TEST(ConfigNames, TheRegistryListsTheCompiledConfigsByTheirNames) {
  const auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(sorted(builtin("gemv").configs()), sorted(names_of(every_gemv_config())));
  EXPECT_EQ(sorted(builtin("decode").configs()), sorted(names_of(every_decode_config())));
  // The prefill kernel offers no 7-way split (it helps no shape); every other count that fits.
  std::vector<PrefillConfig> prefill = every_prefill_config();
  std::erase_if(prefill, [](const PrefillConfig& c) { return c.splits == 7; });
  EXPECT_EQ(sorted(builtin("prefill").configs()), sorted(names_of(prefill)));
  EXPECT_EQ(builtin("generic").configs(), names_of(every_generic_config()));
}

// Each token means one thing in every kernel: the same fields print the same tokens.
TEST(ConfigNames, OneVocabularyAcrossTheKernels) {
  EXPECT_EQ((GemvConfig{.rows = 48, .tokens = 8, .kwarps = 4, .stages = 3}.name()),
            "w48_t8_kwarps4_st3");
  EXPECT_EQ(
      (GemvConfig{
          .kwarps = 8, .stages = 4, .splits = 2, .next_launch = device::NextLaunch::kAfterWait}
           .name()),
      "w16_t8_kwarps8_st4_split2_waited");
  EXPECT_EQ((GemvConfig{.kwarps = 8, .next_launch = device::NextLaunch::kAtEntry}.name()),
            "w16_t8_kwarps8_early");
  // One K warp per row tile: no kwarps token, as in the generic kernel.
  EXPECT_EQ((GemvConfig{.rows = 32, .kwarps = 1, .stages = 6, .k_parts = true}.name()),
            "w32_t8_st6_kparts");
  EXPECT_EQ((DecodeConfig{.tokens = 8, .stages = 8, .alternating = true, .splits = 4}.name()),
            "w64_t8_st8_alt_split4");
  EXPECT_EQ((DecodeConfig{.tokens = 128}.name()), "w64_t128_st4");
  EXPECT_EQ(
      (PrefillConfig{
          .rows = 64, .tokens = 32, .stages = 8, .overlap = true, .alternating = true, .splits = 2}
           .name()),
      "w64_t32_st8_overlap_alt_split2");
  EXPECT_EQ((PrefillConfig{
                .tokens = 256, .bk = 64, .overlap = true, .walk = PrefillConfig::Walk::kStreamK}
                 .name()),
            "w128_t256_st4_bk64_overlap_streamk");
  EXPECT_EQ(
      (PrefillConfig{.tokens = 256, .bk = 64, .walk = PrefillConfig::Walk::kPersistent}.name()),
      "w128_t256_st4_bk64_persistent");
  EXPECT_EQ(
      (GenericConfig{
          .rows = 32, .tokens = 16, .warp_rows = 16, .warp_tokens = 16, .kwarps = 4, .stages = 8}
           .name()),
      "w32_t16_warp16x16_kwarps4_st8");
  EXPECT_EQ(GenericConfig{}.name(), "w128_t128_warp32x64_st4");
}

// Names that are not what the printer writes: malformed, reordered, repeated or leftover
// tokens, numbers with leading zeros or out of range, and optional tokens that spell the value
// their absence already means.
TEST(ConfigNames, ParseRejectsEverythingThePrinterDoesNotWrite) {
  using namespace std::string_literals;
  for (const std::string& bad : {""s,
                                 "_"s,
                                 "__"s,
                                 "w64"s,
                                 "w64_"s,
                                 "_w64_t8_st4"s,
                                 "w64__t8_st4"s,
                                 "w64_t8_st4_"s,
                                 "W64_t8_st4"s,
                                 "w64_T8_st4"s,
                                 " w64_t8_st4"s,
                                 "w64_t8_st4 "s,
                                 "w64_t8_st4\n"s,
                                 "w64_t8_st4\0"s,
                                 "w064_t8_st4"s,
                                 "w0_t8_st4"s,
                                 "w-64_t8_st4"s,
                                 "w+64_t8_st4"s,
                                 "w64_t8_st4_split1"s,
                                 "w64_t8_st4_split0"s,
                                 "w64_t8_st4_split"s,
                                 "w64_t8_st4_splitx"s,
                                 "w64_t8_st4_split02"s,
                                 "w64_t8_st4_split99999"s,
                                 "w64_t8_st4_split2_split2"s,
                                 "w64_t8_st4_alt_alt"s,
                                 "w64_t8_alt_st4"s,
                                 "t8_w64_st4"s,
                                 "w64_st4"s,
                                 "w64_t8"s,
                                 "w64_t8_st4_overlap"s,
                                 "w64_t8_st4_x"s,
                                 "w64_t8x2_st8_split4"s,
                                 "t8_st4_split1"s,
                                 "w64_t8_st4_split2_alt"s,
                                 "w64_t8_st4_alt_split2_"s,
                                 "w64_t8_st4_4"s,
                                 "w64_t8_st4_alt_split2_w64_t8_st4"s}) {
    EXPECT_FALSE(DecodeConfig::parse(bad).has_value()) << "'" << bad << "'";
  }
  for (const std::string& bad :
       {"w128_t128_st4_bk128"s, "w128_t128_st4_bk064"s, "w128_t128_st4_k64"s,
        "w128_t128_st4_overlap_bk64"s, "w128_t256_st4_bk64_streamk_persistent"s,
        "w128_t256_st4_bk64_persistent_streamk"s, "w128_t256_st4_bk64_streamk_overlap"s,
        "w128_t128_st4_split2_overlap"s, "w128_t128_st4_alt_overlap"s, "w128_t128"s}) {
    EXPECT_FALSE(PrefillConfig::parse(bad).has_value()) << "'" << bad << "'";
  }
  for (const std::string& bad :
       {"w16_t8_kwarps4_st0"s, "w16_t8_kwarps1"s, "w16_t8_kwarps4_waited_early"s,
        "w16_t8_kwarps4_early_waited"s, "w16_t8_kwarps4_split2_st4"s, "t8_w4"s, "t8_w8_r6"s,
        "w16_t8_kwarps4_r8"s, "w16_t8_kwarps4_s2"s, "w16_t8_kwarps4_n48"s, "w16_t8_kwarps_st4"s}) {
    EXPECT_FALSE(GemvConfig::parse(bad).has_value()) << "'" << bad << "'";
  }
  for (const std::string& bad :
       {"w32_t16_warp16_kwarps4_st8"s, "w32_t16_warp16x_kwarps4_st8"s,
        "w32_t16_warpx16_kwarps4_st8"s, "w32_t16_warp16x16x2_kwarps4_st8"s,
        "w32_t16_warp16x016_kwarps4_st8"s, "w32_t16_warp16y16_kwarps4_st8"s,
        "w32_t16_kwarps4_warp16x16_st8"s, "w128_t128_warp32x64_kwarps1_st4"s,
        "bm16_bn32_wm16_wn16_wk4_s8"s}) {
    EXPECT_FALSE(GenericConfig::parse(bad).has_value()) << "'" << bad << "'";
  }
  std::string long_name = "w64_t8_st4";
  for (int i = 0; i < 40; ++i) long_name += "_alt";
  EXPECT_FALSE(DecodeConfig::parse(long_name).has_value());
}

// Whatever the parser accepts, it accepts as the printer's name for it (so a name never means
// two configs, and never a config other than the one it prints as). Random bytes, and valid
// names with one byte changed, dropped or added, or two tokens swapped; a fresh seed per run,
// in the failure message.
template <class Config>
void expect_canonical_or_rejected(const std::string& input) {
  if (const std::optional<Config> parsed = Config::parse(input)) {
    EXPECT_EQ(parsed->name(), input) << "accepted a name the printer does not write";
  }
}

template <class Config>
void fuzz_against(const std::vector<std::string>& valid, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  const std::string alphabet = "wtstbkalovrpxdmgeiy_0123456789";
  std::uniform_int_distribution<std::size_t> letter(0, alphabet.size() - 1);
  for (int round = 0; round < 20000; ++round) {
    std::string random(static_cast<std::size_t>(byte(rng) % 40), '\0');
    for (char& c : random)
      c = static_cast<char>(round % 2 == 0 ? byte(rng) : alphabet[letter(rng)]);
    expect_canonical_or_rejected<Config>(random);

    std::string name = valid[static_cast<std::size_t>(rng() % valid.size())];
    const std::size_t at = static_cast<std::size_t>(rng() % (name.size() + 1));
    switch (rng() % 4) {
      case 0:
        if (at < name.size()) name[at] = alphabet[letter(rng)];
        break;
      case 1:
        if (at < name.size()) name.erase(at, 1);
        break;
      case 2:
        name.insert(at, 1, alphabet[letter(rng)]);
        break;
      default: {
        const std::size_t first = name.find('_'), second = name.find('_', first + 1);
        if (second != std::string::npos) {
          name = name.substr(first + 1, second - first - 1) + "_" + name.substr(0, first) +
                 name.substr(second);
        }
      }
    }
    expect_canonical_or_rejected<Config>(name);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(ConfigNames, ParseAcceptsOnlyCanonicalNamesUnderRandomInput) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  fuzz_against<GemvConfig>(names_of(every_gemv_config()), rng);
  fuzz_against<DecodeConfig>(names_of(every_decode_config()), rng);
  fuzz_against<PrefillConfig>(names_of(every_prefill_config()), rng);
  fuzz_against<GenericConfig>(names_of(every_generic_config()), rng);
}

// A name the kernel does not compile is refused by the kernel even where it parses, and a
// tuned table naming one (an old or a mistyped name) still gets the parser's warning.
TEST(ConfigNames, AnUnknownConfigInATunedTableIsAWarning) {
  ASSERT_TRUE(DecodeConfig::parse("w64_t16_st4").has_value());
  EXPECT_THAT(builtin("decode").can_run(1, 768, "w64_t16_st4").reason,
              HasSubstr("not a decode config"));
  const auto kernels = builtin_kernels();
  const TableContext context = table_context(kernels);
  TunedTable table;
  const std::string versions = "," + context.library_version + "," + context.cuda_version + "\n";
  const TableStats stats = table.add(
      "arch,sms,n,k,m,kernel,config,us,error_ratio,mxlinear_version,cuda_version\n"
      "sm_90a,132,2560,6144,1,gemv,t8_w8_early,9.0,0.4" +
          versions + "sm_90a,132,2560,6144,8,decode,w64_t16_st4,9.0,0.4" + versions +
          "sm_90a,132,2560,6144,2,gemv,w16_t8_kwarps8_early,9.0,0.4" + versions,
      "test.csv", context);
  EXPECT_EQ(stats.accepted, 1);
  EXPECT_EQ(stats.skipped, 2);
  ASSERT_EQ(table.warnings().size(), 2u);
  EXPECT_THAT(table.warnings()[0], HasSubstr("names config 't8_w8_early' of kernel gemv"));
  EXPECT_THAT(table.warnings()[1], HasSubstr("names config 'w64_t16_st4' of kernel decode"));
}

}  // namespace
}  // namespace mxlinear::test
