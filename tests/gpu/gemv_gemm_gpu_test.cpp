// The CUDA-core MX GEMV, every config, against the fp64 reference (MXFP8.md's checks), plus
// determinism and CUDA-graph capture with programmatic launch.
#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

#include "device/gemv_gemm.hpp"
#include "gpu/gemm_checks.hpp"
#include "gpu/gpu_support.hpp"
#include "support/random.hpp"

namespace mxlinear::test {
namespace {

struct Case {
  std::int64_t m, n, k;
};

// M = 1, 2 and several token tiles (3, 7); N not a multiple of a CTA's rows (4 or 8); K = 32,
// 96 and 544 (a lane's last round is partly past the row; K / 16 odd columns never happen,
// K % 32 == 0), and K beyond one round of 256 or 128 columns.
const Case kShapes[] = {{1, 1, 32},    {2, 9, 96},     {3, 33, 544},
                        {7, 70, 1024}, {1, 130, 4096}, {2, 5, 6144}};

std::vector<std::uint8_t> run_config(int instance, const MxOperand& a, const MxOperand& w,
                                     DType out_dtype, const DeviceBuffer* bias = nullptr,
                                     device::BiasType bias_type = device::BiasType::kNone,
                                     cudaStream_t stream = nullptr) {
  DeviceMx da = upload(a);
  DeviceMx dw = upload(w);
  const std::size_t bytes = static_cast<std::size_t>(a.rows * w.rows) * element_size(out_dtype);
  DeviceBuffer out(bytes);
  out.poison();
  device::GemmParams p = gemm_params(da, dw, out, out_dtype);
  if (bias) {
    p.bias = bias->get();
    p.bias_type = bias_type;
  }
  EXPECT_TRUE(device::gemv_gemm_unsupported(p).empty()) << device::gemv_gemm_unsupported(p);
  EXPECT_EQ(device::launch_gemv_gemm(p, instance, stream), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::uint8_t> r(bytes);
  out.download_to(r.data(), bytes);
  return r;
}

class GemvGemmConfig : public ::testing::TestWithParam<int> {
 protected:
  GemmRunner runner() const {
    return [instance = GetParam()](const MxOperand& a, const MxOperand& w, DType out_dtype,
                                   const DeviceBuffer* bias, device::BiasType bias_type) {
      return run_config(instance, a, w, out_dtype, bias, bias_type);
    };
  }
};

TEST_P(GemvGemmConfig, ExactInputsMatchFp64BitForBit) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  for (const Case& c : kShapes) {
    const MxOperand a = exact_operand(c.m, c.k, rng);
    const MxOperand w = exact_operand(c.n, c.k, rng);
    const std::vector<double> ref = reference(a, w, {});
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      SCOPED_TRACE(::testing::Message()
                   << "M=" << c.m << " N=" << c.n << " K=" << c.k << " out=" << to_string(dtype));
      expect_bit_exact(run_config(GetParam(), a, w, dtype), ref, c.n, dtype);
    }
  }
}

TEST_P(GemvGemmConfig, RandomInputsWithinDerivedTolerance) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  for (const Case& c : kShapes) {
    const MxOperand a = random_operand(c.m, c.k, rng);
    const MxOperand w = random_operand(c.n, c.k, rng);
    const std::vector<double> ref = reference(a, w, {});
    const std::vector<double> abs_sums = abs_product_sums(a, w);
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(::testing::Message()
                   << "M=" << c.m << " N=" << c.n << " K=" << c.k << " out=" << to_string(dtype));
      expect_within_tolerance(run_config(GetParam(), a, w, dtype), ref, abs_sums, c.k, dtype);
    }
  }
}

// Scale bytes 0 (2^-127, an fp32 subnormal) and 254 (2^127) decode exactly: every activation
// block has scale byte 0; weight rows 0 and 5 have 254 everywhere (see the decode kernel's
// test of the same name: no sum mixes tiny and normal terms, so every one is exact).
TEST_P(GemvGemmConfig, ExtremeScaleBytesAreExact) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  MxOperand a = exact_operand(3, 1024, rng);
  MxOperand w = exact_operand(9, 1024, rng);
  std::fill(a.scales.begin(), a.scales.end(), std::uint8_t{0});
  for (const std::int64_t row : {0, 5})
    std::fill_n(w.scales.begin() + row * 32, 32, std::uint8_t{254});
  const std::vector<double> ref = reference(a, w, {});
  const auto out = run_config(GetParam(), a, w, DType::kF32);
  for (std::size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(output_value(out, DType::kF32, i), round_to(ref[i], DType::kF32))
        << "out[" << i / 9 << ", " << i % 9 << "]";
  }
}

// A seed-sized layer run repeatedly: every run equals the first bit for bit, and the first is
// within tolerance.
TEST_P(GemvGemmConfig, SeedSizedLayerIsStableAcrossRuns) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  const MxOperand a = random_operand(2, 6144, rng);
  const MxOperand w = random_operand(2560, 6144, rng);
  const auto first = run_config(GetParam(), a, w, DType::kF32);
  for (int run = 1; run < 8; ++run) {
    const auto again = run_config(GetParam(), a, w, DType::kF32);
    ASSERT_EQ(std::memcmp(first.data(), again.data(), first.size()), 0) << "run " << run;
  }
  expect_within_tolerance(first, reference(a, w, {}), abs_product_sums(a, w), 6144, DType::kF32);
}

// Three back-to-back launches captured into a graph (programmatic edges between them) replay to
// the eager result.
TEST_P(GemvGemmConfig, GraphReplayMatchesEager) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  const MxOperand a = random_operand(2, 1024, rng);
  const MxOperand w = random_operand(130, 1024, rng);
  const auto eager = run_config(GetParam(), a, w, DType::kBF16);
  DeviceMx da = upload(a);
  DeviceMx dw = upload(w);
  DeviceBuffer out(eager.size());
  const device::GemmParams p = gemm_params(da, dw, out, DType::kBF16);
  cudaStream_t stream;
  MXL_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  MXL_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(device::launch_gemv_gemm(p, GetParam(), stream), cudaSuccess);
  MXL_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  MXL_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    out.poison();
    MXL_CUDA_OK(cudaGraphLaunch(exec, stream));
    MXL_CUDA_OK(cudaStreamSynchronize(stream));
    std::vector<std::uint8_t> got(eager.size());
    out.download_to(got.data(), got.size());
    EXPECT_EQ(std::memcmp(got.data(), eager.data(), got.size()), 0) << "replay " << replay;
  }
  MXL_CUDA_OK(cudaGraphExecDestroy(exec));
  MXL_CUDA_OK(cudaGraphDestroy(graph));
  MXL_CUDA_OK(cudaStreamDestroy(stream));
}

TEST_P(GemvGemmConfig, NaNBiasAndDeterminism) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_nan_bias_determinism(runner(), {1024, 2, 257, 2048}, rng);
}

INSTANTIATE_TEST_SUITE_P(
    EveryConfig, GemvGemmConfig,
    ::testing::Range(0, static_cast<int>(device::gemv_gemm_instances().size())),
    [](const ::testing::TestParamInfo<int>& param) {
      std::ostringstream name;  // the registry's config name (a stream: GCC 12 warns on +)
      name << "t" << device::gemv_gemm_instances()[static_cast<std::size_t>(param.param)].tokens;
      return name.str();
    });

}  // namespace
}  // namespace mxlinear::test
