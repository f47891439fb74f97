// The MX GEMV (mma.sync from global memory), every config, against the fp64 reference
// (MXFP8.md's checks), plus determinism and CUDA-graph capture with programmatic launch; and its
// W8A16 variants (a bf16 or fp16 x used as it is) against the fp64 W8A16 oracle.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "device/common/sm90.hpp"
#include "device/kernels/gemv/gemv_gemm.hpp"
#include "gpu/gemm_checks.hpp"
#include "gpu/gpu_support.hpp"
#include "host/registry/gemv_config.hpp"
#include "support/mx_oracle.hpp"
#include "support/random.hpp"

namespace mxlinear::test {
namespace {

// M = 1, 2, 7 and several token tiles (17, 40); N not a multiple of a CTA's 16 or 48 rows (and
// 48-row CTAs with whole 16-row tiles past N); K = 32 and
// 96 (fewer blocks than warps), 544 (17 blocks: ranges that end inside a round) and K of many
// rounds per warp.
const GemmShape kShapes[] = {{1, 1, 32},     {2, 9, 96},   {3, 33, 544},  {7, 70, 1024},
                             {1, 130, 4096}, {2, 5, 6144}, {17, 40, 800}, {40, 17, 2080}};

class GemvGemmConfig : public ::testing::TestWithParam<int> {
 protected:
  GemmLauncher launcher() const {
    return [instance = GetParam()](const device::GemmParams& p, cudaStream_t stream) {
      EXPECT_TRUE(device::gemv_gemm_unsupported(p).empty()) << device::gemv_gemm_unsupported(p);
      return device::launch_gemv_gemm(p, instance, stream);
    };
  }
  GemmRunner runner() const {
    return [launch = launcher()](const MxOperand& a, const MxOperand& w, DType out_dtype,
                                 const DeviceBuffer* bias, device::BiasType bias_type) {
      return run_launcher(launch, a, w, out_dtype, bias, bias_type);
    };
  }
};

TEST_P(GemvGemmConfig, ExactInputsMatchFp64BitForBit) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_exact_on_shapes(runner(), kShapes, rng);
}

TEST_P(GemvGemmConfig, RandomInputsWithinDerivedTolerance) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_random_on_shapes(runner(), kShapes, 1, rng);
}

TEST_P(GemvGemmConfig, ExtremeScaleBytesAreExact) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_extreme_scale_bytes(runner(), 3, 9, rng);
}

TEST_P(GemvGemmConfig, SeedSizedLayerIsStableAcrossRuns) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_stable_across_runs(runner(), {2, 2560, 6144}, 8, 1, rng);
}

TEST_P(GemvGemmConfig, GraphReplayMatchesEager) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_graph_replay(launcher(), {2, 130, 1024}, rng);
}

TEST_P(GemvGemmConfig, NaNBiasAndDeterminism) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_nan_bias_determinism(runner(), {1024, 2, 257, 2048}, rng);
}

// Quantizing the bf16 or fp16 activation inside the kernel gives the bits of the quantize
// kernel followed by the GEMV on its output (tokens past M, a partial token tile, and K not a
// multiple of a lane's round).
TEST_P(GemvGemmConfig, QuantizingInsideEqualsTheQuantizeKernelFirst) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  const GemmShape shapes[] = {{1, 70, 544}, {3, 33, 2048}};
  check_quantizing_inside(launcher(), shapes, rng);
}

// Each point where a CTA lets the next kernel launch keeps a chain in order
// (check_chain_graph_replay).
TEST_P(GemvGemmConfig, EveryNextLaunchPointKeepsAChainInOrder) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  constexpr std::int64_t kN = 257, kK = 2048;
  const MxOperand a = random_operand(1, kK, rng);
  DeviceMx da = upload(a);
  DeviceMx dw[2] = {upload(random_operand(kN, kK, rng)), upload(random_operand(kN, kK, rng))};
  DeviceBuffer out[2] = {DeviceBuffer(kN * 4), DeviceBuffer(kN * 4)};
  const GemmLauncher launch = launcher();
  for (const device::NextLaunch next :
       {device::NextLaunch::kAfterActivation, device::NextLaunch::kAfterWait,
        device::NextLaunch::kAtEntry}) {
    SCOPED_TRACE(static_cast<int>(next));
    auto call = [&](int i, cudaStream_t stream) {
      device::GemmParams p = gemm_params(da, dw[i % 2], out[i % 2], DType::kF32);
      p.next_launch = next;
      if (i > 0) {
        p.bias = out[(i + 1) % 2].get();
        p.bias_type = device::BiasType::kF32;
      }
      return launch(p, stream);
    };
    check_chain_graph_replay(call, 4, out);
  }
}

// --- W8A16: x as it is (bf16 or fp16), MX weights ---------------------------------------------
// Every instance has W8A16 variants; launch_gemv_gemm picks one by p.x_as_is and p.x_is_f16.

// Every M in {1, 3, 8, 9, 16} meets every N in {1, 16, 40, 130, 1000} once, with K cycling
// through {32, 96, 544, 4096} (K = kK[(i + j) % 4]), so each K meets several M and N: M = 1 and 3
// run part of one token tile, 8 a whole 8-token tile, 9 and 16 two tiles of 8 tokens (or part of
// or one whole 16-token tile); K = 32 and 96 give warps (and splits) no blocks, 544 ends inside a
// round or ring stage.
std::vector<GemmShape> w8a16_shapes() {
  constexpr std::int64_t kM[] = {1, 3, 8, 9, 16};
  constexpr std::int64_t kN[] = {1, 16, 40, 130, 1000};
  constexpr std::int64_t kK[] = {32, 96, 544, 4096};
  std::vector<GemmShape> shapes;
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 5; ++j) shapes.push_back({kM[i], kN[j], kK[(i + j) % 4]});
  }
  return shapes;
}

TEST_P(GemvGemmConfig, W8A16ExactInputsMatchFp64BitForBit) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_w8a16_exact(launcher(), w8a16_shapes(), rng);
}

TEST_P(GemvGemmConfig, W8A16RandomInputsWithinFp32AccumulationBound) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_w8a16_random(launcher(), w8a16_shapes(), rng);
}

// Row strides past K (NaN between the rows) and a base 16 bytes into its buffer (NaN before it):
// the kernel reads x's [M, K] view and nothing else. The host guarantees 16-byte aligned rows.
TEST_P(GemvGemmConfig, W8A16PaddedRowsMatchFp64BitForBit) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  constexpr XLayout kLayouts[] = {{8, 0}, {0, 8}, {64, 8}};
  constexpr GemmShape kPaddedShapes[] = {{3, 40, 544}, {16, 130, 96}, {9, 33, 2048}};
  constexpr DType kOutputs[] = {DType::kF32};
  check_w8a16_layouts(launcher(), kPaddedShapes, kLayouts, kOutputs, rng);
}

// A NaN scale of one weight block, a NaN weight code and a NaN in x make exactly the outputs
// they feed NaN (K = 256: whole ring stages; K = 544: a partial one), over three 8-token tiles
// (two 16-token ones).
TEST_P(GemvGemmConfig, W8A16NaNPropagatesExactly) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_w8a16_nan_propagation(launcher(), rng);
}

TEST_P(GemvGemmConfig, W8A16BiasIsAddedExactly) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_w8a16_bias(launcher(), 16, rng);
}

TEST_P(GemvGemmConfig, W8A16SeedSizedLayerIsStableAcrossRuns) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  constexpr std::int64_t kM = 2, kN = 2560, kK = 6144;
  for (const DType x_dtype : kActivation16Types) {
    SCOPED_TRACE(::testing::Message() << "x=" << to_string(x_dtype));
    const Activation16 x = random_activation16_as_is(kM, kK, kK, x_dtype, rng);
    const MxOperand w = random_operand(kN, kK, rng);
    const W8A16Operands op = w8a16_operands(x, w);
    const std::vector<std::uint8_t> first = run_w8a16(launcher(), x, 0, w, DType::kF32);
    expect_within_accumulation_bound(first, w8a16_reference(op, {}), w8a16_abs_product_sums(op), kK,
                                     DType::kF32);
    for (int run = 1; run < 8; ++run) {
      EXPECT_TRUE(run_w8a16(launcher(), x, 0, w, DType::kF32) == first) << "run " << run;
    }
  }
}

// Host-side only: no launch happens, so these run without a GPU too.
TEST_P(GemvGemmConfig, W8A16SharedMemoryIsReported) {
  const int instance = GetParam();
  const device::GemvInstanceInfo& info =
      device::gemv_gemm_instances()[static_cast<std::size_t>(instance)];
  for (const std::int64_t m : {std::int64_t{1}, std::int64_t{info.tokens}, std::int64_t{1000}}) {
    for (const int k : {32, 544, 4096}) {
      SCOPED_TRACE(::testing::Message() << "M=" << m << " K=" << k);
      const int w8a8 = device::gemv_gemm_smem_bytes(instance, m, k);
      EXPECT_EQ(device::gemv_gemm_smem_bytes(instance, m, k, false), w8a8);
      // 16-bit rows take more than e4m3 rows and their fp32 scales, and no more than twice all.
      const int w8a16 = device::gemv_gemm_smem_bytes(instance, m, k, true);
      EXPECT_GT(w8a16, w8a8);
      EXPECT_LE(w8a16, 2 * w8a8);
    }
  }
  // The staged rows grow with min(M, tokens) and K.
  EXPECT_LT(device::gemv_gemm_smem_bytes(instance, 1, 4096, true),
            device::gemv_gemm_smem_bytes(instance, info.tokens, 4096, true));
  EXPECT_EQ(device::gemv_gemm_smem_bytes(instance, info.tokens, 4096, true),
            device::gemv_gemm_smem_bytes(instance, 1000, 4096, true));
  EXPECT_LT(device::gemv_gemm_smem_bytes(instance, 1, 4096, true),
            device::gemv_gemm_smem_bytes(instance, 1, 8192, true));
  // K = 4096 fits one CTA at full tokens (the tests run it); K = 16384 does not.
  EXPECT_LE(device::gemv_gemm_smem_bytes(instance, info.tokens, 4096, true),
            device::kSm90MaxSmemPerCta);
  EXPECT_GT(device::gemv_gemm_smem_bytes(instance, info.tokens, 16384, true),
            device::kSm90MaxSmemPerCta);
}

TEST_P(GemvGemmConfig, W8A16WithoutActivationIsRejected) {
  device::GemmParams p;
  p.x_as_is = true;  // and p.x unset
  p.m = p.n = 1;
  p.k = 32;
  EXPECT_FALSE(device::gemv_gemm_unsupported(p).empty());
  EXPECT_EQ(device::launch_gemv_gemm(p, GetParam(), nullptr), cudaErrorInvalidValue);
}

// --- K parts: the batch-invariant mode's order (bf16 on scale-folded weights) ----------------
// That these give the prefill kernel's bits is batch_invariance_gpu_test's; here, the contract
// of any GEMV config. Scales stay in bf16's normal range (the flush bound of folded weights is
// the prefill kernel's tests').
class GemvKPartsConfig : public GemvGemmConfig {};

// K of one part (32 to 2080: fewer chunks than warps, a short last chunk), two (4096, 4160),
// three (6144), four (8192: one part a warp), five and six (10240, and 12320 with a short last
// chunk: warps with one or two parts) and eight (14336: every warp two parts). A tile of one warp
// per row tile chains all of them in turn; N of 1 to 130 leaves its 32-row CTAs row tiles past N.
const GemmShape kPartsShapes[] = {{1, 1, 32},     {3, 33, 544},  {7, 70, 1024}, {16, 17, 2080},
                                  {1, 130, 4096}, {5, 40, 4160}, {2, 5, 6144},  {3, 17, 8192},
                                  {1, 9, 10240},  {2, 8, 12320}, {1, 24, 14336}};
constexpr DType kBf16Only[] = {DType::kBF16};

TEST_P(GemvKPartsConfig, ExactInputsMatchFp64BitForBit) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_exact_on_shapes(runner(), kPartsShapes, rng);
}

TEST_P(GemvKPartsConfig, RandomInputsWithinDerivedTolerance) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_random_on_shapes(runner(), kPartsShapes, 1, rng);
}

TEST_P(GemvKPartsConfig, QuantizingInsideEqualsTheQuantizeKernelFirst) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  const GemmShape shapes[] = {{1, 70, 544}, {3, 33, 6144}};
  check_quantizing_inside(launcher(), shapes, rng);
}

// Finite rows, their scales in the scaled domain's window: the four-chain tile's CTAs quantize
// into that domain (the block of zeros too; the other tiles quantize into the scaled form),
// where the quantize kernel's output, whose block of zeros has the scale 2^-127, is chained in
// the scaled form; the same bits either way. One to three parts, rows past N, 16 tokens.
TEST_P(GemvKPartsConfig, QuantizingIntoTheScaledDomainEqualsTheQuantizeKernelFirst) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  const GemmShape shapes[] = {{1, 70, 544}, {1, 40, 2048}, {3, 33, 6144}, {16, 9, 4160}};
  check_quantizing_inside(launcher(), shapes, rng, /*finite=*/true);
}

TEST_P(GemvKPartsConfig, NaNBiasAndDeterminism) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_nan_bias_determinism(runner(), {1024, 2, 257, 2048}, rng);
}

TEST_P(GemvKPartsConfig, GraphReplayMatchesEager) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_graph_replay(launcher(), {2, 130, 4096}, rng);
}

TEST_P(GemvKPartsConfig, W8A16Bf16MatchesFp64) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_w8a16_exact(launcher(), kPartsShapes, rng, kBf16Only);
  check_w8a16_random(launcher(), kPartsShapes, rng, kBf16Only);
  check_w8a16_nan_propagation(launcher(), rng, kBf16Only);
  check_w8a16_bias(launcher(), 16, rng, kBf16Only);
}

// The prefill kernel's order is on bf16: an fp16 x is refused before any launch.
TEST_P(GemvKPartsConfig, W8A16Fp16IsRefused) {
  device::GemmParams p;
  p.x_as_is = true;
  p.x_is_f16 = true;
  static const std::uint16_t kNeverRead[32] = {};
  p.x = kNeverRead;
  p.m = p.n = 1;
  p.k = 32;
  EXPECT_EQ(device::launch_gemv_gemm(p, GetParam(), nullptr), cudaErrorInvalidValue);
}

// Both modes stage 16-bit rows: the same shared memory.
TEST_P(GemvKPartsConfig, SharedMemoryIsTheSameInBothModes) {
  for (const std::int64_t m : {std::int64_t{1}, std::int64_t{8}}) {
    for (const int k : {32, 4160, 14336}) {
      EXPECT_EQ(device::gemv_gemm_smem_bytes(GetParam(), m, k, true),
                device::gemv_gemm_smem_bytes(GetParam(), m, k, false));
    }
  }
}

std::vector<int> instances_where(bool k_parts) {
  std::vector<int> v;
  const auto instances = device::gemv_gemm_instances();
  for (std::size_t i = 0; i < instances.size(); ++i) {
    if (instances[i].k_parts == k_parts) v.push_back(static_cast<int>(i));
  }
  return v;
}

std::string config_name(const ::testing::TestParamInfo<int>& param) {
  return detail::GemvConfig::of(
             device::gemv_gemm_instances()[static_cast<std::size_t>(param.param)])
      .name();
}

INSTANTIATE_TEST_SUITE_P(EveryConfig, GemvGemmConfig, ::testing::ValuesIn(instances_where(false)),
                         config_name);
INSTANTIATE_TEST_SUITE_P(EveryConfig, GemvKPartsConfig, ::testing::ValuesIn(instances_where(true)),
                         config_name);

}  // namespace
}  // namespace mxlinear::test
