// The Hopper kernels' registry entries (decode, prefill) on the host: their config names, what
// they claim, and the clear errors for calls they cannot take (all raised before anything
// touches a GPU).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "device/kernels/decode/decode_gemm.hpp"
#include "device/kernels/gemv/gemv_ring_layout.hpp"
#include "device/kernels/prefill/activation_bf16.hpp"
#include "device/kernels/prefill/prefill_gemm.hpp"
#include "host/registry/registry.hpp"
#include "mxlinear/error.hpp"
#include "mxlinear/linear.hpp"
#include "support/random.hpp"

namespace mxlinear::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const Kernel& builtin(std::string_view name) {
  static const auto kernels = builtin_kernels();
  const auto it = std::find_if(kernels.begin(), kernels.end(),
                               [&](const auto& k) { return k->name() == name; });
  return **it;
}
const Kernel& decode_kernel() { return builtin("decode"); }
const DeviceDescription kH200 = DeviceDescription::parse("sm_90a:132");

// The problem of an M x N x K call on an aligned bf16 activation on a device of `sms` SMs.
Problem problem(std::int64_t m, std::int64_t n, std::int64_t k, int sms) {
  Problem p;
  p.shape = LinearShape{m, n, k};
  p.x_dtype = DType::kBF16;
  p.x_self_quantizable = true;
  p.sms = sms;
  return p;
}
const Kernel& prefill_kernel() { return builtin("prefill"); }
const Kernel& gemv_kernel() { return builtin("gemv"); }

// A call over host buffers: the checks under test fail before any pointer is used.
struct FakeCall {
  std::vector<std::uint8_t> x, xs, w, ws, out;
  KernelCall call;
  FakeCall(std::int64_t m, std::int64_t n, std::int64_t k)
      : x(static_cast<std::size_t>(m * k)),
        xs(static_cast<std::size_t>(m * k / 32)),
        w(static_cast<std::size_t>(n * k)),
        ws(static_cast<std::size_t>(n * k / 32)),
        out(static_cast<std::size_t>(m * n * 2)) {
    auto view = [](std::vector<std::uint8_t>& b, std::int64_t r, std::int64_t c, DType d) {
      return TensorView::contiguous(b.data(), {r, c}, d, Location::kHost);
    };
    call.x = QuantizedActivation{view(x, m, k, DType::kE4M3), view(xs, m, k / 32, DType::kE8M0),
                                 DType::kBF16};
    call.weight = MxWeight{view(w, n, k, DType::kE4M3), view(ws, n, k / 32, DType::kE8M0)};
    call.out = view(out, m, n, DType::kBF16);
    call.shape = LinearShape{m, n, k};
  }
};

Error error_of(const std::string& config, const FakeCall& f,
               const Kernel& kernel = decode_kernel()) {
  try {
    kernel.run(f.call, config);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "config " << config << " ran";
  return Error(ErrorCode::kInternal, "", "no error");
}

TEST(DecodeKernel, ConfigNamesSpellEveryAxisAndTheDefaultsAreAmongThem) {
  const std::vector<std::string> configs = decode_kernel().configs();
  EXPECT_EQ(configs.size(), 24u);  // 6 compiled instances x splits 1, 2, 4, 8
  for (const std::string& c : configs)
    EXPECT_THAT(c, ::testing::MatchesRegex("w64_t[0-9]+_st[0-9]+(_alt)?(_split[248])?"));
  EXPECT_THAT(configs, ::testing::IsSupersetOf({"w64_t8_st4_split8", "w64_t8_st8_alt_split8",
                                                "w64_t8_st6_split8", "w64_t32_st4_alt_split2",
                                                "w64_t128_st4"}));
  for (std::int64_t m : {1, 8, 9, 32, 33, 128, 4096}) {
    EXPECT_NE(std::find(configs.begin(), configs.end(), decode_kernel().default_config(m)),
              configs.end())
        << "M = " << m;
  }
}

TEST(DecodeKernel, ClaimsOnlyWhatItCanRun) {
  LayerDescription layer;
  layer.n = 2560;
  layer.k = 6144;
  EXPECT_TRUE(decode_kernel().can_implement(layer).ok());
  EXPECT_TRUE(decode_kernel().needs_tuned_rows());
  layer.k = 6144 - 32;  // a last chunk of 96: zero-filled by TMA, its scales copied bytewise
  EXPECT_TRUE(decode_kernel().can_implement(layer).ok());
  layer.k = 6144 + 16;
  EXPECT_THAT(decode_kernel().can_implement(layer).reason, HasSubstr("K % 32"));
  layer.k = 6144;
  layer.alignment = 8;
  EXPECT_THAT(decode_kernel().can_implement(layer).reason, HasSubstr("16-byte"));
  layer.alignment = 16;
  layer.scale_alignment = 1;  // copied bytewise where not 4-byte aligned
  EXPECT_TRUE(decode_kernel().can_implement(layer).ok());
  const std::string split8 = "w64_t8_st4_split8";
  EXPECT_TRUE(
      decode_kernel().can_run(1, 544, "w64_t8_st4_split4").ok());  // 5 chunks, the last part
  EXPECT_THAT(decode_kernel().can_run(1, 544, split8).reason, HasSubstr("only 5 chunks"));
  EXPECT_TRUE(decode_kernel().worth_sweeping(128, decode_kernel().configs().front()));
  EXPECT_FALSE(decode_kernel().worth_sweeping(8192, decode_kernel().configs().front()));
  EXPECT_THAT(decode_kernel().is_supported(DeviceDescription::parse("cpu")).reason,
              HasSubstr("needs a GPU"));
  EXPECT_TRUE(decode_kernel().is_supported(DeviceDescription::parse("sm_90a:132")).ok());
}

TEST(DecodeKernel, UnknownConfigNamesTheKnownOnes) {
  const FakeCall f(1, 64, 768);
  const Error e = error_of("w64_t8_st4_split3", f);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.argument(), "config");
  EXPECT_THAT(e.what(), HasSubstr("w64_t8_st4_split3"));
  EXPECT_THAT(e.what(), HasSubstr(decode_kernel().configs().front()));
}

TEST(DecodeKernel, MoreSplitsThanKChunksIsRejected) {
  const FakeCall f(1, 64, 768);  // 6 chunks of 128
  const std::string split8 = decode_kernel().configs()[3];
  ASSERT_THAT(split8, HasSubstr("split8"));
  const Error e = error_of(split8, f);
  EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(e.what(), HasSubstr("K = 768 has only 6 chunks"));
  // The registry learns the same before it dispatches.
  EXPECT_THAT(decode_kernel().can_run(1, 768, split8).reason, HasSubstr("has only 6 chunks"));
  EXPECT_TRUE(decode_kernel().can_run(1, 1024, split8).ok());
}

TEST(DecodeKernel, KRangeBeyondSharedMemoryIsUnsupported) {
  const FakeCall f(1, 64, 65536);  // 512 chunks in one CTA: their scales do not fit
  const std::string split1 = decode_kernel().configs()[8];
  ASSERT_THAT(split1, HasSubstr("t128"));
  const Error e = error_of(split1, f);
  EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(e.what(), HasSubstr("shared memory"));
}

TEST(PrefillKernel, ClaimsLargeMAndSaysWhatItNeeds) {
  const Kernel& k = prefill_kernel();
  EXPECT_TRUE(k.needs_tuned_rows());
  // K splits only where tokens are few, 128-row tiles from M = their token count, 64-row tiles
  // from M = 8.
  EXPECT_FALSE(k.worth_sweeping(64, "w128_t128_st4"));
  EXPECT_TRUE(k.worth_sweeping(512, "w128_t128_st4"));
  EXPECT_FALSE(k.worth_sweeping(128, "w128_t256_st2"));
  EXPECT_TRUE(k.worth_sweeping(2048, "w128_t256_st2"));
  EXPECT_TRUE(k.worth_sweeping(2048, "w128_t64_st4_overlap"));
  EXPECT_FALSE(k.worth_sweeping(32, "w128_t64_st4_overlap"));
  EXPECT_TRUE(k.worth_sweeping(32, "w64_t32_st4_overlap_split4"));
  EXPECT_TRUE(k.worth_sweeping(8192, "w64_t64_st4_overlap"));
  EXPECT_FALSE(k.worth_sweeping(4, "w64_t32_st4_overlap"));
  EXPECT_FALSE(k.worth_sweeping(8192, "w128_t128_st4_split2"));
  EXPECT_FALSE(k.worth_sweeping(512, "no_such_config"));
  const std::vector<std::string> configs = k.configs();
  // Every axis spelled; the plain names (one split, no overlap) as the shipped rows spell them.
  EXPECT_THAT(configs, ::testing::IsSupersetOf(
                           {"w128_t128_st4", "w128_t128_st3", "w128_t128_st4_overlap",
                            "w64_t32_st4_overlap", "w64_t64_st4_overlap_split8", "w128_t256_st2",
                            "w128_t64_st4_overlap", "w128_t192_st3", "w128_t192_st3_overlap",
                            "w128_t256_st4_bk64", "w128_t256_st4_bk64_overlap_split2",
                            "w64_t32_st8_overlap_alt", "w64_t64_st8_overlap_alt_split2"}));
  // 17 compiled instances x splits 1, 2, 3, 4, 5, 6, 8, less split 6 of the three 128 x 256
  // tiles (its output tile does not fit their ring), and one persistent, one stream-K and eight
  // k-parts instances, never split.
  EXPECT_EQ(configs.size(), 126u);
  EXPECT_THAT(configs,
              ::testing::IsSupersetOf({"w64_t32_st4_overlap_kparts", "w128_t128_st4_kparts"}));
  EXPECT_THAT(configs,
              ::testing::IsSupersetOf({"w64_t128_st4_overlap", "w64_t128_st4_overlap_split4"}));
  EXPECT_THAT(configs, ::testing::IsSupersetOf({"w192_t128_st3", "w192_t128_st3_split8"}));
  EXPECT_THAT(configs, ::testing::Contains("w128_t256_st4_bk64_overlap_streamk"));
  // Stream-K configs run where linear()'s workspace holds their partial tiles.
  EXPECT_THAT(k.can_run(255, 6144, "w128_t256_st4_bk64_overlap_streamk").reason,
              HasSubstr("stream-K configs run from M = 256"));
  EXPECT_TRUE(k.can_run(256, 6144, "w128_t256_st4_bk64_overlap_streamk").ok());
  EXPECT_GE(
      linear_workspace_bytes(256, 6144, kH200),
      static_cast<std::size_t>(256 * 6144) +
          k.plan(problem(256, 64, 6144, 132), "w128_t256_st4_bk64_overlap_streamk").scratch_bytes);
  // Its flags, which the pass before it zeroes, lie after the bf16 activation and the partial
  // tiles (one per SM) and inside its scratch; no other config asks for zeroed words.
  const CallPlan streamk =
      k.plan(problem(512, 6144, 6144, 132), "w128_t256_st4_bk64_overlap_streamk");
  EXPECT_EQ(streamk.zero_words.count, 132u);
  EXPECT_EQ(streamk.zero_words.offset,
            static_cast<std::size_t>(512 * 6144 * 2 + 132 * 128 * 256 * 4));
  EXPECT_LE(streamk.zero_words.offset + 4 * streamk.zero_words.count, streamk.scratch_bytes);
  // On an H200 the bytes of one partial tile of 128 x 256 and a flag for each of 132 CTAs,
  // rounded up to 256: about 16.5 MiB.
  EXPECT_EQ(streamk.scratch_bytes, std::size_t{512} * 6144 * 2 + 17302272);
  const CallPlan on114 =
      k.plan(problem(512, 6144, 6144, 114), "w128_t256_st4_bk64_overlap_streamk");
  EXPECT_EQ(on114.zero_words.count, 114u);
  EXPECT_EQ(on114.scratch_bytes, std::size_t{512} * 6144 * 2 + 14942720);
  for (const char* config : {"w128_t256_st4_bk64_overlap_persistent", "w128_t256_st2"}) {
    const CallPlan p = k.plan(problem(512, 6144, 6144, 132), config);
    EXPECT_EQ(p.zero_words.count, 0u) << config;
    EXPECT_EQ(p.scratch_bytes, std::size_t{512} * 6144 * 2) << config;
  }
  EXPECT_THAT(configs, ::testing::Contains("w128_t256_st4_bk64_overlap_persistent"));
  EXPECT_THAT(configs,
              ::testing::Not(::testing::Contains("w128_t256_st4_bk64_overlap_persistent_split2")));
  EXPECT_THAT(configs, ::testing::IsSupersetOf({"w128_t160_st3", "w128_t160_st3_split6"}));
  EXPECT_THAT(configs, ::testing::IsSupersetOf({"w64_t32_st8_overlap_alt_split3",
                                                "w64_t64_st4_overlap_split5",
                                                "w128_t128_st4_overlap_split6"}));
  EXPECT_THAT(configs, ::testing::Not(::testing::Contains("w128_t256_st2_split6")));
  EXPECT_THAT(configs, ::testing::Not(::testing::Contains("w64_t32_st4_overlap_split7")));
  EXPECT_THAT(configs, ::testing::Contains(k.default_config(8192)));
  LayerDescription layer;
  layer.n = 6144;
  layer.k = 6144;
  EXPECT_TRUE(k.can_implement(layer).ok());
  layer.k = 6144 + 32;  // a last chunk of 32: zero-filled by TMA, its scales copied bytewise
  EXPECT_TRUE(k.can_implement(layer).ok());
  EXPECT_TRUE(k.can_run(2048, 6144 + 32, "w128_t128_st4_split8").ok());
  layer.k = 6144 + 16;
  EXPECT_THAT(k.can_implement(layer).reason, HasSubstr("K % 32"));
  // Any K: a CTA keeps at most two windows of its weight scales in shared memory (56 chunks),
  // so every unsplit config runs K = 2^20 in the shared memory of K = 7168.
  layer.k = 1 << 20;
  EXPECT_TRUE(k.can_implement(layer).ok());
  const auto& instances = device::prefill_gemm_instances();
  for (std::size_t i = 0; i < instances.size(); ++i) {
    const int at_7168 = device::prefill_gemm_smem_bytes(static_cast<int>(i), 7168, 1);
    EXPECT_EQ(device::prefill_gemm_smem_bytes(static_cast<int>(i), 1 << 20, 1), at_7168);
    EXPECT_LE(at_7168, device::kSm90MaxSmemPerCta) << "instance " << i;
    EXPECT_GT(at_7168, device::prefill_gemm_smem_bytes(static_cast<int>(i), 4096, 1));
  }
  EXPECT_TRUE(k.can_run(4096, 1 << 20, "w128_t256_st4_bk64_overlap_persistent").ok());
  layer.k = 6144;
  layer.scale_alignment = 1;  // copied bytewise where not 4-byte aligned
  EXPECT_TRUE(k.can_implement(layer).ok());
  layer.scale_alignment = 4;
  // Scratch: the bf16 activation, 256-byte aligned; linear_workspace_bytes covers it.
  EXPECT_EQ(k.plan(problem(8192, 2560, 6144, 132), configs.front()).scratch_bytes,
            std::size_t{8192} * 6144 * 2);
  EXPECT_EQ(k.plan(problem(1, 64, 128, 132), configs.front()).scratch_bytes, 256u);
  for (const auto& [m, kk] :
       {std::pair<std::int64_t, std::int64_t>{1, 128}, {300, 768}, {8192, 6144}}) {
    // The e4m3 activation, its scales and the scratch, each 256-byte aligned.
    EXPECT_GE(linear_workspace_bytes(m, kk, kH200),
              static_cast<std::size_t>(m * kk) +
                  k.plan(problem(m, 64, kk, 132), configs.front()).scratch_bytes)
        << "M = " << m << ", K = " << kk;
  }
}

// Every name a kernel lists is one it recognises (the lookup and the list are built from one
// table), and a name it does not list is refused as such.
TEST(HopperKernels, EveryListedConfigIsRecognisedAndNoOtherIs) {
  for (const Kernel* k : {&prefill_kernel(), &decode_kernel(), &gemv_kernel()}) {
    const std::vector<std::string> configs = k->configs();
    ASSERT_FALSE(configs.empty()) << k->name();
    EXPECT_EQ(std::set<std::string>(configs.begin(), configs.end()).size(), configs.size())
        << k->name() << ": a name listed twice";
    for (const std::string& config : configs) {
      EXPECT_THAT(k->can_run(16, 768, config).reason, Not(HasSubstr("not a"))) << config;
    }
    EXPECT_THAT(k->can_run(16, 768, configs.front() + "x").reason, HasSubstr("not a")) << k->name();
  }
}

// The linear's bf16 entry point writes the bf16 activation in its quantization pass only for
// kernels that read it; the others get e4m3 and scales (or quantize x themselves). On a
// pre-quantized activation every kernel gets the e4m3 one.
TEST(HopperKernels, OnlyThePrefillKernelTakesTheDequantizedActivation) {
  Problem fp32 = problem(300, 64, 768, 132);
  fp32.x_dtype = DType::kF32;
  fp32.x_self_quantizable = false;
  Problem e4m3 = fp32;
  e4m3.x_dtype = DType::kE4M3;
  for (const std::string& config : prefill_kernel().configs()) {
    EXPECT_EQ(prefill_kernel().plan(problem(300, 64, 768, 132), config).activation,
              ActivationForm::kDequantized)
        << config;
    EXPECT_EQ(prefill_kernel().plan(fp32, config).activation, ActivationForm::kDequantized);
    EXPECT_EQ(prefill_kernel().plan(e4m3, config).activation, ActivationForm::kQuantized);
  }
  for (const auto& kernel : builtin_kernels()) {
    if (kernel->name() == "prefill" || kernel->name() == "prefill_a16") continue;
    for (const std::string& config : kernel->configs()) {
      EXPECT_NE(kernel->plan(problem(1, 64, 768, 132), config).activation,
                ActivationForm::kDequantized)
          << kernel->name() << "/" << config;
      EXPECT_EQ(kernel->plan(e4m3, config).activation, ActivationForm::kQuantized);
    }
  }
}

// A tile grid that fits the SMs one CTA each asks for the shared memory that keeps it so, where
// two of its CTAs would otherwise fit an SM; every other launch asks for its tile's own.
TEST(PrefillKernel, AGridThatFitsTheSmsRunsOneCtaAnSm) {
  using device::ctas_per_sm_by_smem;
  using device::prefill_launch_smem;
  constexpr int kSmall = 79 * 1024;  // 64 x 32, 4 stages: two fit an SM
  static_assert(ctas_per_sm_by_smem(kSmall) == 2);
  // (ctas, sms, clustered, persistent, smem)
  const int spread = prefill_launch_smem(96, 132, false, false, kSmall);
  EXPECT_EQ(ctas_per_sm_by_smem(spread), 1);
  EXPECT_GE(spread, kSmall);
  EXPECT_LE(spread, device::kSm90MaxSmemPerCta);
  EXPECT_EQ(prefill_launch_smem(132, 132, false, false, kSmall), spread);
  // More CTAs than SMs need two an SM for one wave; a cluster split and a persistent walk place
  // their CTAs themselves; a tile of one CTA an SM already asks for enough.
  EXPECT_EQ(prefill_launch_smem(133, 132, false, false, kSmall), kSmall);
  EXPECT_EQ(prefill_launch_smem(96, 132, true, false, kSmall), kSmall);
  EXPECT_EQ(prefill_launch_smem(96, 132, false, true, kSmall), kSmall);
  EXPECT_EQ(prefill_launch_smem(96, 132, false, false, 150 * 1024), 150 * 1024);
  // A small part: the rule follows the SM count it is given.
  EXPECT_EQ(prefill_launch_smem(96, 66, false, false, kSmall), kSmall);
}

// A launch footprint needs the device (its occupancy); without one, or for a config that does
// not exist or cannot run the shape, the kernel says nothing rather than guess.
TEST(PrefillKernel, LaunchFootprintIsNoneWithoutADeviceOrAConfigThatRuns) {
  const Kernel& k = prefill_kernel();
  EXPECT_FALSE(k.launch_footprint({128, 6144, 768}, "w128_t999").has_value());
  EXPECT_FALSE(k.launch_footprint({128, 6144, 768}, "w128_t128_st4_split8").has_value());
  if (!gpu_available()) {
    EXPECT_FALSE(k.launch_footprint({128, 6144, 768}, "w64_t64_st4_overlap").has_value());
  }
  EXPECT_FALSE(
      gemv_kernel().launch_footprint({1, 6144, 768}, gemv_kernel().configs().front()).has_value());
}

TEST(PrefillKernel, MoreSplitsThanKChunksIsRejected) {
  const FakeCall f(32, 64, 768);  // 6 chunks of 128
  const Error e = error_of("w64_t32_st4_overlap_split8", f, prefill_kernel());
  EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(e.what(), HasSubstr("K = 768 has only 6 chunks"));
  // A CTA keeps the scale words of at most two windows of 32 chunks: the 128 x 192 tile runs
  // any K, unsplit or split.
  EXPECT_TRUE(prefill_kernel().can_run(2048, 12288, "w128_t192_st3").ok());
  EXPECT_TRUE(prefill_kernel().can_run(2048, 28672, "w128_t192_st3").ok());
  EXPECT_TRUE(prefill_kernel().can_run(2048, 12288, "w128_t192_st3_split2").ok());
}

TEST(PrefillKernel, CallWithoutScratchOrWithUnknownConfigIsRejected) {
  const FakeCall f(300, 64, 768);  // no workspace in the call
  const Error unknown = error_of("w128_t128_st9", f, prefill_kernel());
  EXPECT_EQ(unknown.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(unknown.argument(), "config");
  const Error scratch = error_of(prefill_kernel().configs().front(), f, prefill_kernel());
  EXPECT_EQ(scratch.code(), ErrorCode::kInternal);
  EXPECT_EQ(scratch.argument(), "workspace");
}

TEST(GemvKernel, ClaimsTheSmallestMAndSaysWhatItNeeds) {
  const Kernel& k = gemv_kernel();
  EXPECT_TRUE(k.needs_tuned_rows());
  // Each instance three times: the next kernel launches once the activation is staged (no
  // suffix), once the CTAs have waited on the previous kernel, or at their entry.
  const std::vector<std::string> instances = {"w16_t8_kwarps4",
                                              "w16_t8_kwarps8",
                                              "w16_t16_kwarps8",
                                              "w16_t8_kwarps4_st8",
                                              "w16_t8_kwarps8_st4",
                                              "w16_t8_kwarps8_st6",
                                              "w16_t8_kwarps4_st3",
                                              "w16_t8_kwarps4_st4",
                                              "w16_t8_kwarps8_split2",
                                              "w16_t8_kwarps8_st4_split2",
                                              "w16_t8_kwarps4_st3_split4",
                                              "w16_t8_kwarps4_st4_split4",
                                              "w48_t8_kwarps4_st3",
                                              "w48_t8_kwarps4_st4",
                                              "w8_t8_kwarps4_st6_kparts",
                                              "w8_t16_kwarps4_st6_kparts",
                                              "w32_t8_st6_kparts"};
  std::vector<std::string> expected;
  for (const char* suffix : {"", "_waited", "_early"}) {
    for (const std::string& i : instances) expected.push_back(i + suffix);
  }
  EXPECT_EQ(k.configs(), expected);
  EXPECT_EQ(k.default_config(1), "w16_t8_kwarps8");
  EXPECT_EQ(k.default_config(8), "w16_t8_kwarps8");
  EXPECT_EQ(k.default_config(9), "w16_t16_kwarps8");
  EXPECT_TRUE(k.worth_sweeping(1, "w16_t8_kwarps4"));
  EXPECT_TRUE(k.worth_sweeping(16, "w16_t16_kwarps8"));
  EXPECT_FALSE(k.worth_sweeping(32, "w16_t16_kwarps8"));
  LayerDescription layer;
  layer.n = 2560;
  layer.k = 6144;
  EXPECT_TRUE(k.can_implement(layer).ok());
  layer.k = 96;  // any K % 32 == 0
  EXPECT_TRUE(k.can_implement(layer).ok());
  layer.alignment = 8;
  EXPECT_THAT(k.can_implement(layer).reason, HasSubstr("16-byte"));
  layer.alignment = 16;
  layer.scale_alignment = 1;  // the ring copies unaligned scale rows by plain loads
  EXPECT_TRUE(k.can_implement(layer).ok());
  layer.k = 1 << 18;  // one token's e4m3 row would not fit in shared memory
  EXPECT_THAT(k.can_implement(layer).reason, HasSubstr("shared memory"));
  EXPECT_THAT(k.is_supported(DeviceDescription::parse("cpu")).reason, HasSubstr("needs a GPU"));
}

// Whether the plan of `config` for a call on `x` has the kernel quantize x itself.
bool quantizes_itself(const Kernel& kernel, const std::string& config, const TensorView& x) {
  const LinearShape shape{x.rows(), 64, x.cols()};
  return kernel.plan(make_problem(shape, x, DType::kBF16, 132), config).activation ==
         ActivationForm::kUnquantized;
}

// The GEMV quantizes a 16-byte aligned bf16 or fp16 activation itself; the other kernels, an
// fp32 activation or misaligned rows leave it to the quantize kernel.
TEST(GemvKernel, QuantizesAlignedBf16AndFp16ActivationsItself) {
  alignas(16) std::uint16_t storage[2 * 72] = {};
  const auto view = [&](void* data, std::int64_t cols, std::int64_t stride, DType dtype) {
    return TensorView::matrix(data, 2, cols, stride, dtype, Location::kDevice);
  };
  const Kernel& k = gemv_kernel();
  EXPECT_TRUE(quantizes_itself(k, "w16_t8_kwarps8", view(storage, 64, 64, DType::kBF16)));
  EXPECT_TRUE(quantizes_itself(k, "w16_t16_kwarps8", view(storage, 64, 72, DType::kF16)));
  EXPECT_FALSE(quantizes_itself(k, "w16_t8_kwarps8", view(storage, 32, 32, DType::kF32)));
  EXPECT_FALSE(quantizes_itself(k, "w16_t8_kwarps8", view(storage, 64, 68, DType::kBF16)));
  EXPECT_FALSE(quantizes_itself(k, "w16_t8_kwarps8", view(storage + 1, 64, 64, DType::kBF16)));
  EXPECT_FALSE(
      quantizes_itself(prefill_kernel(), "w128_t128_st4", view(storage, 64, 64, DType::kBF16)));
  EXPECT_FALSE(quantizes_itself(builtin("generic"), builtin("generic").default_config(2),
                                view(storage, 64, 64, DType::kBF16)));
  // A single row needs no aligned stride.
  EXPECT_TRUE(
      quantizes_itself(k, "w16_t8_kwarps8",
                       TensorView::matrix(storage, 1, 64, 68, DType::kBF16, Location::kDevice)));
}

// The decode kernel's 8-token instances have quantizing twins (verified on the H200); the 32-
// and 128-token ones do not, and a twin that would fit fewer CTAs per SM than its plain instance
// is passed over (36 against 22 us at 1 x 6144 x 6144, w64_t8_st4_split4).
TEST(DecodeKernel, QuantizesItselfOnlyWhereATwinKeepsItsOccupancy) {
  std::vector<std::uint16_t> storage(6144 + 8, 0);
  const auto view = [&](std::int64_t cols, DType dtype) {
    return TensorView::matrix(storage.data(), 1, cols, cols, dtype, Location::kDevice);
  };
  const Kernel& k = decode_kernel();
  EXPECT_TRUE(quantizes_itself(k, "w64_t8_st4_split8", view(6144, DType::kBF16)));
  EXPECT_TRUE(quantizes_itself(k, "w64_t8_st8_alt", view(768, DType::kF16)));
  EXPECT_TRUE(quantizes_itself(k, "w64_t8_st6_split2", view(2048, DType::kBF16)));
  EXPECT_FALSE(quantizes_itself(k, "w64_t32_st4_split8", view(6144, DType::kBF16)));
  EXPECT_FALSE(quantizes_itself(k, "w64_t8_st4_split8", view(6144, DType::kF32)));
  // 3 CTAs per SM for the twin against 4 for the plain instance.
  EXPECT_EQ(device::decode_ctas_per_sm(device::decode_gemm_smem_bytes(0, 6144, 4, true)), 3);
  EXPECT_EQ(device::decode_ctas_per_sm(device::decode_gemm_smem_bytes(0, 6144, 4)), 4);
  EXPECT_FALSE(quantizes_itself(k, "w64_t8_st4_split4", view(6144, DType::kBF16)));
}

TEST(GemvKernel, UnknownConfigOrTooLargeKIsRejected) {
  const FakeCall f(1, 64, 768);
  const Error unknown = error_of("t1", f, gemv_kernel());
  EXPECT_EQ(unknown.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(unknown.what(),
              HasSubstr("w16_t8_kwarps4, w16_t8_kwarps8, w16_t16_kwarps8, w16_t8_kwarps4_st8, "
                        "w16_t8_kwarps8_st4, w16_t8_kwarps8_st6, "
                        "w16_t8_kwarps4_st3, w16_t8_kwarps4_st4, w16_t8_kwarps8_split2, "
                        "w16_t8_kwarps8_st4_split2, "
                        "w16_t8_kwarps4_st3_split4, w16_t8_kwarps4_st4_split4, w48_t8_kwarps4_st3, "
                        "w48_t8_kwarps4_st4, "
                        "w8_t8_kwarps4_st6_kparts, "
                        "w8_t16_kwarps4_st6_kparts, w32_t8_st6_kparts, w16_t8_kwarps4_waited, "));
  EXPECT_THAT(unknown.what(), HasSubstr("w32_t8_st6_kparts_early"));
  const FakeCall wide(16, 64, 16384);  // sixteen tokens' e4m3 rows: 263 KB
  const Error smem = error_of("w16_t16_kwarps8", wide, gemv_kernel());
  EXPECT_EQ(smem.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(smem.what(), HasSubstr("shared memory"));
}

// What linear_with throws for an M x 16 x K bf16 layer on (host) buffers labelled device memory,
// with a workspace given so that nothing is allocated: the refusal must come before any launch.
Error linear_with_error(const Kernel& kernel, const std::string& config, std::int64_t m,
                        std::int64_t k) {
  constexpr std::int64_t n = 16;
  std::vector<std::uint8_t> x(static_cast<std::size_t>(m * k * 2)),
      w(static_cast<std::size_t>(n * k)), ws(static_cast<std::size_t>(n * k / 32)),
      out(static_cast<std::size_t>(m * n * 2));
  alignas(256) static std::uint8_t workspace[1 << 20];
  EXPECT_LE(linear_workspace_bytes(m, k), sizeof(workspace));
  const MxWeight weight{
      TensorView::contiguous(w.data(), {n, k}, DType::kE4M3, Location::kDevice),
      TensorView::contiguous(ws.data(), {n, k / 32}, DType::kE8M0, Location::kDevice)};
  try {
    linear_with(kernel, config,
                TensorView::contiguous(x.data(), {m, k}, DType::kBF16, Location::kDevice), weight,
                std::nullopt,
                TensorView::contiguous(out.data(), {m, n}, DType::kBF16, Location::kDevice),
                nullptr, Workspace{workspace, sizeof(workspace)});
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << kernel.name() << "/" << config << " ran";
  return Error(ErrorCode::kInternal, "", "no error");
}

// What a refusal must say: its code, the argument it names and a phrase of its reason.
void expect_refusal(const Error& e, ErrorCode code, const std::string& argument,
                    const std::string& phrase) {
  EXPECT_EQ(e.code(), code);
  EXPECT_EQ(e.argument(), argument);
  EXPECT_THAT(e.what(), HasSubstr(phrase));
}

// linear_with checks that the given kernel can run the layer (the gemv holds a token's K in
// shared memory)...
TEST(LinearWith, AKernelThatCannotRunTheLayerIsRejectedBeforeAnyLaunch) {
  expect_refusal(linear_with_error(gemv_kernel(), gemv_kernel().configs().front(), 1, 1 << 18),
                 ErrorCode::kUnsupported, "kernel", "does not fit");
}

// ... that the config is one of the kernel's ...
TEST(LinearWith, AnUnknownConfigIsRejectedByName) {
  expect_refusal(linear_with_error(prefill_kernel(), "w128_t999", 4, 128),
                 ErrorCode::kInvalidArgument, "config", "w128_t999");
}

// ... that the config can run this M and K, before it checks the workspace: 8 K splits need 8
// chunks of 128, and a stream-K config needs M >= 256 (its workspace comes only with such M) ...
TEST(LinearWith, AConfigThatCannotRunThisMOrKIsRejectedBeforeAnyLaunch) {
  expect_refusal(linear_with_error(prefill_kernel(), "w128_t128_st4_split8", 9, 256),
                 ErrorCode::kUnsupported, "config", "chunks of 128");
  expect_refusal(linear_with_error(prefill_kernel(), "w128_t256_st4_bk64_overlap_streamk", 9, 128),
                 ErrorCode::kUnsupported, "config", "M = 256");
}

// ... and that it runs on this machine: without a GPU, a GPU kernel that can implement the layer
// is still refused.
TEST(LinearWith, AGpuKernelIsRejectedOnAMachineWithoutOne) {
  if (gpu_available()) GTEST_SKIP() << "this machine has a GPU (the GPU tests run linear_with)";
  expect_refusal(linear_with_error(gemv_kernel(), gemv_kernel().configs().front(), 2, 64),
                 ErrorCode::kUnsupported, "kernel", "does not run on");
}

std::size_t round_up_256(std::size_t v) { return (v + 255) / 256 * 256; }

// On a 132-SM H200 linear()'s workspace is the e4m3 activation, its scales, the bf16 activation,
// from 8 rows the split tiles (64 x 128 fp32) and arrival words of 132 CTAs, and from 256 rows
// instead the stream-K partial tiles (128 x 256) and flags of 132 CTAs, each part 256-byte
// aligned. With fewer SMs the last part shrinks with them.
TEST(KernelPlans, TheWorkspaceOnAnH200KeepsItsBytes) {
  const auto beyond = [](std::int64_t m, std::size_t sms) -> std::size_t {
    if (m >= 256) return round_up_256(sms * (128 * 256 * 4 + 4));
    return m >= 8 ? round_up_256(sms * (64 * 128 * 4 + 4)) : 0;
  };
  for (const auto& [m, k] : {std::pair<std::int64_t, std::int64_t>{1, 128},
                             {7, 4096},
                             {8, 4096},
                             {255, 6144},
                             {256, 6144},
                             {300, 1000 * 32},
                             {8192, 2048}}) {
    const auto elements = static_cast<std::size_t>(m * k);
    const std::size_t base =
        round_up_256(elements) + round_up_256(elements / 32) + round_up_256(elements * 2);
    EXPECT_EQ(linear_workspace_bytes(m, k, kH200), base + beyond(m, 132))
        << "M = " << m << ", K = " << k;
    EXPECT_EQ(linear_workspace_bytes(m, k, DeviceDescription::parse("sm_90a:114")),
              base + beyond(m, 114));
  }
  // Without a device argument: the current device's.
  EXPECT_EQ(linear_workspace_bytes(300, 768),
            linear_workspace_bytes(300, 768, DeviceDescription::current()));
}

// A split plan meets in memory where its CTAs fit the SMs one each and a cluster would not hold
// them so: its scratch holds a tile per CTA after the bf16 activation, then an arrival word per
// output tile, which the pass before the GEMM zeroes. qkv (2560 x 6144) at M = 16 in three
// splits of 64 x 32: 120 CTAs on 132 SMs, two of which fit an SM.
TEST(KernelPlans, SplitsThatMeetInMemoryPlanTheirTilesAndArrivalWords) {
  const std::size_t activation = round_up_256(16 * 6144 * 2);
  const CallPlan in_memory =
      prefill_kernel().plan(problem(16, 2560, 6144, 132), "w64_t32_st4_overlap_split3");
  EXPECT_EQ(in_memory.zero_words.count, 40u);
  EXPECT_EQ(in_memory.zero_words.offset, activation + round_up_256(120 * 64 * 32 * 4));
  EXPECT_EQ(in_memory.scratch_bytes, in_memory.zero_words.offset + round_up_256(40 * 4));
  EXPECT_LE(in_memory.scratch_bytes, prefill_kernel().max_scratch_bytes(16, 6144, kH200));
  // Over a cluster, nothing beyond the activation: more CTAs than SMs, fewer than 8 rows, a tile
  // of two warpgroups (it meets over a cluster always), or no split.
  for (const auto& [m, sms, config] :
       {std::tuple<std::int64_t, int, const char*>{16, 114, "w64_t32_st4_overlap_split3"},
        {7, 132, "w64_t32_st4_overlap_split3"},
        {16, 132, "w128_t64_st4_overlap_split3"},
        {16, 132, "w64_t32_st8_overlap_alt_split2"},
        {16, 132, "w64_t32_st4_overlap"}}) {
    SCOPED_TRACE(::testing::Message() << config << " at M = " << m << " on " << sms << " SMs");
    const CallPlan plan = prefill_kernel().plan(problem(m, 2560, 6144, sms), config);
    EXPECT_EQ(plan.zero_words.count, 0u);
    EXPECT_EQ(plan.scratch_bytes, round_up_256(static_cast<std::size_t>(m) * 6144 * 2));
  }
}

// device: its zero words lie inside its scratch, its scratch stays within the kernel's bound,
// and linear_workspace_bytes() holds it beside the e4m3 activation and its scales.
TEST(KernelPlans, LinearWorkspaceCoversEveryPlanOnDevicesOfAnySmCount) {
  auto rng = make_rng();
  std::uniform_int_distribution<std::int64_t> m_of(1, 12000), k_blocks(1, 512);
  const auto kernels = builtin_kernels();
  int stream_k_plans = 0, split_plans = 0, plans = 0, a16_plans = 0;
  for (const DeviceDescription& device :
       {kH200, DeviceDescription::parse("sm_90a:114"), DeviceDescription::parse("sm_90a:8")}) {
    for (int i = 0; i < 60; ++i) {
      // M = 256 runs the stream-K configs; at M = 16 the 64-row split tiles fit 132 and 114 SMs.
      const std::int64_t m = i < 3 ? 256 : (i < 6 ? 16 : m_of(rng)), k = 32 * k_blocks(rng);
      const auto elements = static_cast<std::size_t>(m * k);
      const std::size_t room = linear_workspace_bytes(m, k, device) - round_up_256(elements) -
                               round_up_256(elements / 32);
      for (const auto& kernel : kernels) {
        const std::size_t bound = kernel->max_scratch_bytes(m, k, device);
        EXPECT_LE(bound, room) << kernel->name();
        for (const std::string& config : kernel->configs()) {
          if (!kernel->can_run(m, k, config).ok()) continue;
          SCOPED_TRACE(::testing::Message() << kernel->name() << "/" << config << " at M = " << m
                                            << ", K = " << k << " on " << device.sms << " SMs");
          for (const DType x : {DType::kBF16, DType::kF32, DType::kE4M3}) {
            Problem p = problem(m, 2560, k, device.sms);
            p.x_dtype = x;
            p.x_self_quantizable = x == DType::kBF16;
            const CallPlan plan = kernel->plan(p, config);
            ++plans;
            EXPECT_LE(plan.scratch_bytes, bound);
            EXPECT_EQ(plan.scratch_bytes % 256, 0u);
            EXPECT_EQ(plan.zero_words.offset % 4, 0u);
            EXPECT_LE(plan.zero_words.offset + 4 * plan.zero_words.count, plan.scratch_bytes);
            if (x == DType::kE4M3) {
              EXPECT_EQ(plan.activation, ActivationForm::kQuantized);
            } else if (x == DType::kF32) {
              EXPECT_NE(plan.activation, ActivationForm::kUnquantized);
            }
            if (plan.zero_words.count > 0) {
              // A stream-K flag per CTA (one an SM), or a split arrival word per output tile of a
              // grid that fits the SMs.
              if (config.find("_split") != std::string::npos) {
                ++split_plans;
                EXPECT_LE(plan.zero_words.count, static_cast<std::size_t>(device.sms));
              } else {
                ++stream_k_plans;
                EXPECT_EQ(plan.zero_words.count, static_cast<std::size_t>(device.sms));
              }
              // After the bf16 activation: the pass that writes it must not zero any of it.
              EXPECT_GE(plan.zero_words.offset, elements * 2);
            }
          }
          // W8A16: x as it is, or (bf16) laid out by the linear's pass; no more scratch.
          for (const ActivationOperand operand :
               {ActivationOperand::kBf16, ActivationOperand::kF16}) {
            LayerDescription layer;
            layer.n = 2560;
            layer.k = k;
            layer.operand = operand;
            if (!kernel->can_implement(layer).ok()) continue;
            Problem p = problem(m, 2560, k, device.sms);
            p.x_dtype = operand == ActivationOperand::kF16 ? DType::kF16 : DType::kBF16;
            p.operand = operand;
            const CallPlan plan = kernel->plan(p, config);
            ++a16_plans;
            EXPECT_LE(plan.scratch_bytes, bound);
            EXPECT_TRUE(plan.activation == ActivationForm::kAsIs ||
                        (operand == ActivationOperand::kBf16 &&
                         plan.activation == ActivationForm::kDequantized));
          }
        }
      }
    }
  }
  EXPECT_GT(plans, 1000);
  EXPECT_GT(stream_k_plans, 0);
  EXPECT_GT(split_plans, 0);
  EXPECT_GT(a16_plans, 100);
}

// A fake call of the plan's form for `problem` on host buffers, with `scratch` bytes of scratch
// at a placeholder address: run() must decide about its arguments before it launches anything.
struct PlannedCall : FakeCall {
  std::vector<std::uint16_t> x16;
  PlannedCall(const Problem& p, const CallPlan& plan, std::size_t scratch)
      : FakeCall(p.shape.m, p.shape.n, p.shape.k),
        x16(static_cast<std::size_t>(p.shape.m * p.shape.k)) {
    call.activation = plan.activation;
    call.x_unquantized =
        TensorView::contiguous(x16.data(), {p.shape.m, p.shape.k}, DType::kBF16, Location::kDevice);
    call.workspace = Workspace{reinterpret_cast<void*>(std::uintptr_t{1} << 20), scratch};
    call.sms = p.sms;
  }
};

// The argument run() refuses a call about, or "" where it took the call up to its launch (which
// fails without a GPU).
std::string refused_argument(const Kernel& kernel, const std::string& config, const KernelCall& c) {
  try {
    kernel.run(c, config);
  } catch (const Error& e) {
    return e.code() == ErrorCode::kInvalidArgument || e.argument() == "config" ||
                   e.argument() == "workspace"
               ? e.argument()
               : "";
  }
  return "";
}

// What a plan says is what run() needs: given the plan's activation form and exactly its
// scratch, run() accepts the call (any refusal comes from the launch itself); one byte less
// scratch and it refuses the workspace.
TEST(KernelPlans, RunTakesTheFormAndTheScratchItsPlanNames) {
  if (gpu_available()) GTEST_SKIP() << "run() on host buffers would launch on this machine's GPU";
  const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> shapes = {
      {1, 64, 768}, {8, 128, 2048}, {40, 64, 1536}, {300, 256, 1024}};
  int checked = 0;
  for (const Kernel* kernel :
       {&decode_kernel(), &prefill_kernel(), &gemv_kernel(), &builtin("generic")}) {
    for (const std::string& config : kernel->configs()) {
      for (const auto& [m, n, k] : shapes) {
        if (!kernel->can_run(m, k, config).ok()) continue;
        for (const int sms : {132, 114}) {
          for (const DType x : {DType::kBF16, DType::kE4M3}) {
            SCOPED_TRACE(::testing::Message()
                         << kernel->name() << "/" << config << " at " << m << " x " << n << " x "
                         << k << ", " << sms << " SMs, x " << to_string(x));
            Problem p = problem(m, n, k, sms);
            p.x_dtype = x;
            p.x_self_quantizable = x == DType::kBF16;
            const CallPlan plan = kernel->plan(p, config);
            const PlannedCall exact(p, plan, plan.scratch_bytes);
            EXPECT_EQ(refused_argument(*kernel, config, exact.call), "");
            if (plan.scratch_bytes > 0) {
              const PlannedCall short_by_one(p, plan, plan.scratch_bytes - 1);
              EXPECT_EQ(refused_argument(*kernel, config, short_by_one.call), "workspace");
            }
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 500);
}

// The K permutation inside an MX block that the bf16 activation pre-pass writes must put each
// byte where the wgmma register-A fragment of the thread that loads it expects its k: thread
// t of a row loads bytes 8t..8t+7 and gives bytes 0-3 to k16 step 0 (lo pair at k = 2t, 2t+1,
// hi pair at 8+2t, 9+2t) and bytes 4-7 to step 1 the same way.
TEST(HopperKernels, BlockPermutationMatchesTheWeightFragments) {
  std::vector<bool> seen(32, false);
  for (int t = 0; t < 4; ++t) {
    for (int e = 0; e < 8; ++e) {
      const int step = e / 4, pair = (e % 4) / 2;
      const int expected = 16 * step + (pair == 0 ? 2 * t : 8 + 2 * t) + e % 2;
      const int got = device::permuted_position(8 * t + e);
      EXPECT_EQ(got, expected) << "t = " << t << ", byte " << e;
      ASSERT_GE(got, 0);
      ASSERT_LT(got, 32);
      EXPECT_FALSE(seen[static_cast<std::size_t>(got)]) << "position " << got << " taken twice";
      seen[static_cast<std::size_t>(got)] = true;
    }
  }
}

// The GEMV ring, for slots of 16 and of 8 rows: the lanes' copies fill every byte of a slot's
// rows once, each lane's fragment read finds bytes 32 * block + 8t .. + 7 of its row, and the 8
// rows g = 0..7 of one read instruction fall in distinct 16-byte chunks for each t pair (two
// wavefronts per warp read).
TEST(GemvRing, CopiesAndFragmentReadsAgreeOnEveryByte) {
  namespace ring = device::gemv_ring;
  for (const int rows : {16, 8}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows");
    EXPECT_EQ(ring::slot_bytes(rows), ring::scale_offset(rows) + 4 * rows);
    // byte of the slot -> row * 128 + column
    std::vector<int> owner(static_cast<std::size_t>(ring::scale_offset(rows)), -1);
    for (int lane = 0; lane < 32; ++lane) {
      const ring::LaneCopy copy = ring::lane_copy(rows, lane);
      ASSERT_EQ(copy.count * 32, ring::kRowChunks * rows) << "lane " << lane;
      for (int c = copy.first; c < copy.first + copy.count; ++c) {
        for (int b = 0; b < 16; ++b) {
          const int at = ring::chunk_offset(copy.row, c) + b;
          ASSERT_GE(at, 0);
          ASSERT_LT(at, ring::scale_offset(rows));
          EXPECT_EQ(owner[static_cast<std::size_t>(at)], -1)
              << "slot byte " << at << " copied twice";
          owner[static_cast<std::size_t>(at)] = copy.row * ring::kRowBytes + 16 * c + b;
        }
      }
    }
    for (int row = 0; row < rows; ++row) {
      for (int t = 0; t < 4; ++t) {
        for (int block = 0; block < ring::kStageBlocks; ++block) {
          for (int e = 0; e < 8; ++e) {
            const int at = ring::fragment_offset(row, t, block) + e;
            EXPECT_EQ(owner[static_cast<std::size_t>(at)],
                      row * ring::kRowBytes + 32 * block + 8 * t + e)
                << "row " << row << ", t " << t << ", block " << block << ", byte " << e;
          }
        }
      }
    }
  }
  for (int block = 0; block < ring::kStageBlocks; ++block) {
    for (int pair = 0; pair < 2; ++pair) {
      std::vector<bool> chunk_used(8, false);
      for (int g = 0; g < 8; ++g) {
        const int chunk = (ring::fragment_offset(g, 2 * pair, block) % ring::kRowBytes) / 16;
        EXPECT_FALSE(chunk_used[static_cast<std::size_t>(chunk)]) << "bank conflict at g " << g;
        chunk_used[static_cast<std::size_t>(chunk)] = true;
      }
    }
  }
}

}  // namespace
}  // namespace mxlinear::test
