// The CUDA-core MX GEMV, every config, against the fp64 reference (MXFP8.md's checks), plus
// determinism and CUDA-graph capture with programmatic launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <random>
#include <sstream>
#include <string>

#include "device/gemv_gemm.hpp"
#include "device/quantize.hpp"
#include "gpu/gemm_checks.hpp"
#include "gpu/gpu_support.hpp"
#include "support/random.hpp"

namespace mxlinear::test {
namespace {

// M = 1, 2 and several token tiles (3, 7); N not a multiple of a CTA's rows (4 or 8); K = 32,
// 96 and 544 (a lane's last round partly past the row) and K beyond one round (256 or 128
// 16-byte columns).
const GemmShape kShapes[] = {{1, 1, 32},    {2, 9, 96},     {3, 33, 544},
                             {7, 70, 1024}, {1, 130, 4096}, {2, 5, 6144}};

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
// kernel followed by the GEMV on its output (NaN and Inf blocks included; tokens past M, a
// partial token tile, and K not a multiple of a lane's round).
TEST_P(GemvGemmConfig, QuantizingInsideEqualsTheQuantizeKernelFirst) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    for (const GemmShape& c : {GemmShape{1, 70, 544}, GemmShape{3, 33, 2048}}) {
      SCOPED_TRACE(::testing::Message()
                   << to_string(dtype) << " M=" << c.m << " N=" << c.n << " K=" << c.k);
      std::vector<std::uint16_t> x(static_cast<std::size_t>(c.m * c.k));
      for (auto& e : x) {
        const float f = normal(rng);
        if (dtype == DType::kBF16) {
          const __nv_bfloat16 b = __float2bfloat16_rn(f);
          std::memcpy(&e, &b, 2);
        } else {
          const __half h = __float2half_rn(f);
          std::memcpy(&e, &h, 2);
        }
      }
      x[7] = dtype == DType::kBF16 ? 0x7FC0 : 0x7E00;  // NaN
      x[static_cast<std::size_t>(c.k + 40) % x.size()] =
          dtype == DType::kBF16 ? 0x7F80 : 0x7C00;  // Inf
      const DeviceBuffer dx = DeviceBuffer::from(x);
      const MxOperand w = random_operand(c.n, c.k, rng);
      const DeviceMx dw = upload(w);
      DeviceBuffer q(static_cast<std::size_t>(c.m * c.k)),
          s(static_cast<std::size_t>(c.m * c.k / 32));
      device::QuantizeParams qp;
      qp.x = dx.get();
      qp.q = q.bytes();
      qp.scales = s.bytes();
      qp.ld_x = c.k;
      qp.ld_q = c.k;
      qp.ld_s = c.k / 32;
      qp.m = static_cast<int>(c.m);
      qp.k = static_cast<int>(c.k);
      qp.in_type = dtype == DType::kBF16 ? device::InType::kBF16 : device::InType::kF16;
      ASSERT_EQ(device::launch_quantize(qp, nullptr), cudaSuccess);
      const std::size_t bytes = static_cast<std::size_t>(c.m * c.n) * 4;
      DeviceBuffer first(bytes), inside(bytes);
      first.poison();
      inside.poison();
      device::GemmParams p;
      p.a = q.bytes();
      p.a_scales = s.bytes();
      p.ld_a = c.k;
      p.ld_a_scales = c.k / 32;
      p.w = dw.data.bytes();
      p.w_scales = dw.scales.bytes();
      p.ld_w = c.k;
      p.ld_w_scales = c.k / 32;
      p.out = first.get();
      p.ld_out = c.n;
      p.m = static_cast<int>(c.m);
      p.n = static_cast<int>(c.n);
      p.k = static_cast<int>(c.k);
      p.out_type = device::OutType::kF32;
      ASSERT_EQ(device::launch_gemv_gemm(p, GetParam(), nullptr), cudaSuccess);
      p.out = inside.get();
      p.x = dx.get();
      p.ld_x = c.k;
      p.x_is_f16 = dtype == DType::kF16;
      ASSERT_TRUE(device::gemv_gemm_unsupported(p).empty()) << device::gemv_gemm_unsupported(p);
      ASSERT_EQ(device::launch_gemv_gemm(p, GetParam(), nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto a = first.download<std::uint32_t>(bytes / 4);
      const auto b = inside.download<std::uint32_t>(bytes / 4);
      EXPECT_EQ(a, b);
      for (std::uint32_t bits : b) ASSERT_NE(bits, 0xFFFFFFFFu) << "an output was not written";
    }
  }
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
