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
#include <vector>

#include "device/kernels/decode/decode_gemm.hpp"
#include "device/kernels/gemv/gemv_ring_layout.hpp"
#include "device/kernels/prefill/activation_bf16.hpp"
#include "mxlinear/error.hpp"
#include "mxlinear/linear.hpp"
#include "mxlinear/registry.hpp"

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
  // Every axis spelled (config_name.hpp).
  EXPECT_THAT(configs, ::testing::IsSupersetOf(
                           {"w128_t128_st4", "w128_t128_st3", "w128_t128_st4_overlap",
                            "w64_t32_st4_overlap", "w64_t64_st4_overlap_split8", "w128_t256_st2",
                            "w128_t64_st4_overlap", "w128_t192_st3", "w128_t192_st3_overlap",
                            "w128_t256_st4_bk64", "w128_t256_st4_bk64_overlap_split2",
                            "w64_t32_st8_overlap_alt", "w64_t64_st8_overlap_alt_split2"}));
  // 17 compiled instances x splits 1, 2, 3, 4, 5, 6, 8, less split 6 of the three 128 x 256
  // tiles (its output tile does not fit their ring), and one persistent and one stream-K
  // instance, never split.
  EXPECT_EQ(configs.size(), 118u);
  EXPECT_THAT(configs,
              ::testing::IsSupersetOf({"w64_t128_st4_overlap", "w64_t128_st4_overlap_split4"}));
  EXPECT_THAT(configs, ::testing::IsSupersetOf({"w192_t128_st3", "w192_t128_st3_split8"}));
  EXPECT_THAT(configs, ::testing::Contains("w128_t256_st4_bk64_overlap_streamk"));
  // Stream-K configs run where linear()'s workspace holds their partial tiles.
  EXPECT_THAT(k.can_run(255, 6144, "w128_t256_st4_bk64_overlap_streamk").reason,
              HasSubstr("stream-K configs run from M = 256"));
  EXPECT_TRUE(k.can_run(256, 6144, "w128_t256_st4_bk64_overlap_streamk").ok());
  EXPECT_GE(
      linear_workspace_bytes(256, 6144),
      static_cast<std::size_t>(256 * 6144) +
          k.workspace_bytes(LinearShape{256, 64, 6144}, "w128_t256_st4_bk64_overlap_streamk"));
  // Its flags, which the pass before it zeroes, lie after the bf16 activation and the partial
  // tiles and inside its scratch; no other config asks for zeroed words.
  const LinearShape shape{512, 6144, 6144};
  const ScratchWords flags = k.scratch_words_to_zero(shape, "w128_t256_st4_bk64_overlap_streamk");
  EXPECT_EQ(flags.count, 132u);
  EXPECT_GE(flags.offset, static_cast<std::size_t>(512 * 6144 * 2 + 132 * 128 * 256 * 4));
  EXPECT_LE(flags.offset + 4 * flags.count,
            k.workspace_bytes(shape, "w128_t256_st4_bk64_overlap_streamk"));
  EXPECT_EQ(flags.offset % 4, 0u);
  EXPECT_EQ(k.scratch_words_to_zero(shape, "w128_t256_st4_bk64_overlap_persistent").count, 0u);
  EXPECT_EQ(k.scratch_words_to_zero(shape, "w128_t256_st2").count, 0u);
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
  layer.k = 1 << 20;  // its weight scales would not fit in shared memory
  EXPECT_THAT(k.can_implement(layer).reason, HasSubstr("shared memory"));
  layer.k = 6144;
  layer.scale_alignment = 1;  // copied bytewise where not 4-byte aligned
  EXPECT_TRUE(k.can_implement(layer).ok());
  layer.scale_alignment = 4;
  // Scratch: the bf16 activation, 256-byte aligned; linear_workspace_bytes covers it.
  EXPECT_EQ(k.workspace_bytes(LinearShape{8192, 2560, 6144}, configs.front()),
            std::size_t{8192} * 6144 * 2);
  EXPECT_EQ(k.workspace_bytes(LinearShape{1, 64, 128}, configs.front()), 256u);
  for (const auto& [m, kk] :
       {std::pair<std::int64_t, std::int64_t>{1, 128}, {300, 768}, {8192, 6144}}) {
    // The e4m3 activation, its scales and the scratch, each 256-byte aligned.
    EXPECT_GE(linear_workspace_bytes(m, kk),
              static_cast<std::size_t>(m * kk) + k.workspace_bytes(LinearShape{m, 64, kk}, ""))
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
// kernels that read it; the others get e4m3 and scales as before.
TEST(HopperKernels, OnlyThePrefillKernelTakesTheDequantizedActivation) {
  for (const std::string& config : prefill_kernel().configs()) {
    EXPECT_TRUE(prefill_kernel().takes_dequantized_activation(config)) << config;
  }
  EXPECT_FALSE(decode_kernel().takes_dequantized_activation(decode_kernel().configs().front()));
  EXPECT_FALSE(gemv_kernel().takes_dequantized_activation("w16_t8_kwarps8"));
  EXPECT_FALSE(
      builtin("generic").takes_dequantized_activation(builtin("generic").default_config(8192)));
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
  // A CTA keeps the scale bytes of its whole K range in shared memory: at K = 12288 those of
  // the 128 x 192 tile no longer fit beside its ring; split 2 ways they do.
  EXPECT_THAT(prefill_kernel().can_run(2048, 12288, "w128_t192_st3").reason,
              HasSubstr("bytes of shared memory"));
  EXPECT_TRUE(prefill_kernel().can_run(2048, 12288, "w128_t192_st3_split2").ok());
  EXPECT_TRUE(prefill_kernel().can_run(2048, 6144, "w128_t192_st3").ok());
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
                                              "w48_t8_kwarps4_st4"};
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

// The GEMV quantizes a 16-byte aligned bf16 or fp16 activation itself; the other kernels, an
// fp32 activation or misaligned rows leave it to the quantize kernel.
TEST(GemvKernel, QuantizesAlignedBf16AndFp16ActivationsItself) {
  alignas(16) std::uint16_t storage[2 * 72] = {};
  const auto view = [&](void* data, std::int64_t cols, std::int64_t stride, DType dtype) {
    return TensorView::matrix(data, 2, cols, stride, dtype, Location::kDevice);
  };
  EXPECT_TRUE(
      gemv_kernel().quantizes_activation("w16_t8_kwarps8", view(storage, 64, 64, DType::kBF16)));
  EXPECT_TRUE(
      gemv_kernel().quantizes_activation("w16_t16_kwarps8", view(storage, 64, 72, DType::kF16)));
  EXPECT_FALSE(
      gemv_kernel().quantizes_activation("w16_t8_kwarps8", view(storage, 32, 32, DType::kF32)));
  EXPECT_FALSE(
      gemv_kernel().quantizes_activation("w16_t8_kwarps8", view(storage, 64, 68, DType::kBF16)));
  EXPECT_FALSE(gemv_kernel().quantizes_activation("w16_t8_kwarps8",
                                                  view(storage + 1, 64, 64, DType::kBF16)));
  EXPECT_FALSE(
      prefill_kernel().quantizes_activation("w128_t128_st4", view(storage, 64, 64, DType::kBF16)));
}

// The decode kernel's 8-token instances have quantizing twins (verified on the H200); the 32-
// and 128-token ones do not, and a twin that would fit fewer CTAs per SM than its
// plain instance is passed over (36 against 22 us at 1 x 6144 x 6144, w64_t8_st4_split4).
TEST(DecodeKernel, QuantizesItselfOnlyWhereATwinKeepsItsOccupancy) {
  std::vector<std::uint16_t> storage(6144 + 8, 0);
  const auto view = [&](std::int64_t cols, DType dtype) {
    return TensorView::matrix(storage.data(), 1, cols, cols, dtype, Location::kDevice);
  };
  const Kernel& k = decode_kernel();
  EXPECT_TRUE(k.quantizes_activation("w64_t8_st4_split8", view(6144, DType::kBF16)));
  EXPECT_TRUE(k.quantizes_activation("w64_t8_st8_alt", view(768, DType::kF16)));
  EXPECT_TRUE(k.quantizes_activation("w64_t8_st6_split2", view(2048, DType::kBF16)));
  EXPECT_FALSE(k.quantizes_activation("w64_t32_st4_split8", view(6144, DType::kBF16)));
  EXPECT_FALSE(k.quantizes_activation("w64_t8_st4_split8", view(6144, DType::kF32)));
  // 3 CTAs per SM for the twin against 4 for the plain instance.
  EXPECT_EQ(device::decode_ctas_per_sm(device::decode_gemm_smem_bytes(0, 6144, 4, true)), 3);
  EXPECT_EQ(device::decode_ctas_per_sm(device::decode_gemm_smem_bytes(0, 6144, 4)), 4);
  EXPECT_FALSE(k.quantizes_activation("w64_t8_st4_split4", view(6144, DType::kBF16)));
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
                        "w16_t8_kwarps4_waited, "));
  EXPECT_THAT(unknown.what(), HasSubstr("w48_t8_kwarps4_st4_early"));
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

// The GEMV ring: the copies (lane (r, h), chunks 4h..4h+3) fill every byte of a slot's rows
// once, each lane's fragment read finds bytes 32 * block + 8t .. + 7 of its row, and the 8 rows
// g = 0..7 of one read instruction fall in distinct 16-byte chunks for each t pair (two
// wavefronts per warp read).
TEST(GemvRing, CopiesAndFragmentReadsAgreeOnEveryByte) {
  namespace ring = device::gemv_ring;
  std::vector<int> owner(ring::kScaleOffset, -1);  // byte of the slot -> row * 128 + column
  for (int lane = 0; lane < 32; ++lane) {
    const int r = lane / 2, h = lane % 2;
    for (int c = 4 * h; c < 4 * h + 4; ++c) {
      for (int b = 0; b < 16; ++b) {
        const int at = ring::chunk_offset(r, c) + b;
        ASSERT_GE(at, 0);
        ASSERT_LT(at, ring::kScaleOffset);
        EXPECT_EQ(owner[static_cast<std::size_t>(at)], -1) << "slot byte " << at << " copied twice";
        owner[static_cast<std::size_t>(at)] = r * ring::kRowBytes + 16 * c + b;
      }
    }
  }
  for (int row = 0; row < ring::kRows; ++row) {
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
