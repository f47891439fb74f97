// The generic GEMM, every compiled config, against the fp64 reference (MXFP8.md's checks).
#include <cmath>
#include <cstring>

#include "device/common/sm90.hpp"
#include "device/kernels/generic/generic_gemm.hpp"
#include "gpu/gemm_checks.hpp"
#include "gpu/gpu_support.hpp"
#include "host/registry/generic_config.hpp"
#include "support/mx_oracle.hpp"
#include "support/random.hpp"

namespace mxlinear::test {
namespace {

struct Case {
  std::int64_t m, n, k;
};

// Not tile multiples on purpose: M = 1, 7, 100, 1000; N not a multiple of 8, 16 or 128; K = 32,
// 96, 544.
// K % 128 == 0 shapes take the cp.async scale path; the others read scales from global memory.
const Case kShapes[] = {{1, 1, 32},      {7, 33, 96},     {100, 257, 544},
                        {1000, 100, 96}, {16, 130, 160},  {129, 64, 544},
                        {33, 200, 768},  {300, 136, 256}, {5, 24, 128}};

struct GemmRun {
  std::vector<std::uint8_t> out;  // raw bytes [m, n] (row stride n)
};

// Which way the kernel reads scales: by cp.async where the rows allow it, or from global memory.
enum class ScalePath { kCpAsyncWhereAligned, kGlobalLoads };
constexpr ScalePath kBothPaths[] = {ScalePath::kCpAsyncWhereAligned, ScalePath::kGlobalLoads};

// Config `config`'s launcher, its scales on `path`.
GemmLauncher config_launcher(int config, ScalePath path) {
  return [config, path](const device::GemmParams& params, cudaStream_t stream) {
    device::GemmParams p = params;
    p.scales_via_cp_async =
        path == ScalePath::kCpAsyncWhereAligned && device::scales_allow_cp_async(p);
    return device::launch_generic_gemm(p, config, stream);
  };
}

// Runs config `config` on the operands; out is poisoned first.
GemmRun run_config(int config, const MxOperand& a, const MxOperand& w, DType out_dtype,
                   const DeviceBuffer* bias = nullptr,
                   device::BiasType bias_type = device::BiasType::kNone,
                   ScalePath path = ScalePath::kCpAsyncWhereAligned) {
  return GemmRun{run_launcher(config_launcher(config, path), a, w, out_dtype, bias, bias_type)};
}

class GenericGemmConfig : public ::testing::TestWithParam<int> {
 protected:
  GemmRunner runner() const {
    return [config = GetParam()](const MxOperand& a, const MxOperand& w, DType out_dtype,
                                 const DeviceBuffer* bias, device::BiasType bias_type) {
      return run_config(config, a, w, out_dtype, bias, bias_type).out;
    };
  }
};

TEST_P(GenericGemmConfig, ExactInputsMatchFp64BitForBit) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  for (const Case& c : kShapes) {
    const MxOperand a = exact_operand(c.m, c.k, rng);
    const MxOperand w = exact_operand(c.n, c.k, rng);
    const std::vector<double> ref = reference(a, w, {});
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      for (ScalePath path : kBothPaths) {
        SCOPED_TRACE(::testing::Message()
                     << "M=" << c.m << " N=" << c.n << " K=" << c.k << " out=" << to_string(dtype)
                     << " scale path=" << static_cast<int>(path));
        const GemmRun r =
            run_config(GetParam(), a, w, dtype, nullptr, device::BiasType::kNone, path);
        expect_bit_exact(r.out, ref, c.n, dtype);
      }
    }
  }
}

TEST_P(GenericGemmConfig, RandomInputsWithinDerivedTolerance) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  for (const Case& c : kShapes) {
    const MxOperand a = random_operand(c.m, c.k, rng);
    const MxOperand w = random_operand(c.n, c.k, rng);
    const std::vector<double> ref = reference(a, w, {});
    const std::vector<double> abs_sums = abs_product_sums(a, w);
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      for (ScalePath path : kBothPaths) {
        SCOPED_TRACE(::testing::Message()
                     << "M=" << c.m << " N=" << c.n << " K=" << c.k << " out=" << to_string(dtype)
                     << " scale path=" << static_cast<int>(path));
        const GemmRun r =
            run_config(GetParam(), a, w, dtype, nullptr, device::BiasType::kNone, path);
        expect_within_tolerance(r.out, ref, abs_sums, c.k, dtype);
      }
    }
  }
}

TEST_P(GenericGemmConfig, NaNBiasAndDeterminism) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_nan_bias_determinism(runner(), {128, 100, 257, 544}, rng);
}

// --- W8A16: x as it is (bf16 or fp16), MX weights ---------------------------------------------

// Every M in {1, 7, 100, 1000} meets every N in {1, 24, 130, 1000} once, each K in
// {32, 96, 544, 4096} with four (M, N) pairs, one of each M and of each N (K = kK[(i - j) % 4]):
// K = 4096 meets M = 100 x N = 1000, [1000, 1000] takes K = 32, and the fp64 host reference
// stays near 5e8 products a pass.
std::vector<GemmShape> w8a16_shapes() {
  constexpr std::int64_t kM[] = {1, 7, 100, 1000};
  constexpr std::int64_t kN[] = {1, 24, 130, 1000};
  constexpr std::int64_t kK[] = {32, 96, 544, 4096};
  std::vector<GemmShape> shapes;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) shapes.push_back({kM[i], kN[j], kK[(i - j + 4) % 4]});
  }
  return shapes;
}

TEST_P(GenericGemmConfig, W8A16ExactInputsMatchFp64BitForBit) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  for (const ScalePath path : kBothPaths) {
    SCOPED_TRACE(::testing::Message() << "scale path=" << static_cast<int>(path));
    check_w8a16_exact(config_launcher(GetParam(), path), w8a16_shapes(), rng);
  }
}

TEST_P(GenericGemmConfig, W8A16RandomInputsWithinFp32AccumulationBound) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_w8a16_random(config_launcher(GetParam(), ScalePath::kCpAsyncWhereAligned), w8a16_shapes(),
                     rng);
}

// Rows whose base or stride is not a multiple of 16 bytes take the element-wise path; a padded
// stride that is takes cp.async. The padding and the element before an offset base are NaN.
TEST_P(GenericGemmConfig, W8A16UnalignedActivationMatchesFp64BitForBit) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  constexpr XLayout kLayouts[] = {{1, 0}, {0, 1}, {3, 1}, {4, 4}, {8, 0}};
  constexpr GemmShape kUnalignedShapes[] = {{7, 130, 544}, {100, 24, 96}, {300, 33, 1024}};
  constexpr DType kOutputs[] = {DType::kBF16, DType::kF32};
  check_w8a16_layouts(config_launcher(GetParam(), ScalePath::kCpAsyncWhereAligned),
                      kUnalignedShapes, kLayouts, kOutputs, rng);
}

// A NaN scale of one weight block, a NaN weight code and a NaN in x make exactly the outputs
// they feed NaN, on both scale paths (K = 256: cp.async; K = 544: global loads).
TEST_P(GenericGemmConfig, W8A16NaNPropagatesExactly) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  for (const ScalePath path : kBothPaths) {
    SCOPED_TRACE(::testing::Message() << "scale path=" << static_cast<int>(path));
    check_w8a16_nan_propagation(config_launcher(GetParam(), path), rng);
  }
}

TEST_P(GenericGemmConfig, W8A16BiasIsAddedExactly) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_w8a16_bias(config_launcher(GetParam(), ScalePath::kCpAsyncWhereAligned), 300, rng);
}

// Host-side only: no launch happens, so these run without a GPU too.
TEST_P(GenericGemmConfig, W8A16SharedMemoryFitsAndIsReported) {
  const int config = GetParam();
  const device::GenericConfigInfo& info =
      device::generic_gemm_configs()[static_cast<std::size_t>(config)];
  EXPECT_EQ(device::generic_gemm_smem_bytes(config, false), info.smem_bytes);
  EXPECT_EQ(device::generic_gemm_smem_bytes(config, true), info.smem_bytes_as_is);
  EXPECT_LE(info.smem_bytes_as_is, device::kSm90MaxSmemPerCta);
  EXPECT_GE(info.smem_bytes_as_is, info.smem_bytes);
  EXPECT_GE(info.stages_as_is, 2);
  EXPECT_LE(info.stages_as_is, info.stages);
}

TEST_P(GenericGemmConfig, W8A16WithoutActivationIsRejected) {
  device::GemmParams p;
  p.x_as_is = true;  // and p.x unset
  p.m = p.n = 1;
  p.k = 32;
  EXPECT_EQ(device::launch_generic_gemm(p, GetParam(), nullptr), cudaErrorInvalidValue);
}

std::string config_name(const ::testing::TestParamInfo<int>& info) {
  return detail::GenericConfig::of(
             device::generic_gemm_configs()[static_cast<std::size_t>(info.param)])
      .name();
}

INSTANTIATE_TEST_SUITE_P(EveryConfig, GenericGemmConfig,
                         ::testing::Range(0,
                                          static_cast<int>(device::generic_gemm_configs().size())),
                         config_name);

}  // namespace
}  // namespace mxlinear::test
