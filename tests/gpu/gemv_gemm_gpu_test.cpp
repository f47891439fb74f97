// The MX GEMV (mma.sync from global memory), every config, against the fp64 reference
// (MXFP8.md's checks), plus determinism and CUDA-graph capture with programmatic launch.

#include "device/kernels/gemv/gemv_gemm.hpp"
#include "gpu/gemm_checks.hpp"
#include "gpu/gpu_support.hpp"
#include "host/registry/gemv_config.hpp"
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

INSTANTIATE_TEST_SUITE_P(
    EveryConfig, GemvGemmConfig,
    ::testing::Range(0, static_cast<int>(device::gemv_gemm_instances().size())),
    [](const ::testing::TestParamInfo<int>& param) {
      return detail::GemvConfig::of(
                 device::gemv_gemm_instances()[static_cast<std::size_t>(param.param)])
          .name();
    });

}  // namespace
}  // namespace mxlinear::test
