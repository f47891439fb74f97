// The generic GEMM, every compiled config, against the fp64 reference (MXFP8.md's checks).
#include <cmath>
#include <cstring>

#include "device/kernels/generic/generic_gemm.hpp"
#include "gpu/gemm_checks.hpp"
#include "gpu/gpu_support.hpp"
#include "host/registry/generic_config.hpp"
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

// Runs config `config` on the operands; out is poisoned first.
// Which way the kernel reads scales: by cp.async where the rows allow it, or from global memory.
enum class ScalePath { kCpAsyncWhereAligned, kGlobalLoads };
constexpr ScalePath kBothPaths[] = {ScalePath::kCpAsyncWhereAligned, ScalePath::kGlobalLoads};

GemmRun run_config(int config, const MxOperand& a, const MxOperand& w, DType out_dtype,
                   const DeviceBuffer* bias = nullptr,
                   device::BiasType bias_type = device::BiasType::kNone,
                   ScalePath path = ScalePath::kCpAsyncWhereAligned) {
  const GemmLauncher launch = [config, path](const device::GemmParams& params,
                                             cudaStream_t stream) {
    device::GemmParams p = params;
    p.scales_via_cp_async =
        path == ScalePath::kCpAsyncWhereAligned && device::scales_allow_cp_async(p);
    return device::launch_generic_gemm(p, config, stream);
  };
  return GemmRun{run_launcher(launch, a, w, out_dtype, bias, bias_type)};
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
