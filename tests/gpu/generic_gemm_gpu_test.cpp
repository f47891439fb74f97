// The generic GEMM, every compiled config, against the fp64 reference (MXFP8.md's checks).
#include <cmath>
#include <cstring>

#include "device/generic_gemm.hpp"
#include "gpu/gpu_support.hpp"
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

device::OutType out_type_of(DType d) {
  return d == DType::kBF16 ? device::OutType::kBF16
                           : (d == DType::kF16 ? device::OutType::kF16 : device::OutType::kF32);
}

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
  DeviceMx da = upload(a);
  DeviceMx dw = upload(w);
  const std::size_t bytes = static_cast<std::size_t>(a.rows * w.rows) * element_size(out_dtype);
  DeviceBuffer out(bytes);
  out.poison();
  device::GemmParams p;
  p.a = da.data.bytes();
  p.a_scales = da.scales.bytes();
  p.w = dw.data.bytes();
  p.w_scales = dw.scales.bytes();
  p.ld_a = a.k;
  p.ld_a_scales = a.k / 32;
  p.ld_w = w.k;
  p.ld_w_scales = w.k / 32;
  p.out = out.get();
  p.ld_out = w.rows;
  p.m = static_cast<int>(a.rows);
  p.n = static_cast<int>(w.rows);
  p.k = static_cast<int>(a.k);
  p.out_type = out_type_of(out_dtype);
  if (bias) {
    p.bias = bias->get();
    p.bias_type = bias_type;
  }
  p.scales_via_cp_async =
      path == ScalePath::kCpAsyncWhereAligned && device::scales_allow_cp_async(p);
  EXPECT_EQ(device::launch_generic_gemm(p, config, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  GemmRun r;
  r.out.resize(bytes);
  out.download_to(r.out.data(), bytes);
  return r;
}

class GenericGemmConfig : public ::testing::TestWithParam<int> {};

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
        int reported = 0;
        for (std::size_t i = 0; i < ref.size(); ++i) {
          const double got = output_value(r.out, dtype, i);
          const double want = round_to(ref[i], dtype);
          if (!(got == want) && reported++ < 5) {
            ADD_FAILURE() << "out[" << i / static_cast<std::size_t>(c.n) << ", "
                          << i % static_cast<std::size_t>(c.n) << "] = " << got << ", want "
                          << want;
          }
        }
        EXPECT_EQ(reported, 0);
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
        double err2 = 0, ref2 = 0;
        int reported = 0;
        for (std::size_t i = 0; i < ref.size(); ++i) {
          const double got = output_value(r.out, dtype, i);
          const double tol = tolerance(ref[i], abs_sums[i], c.k, dtype);
          if (!(std::fabs(got - ref[i]) <= tol) && reported++ < 5) {
            ADD_FAILURE() << "out flat " << i << " = " << got << ", ref " << ref[i] << ", tol "
                          << tol;
          }
          err2 += (got - ref[i]) * (got - ref[i]);
          ref2 += ref[i] * ref[i];
        }
        EXPECT_EQ(reported, 0);
        if (dtype == DType::kF32) {
          EXPECT_LE(std::sqrt(err2 / ref2), 1e-5);
        }
      }
    }
  }
}

TEST_P(GenericGemmConfig, NaNScaleOrElementMakesExactlyItsOutputsNaN) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  MxOperand a = random_operand(20, 128, rng);
  MxOperand w = random_operand(40, 128, rng);
  a.scales[3 * 4 + 1] = 0xFF;    // row 3, block 1: NaN scale
  w.data[17 * 128 + 70] = 0x7F;  // column 17: a NaN element (positive NaN code)
  w.data[29 * 128 + 5] = 0xFF;   // column 29: negative NaN code
  const GemmRun r = run_config(GetParam(), a, w, DType::kF32);
  for (std::int64_t m = 0; m < 20; ++m) {
    for (std::int64_t n = 0; n < 40; ++n) {
      const bool should_be_nan = m == 3 || n == 17 || n == 29;
      const double v = output_value(r.out, DType::kF32, static_cast<std::size_t>(m * 40 + n));
      EXPECT_EQ(std::isnan(v), should_be_nan) << "out[" << m << ", " << n << "] = " << v;
    }
  }
}

TEST_P(GenericGemmConfig, TwoRunsAreBitwiseEqual) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  const MxOperand a = random_operand(100, 544, rng);
  const MxOperand w = random_operand(257, 544, rng);
  const GemmRun first = run_config(GetParam(), a, w, DType::kF32);
  const GemmRun second = run_config(GetParam(), a, w, DType::kF32);
  EXPECT_EQ(std::memcmp(first.out.data(), second.out.data(), first.out.size()), 0);
}

TEST_P(GenericGemmConfig, Bf16AndFp32BiasAreAdded) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  const MxOperand a = exact_operand(9, 64, rng);
  const MxOperand w = exact_operand(21, 64, rng);
  std::vector<double> bias(21);
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<double>(i) * 0.25 - 2.0;
  const std::vector<double> ref = reference(a, w, bias);
  std::vector<float> bias_f32(bias.begin(), bias.end());
  std::vector<std::uint16_t> bias_bf16(bias.size());
  for (std::size_t i = 0; i < bias.size(); ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &bias_f32[i], 4);
    bias_bf16[i] = static_cast<std::uint16_t>(bits >> 16);  // exact: quarters are bf16 values
  }
  const DeviceBuffer b32 = DeviceBuffer::from(bias_f32);
  const DeviceBuffer b16 = DeviceBuffer::from(bias_bf16);
  for (auto [buffer, type] :
       {std::pair{&b32, device::BiasType::kF32}, {&b16, device::BiasType::kBF16}}) {
    const GemmRun r = run_config(GetParam(), a, w, DType::kF32, buffer, type);
    for (std::size_t i = 0; i < ref.size(); ++i) {
      ASSERT_EQ(output_value(r.out, DType::kF32, i), ref[i]) << "flat index " << i;
    }
  }
}

std::string config_name(const ::testing::TestParamInfo<int>& info) {
  return std::string(device::generic_gemm_configs()[static_cast<std::size_t>(info.param)].name);
}

INSTANTIATE_TEST_SUITE_P(EveryConfig, GenericGemmConfig,
                         ::testing::Range(0,
                                          static_cast<int>(device::generic_gemm_configs().size())),
                         config_name);

}  // namespace
}  // namespace mxlinear::test
