#include "gpu/gemm_checks.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "device/kernels/quantize/quantize.hpp"

namespace mxlinear::test {

namespace {

// The weight, output and shape fields of a launch of `m` activation rows times w (dense rows).
device::GemmParams weight_params(const DeviceMx& w, const DeviceBuffer& out, std::int64_t m,
                                 DType out_dtype) {
  device::GemmParams p;
  p.w = w.data.bytes();
  p.w_scales = w.scales.bytes();
  p.ld_w = w.k;
  p.ld_w_scales = w.k / kBlockSize;
  p.out = out.get();
  p.ld_out = w.rows;
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(w.rows);
  p.k = static_cast<int>(w.k);
  p.out_type = out_dtype == DType::kBF16
                   ? device::OutType::kBF16
                   : (out_dtype == DType::kF16 ? device::OutType::kF16 : device::OutType::kF32);
  return p;
}

}  // namespace

device::GemmParams gemm_params(const DeviceMx& a, const DeviceMx& w, const DeviceBuffer& out,
                               DType out_dtype) {
  device::GemmParams p = weight_params(w, out, a.rows, out_dtype);
  p.a = a.data.bytes();
  p.a_scales = a.scales.bytes();
  p.ld_a = a.k;
  p.ld_a_scales = a.k / kBlockSize;
  return p;
}

void expect_bit_exact(const std::vector<std::uint8_t>& out, const std::vector<double>& ref,
                      std::int64_t n, DType dtype) {
  int reported = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double got = output_value(out, dtype, i);
    const double want = round_to(ref[i], dtype);
    if (!(got == want) && reported++ < 5) {
      ADD_FAILURE() << "out[" << i / static_cast<std::size_t>(n) << ", "
                    << i % static_cast<std::size_t>(n) << "] = " << got << ", want " << want;
    }
  }
  EXPECT_EQ(reported, 0);
}

void expect_within_tolerance(const std::vector<std::uint8_t>& out, const std::vector<double>& ref,
                             const std::vector<double>& abs_sums, std::int64_t k, DType dtype) {
  double err2 = 0, ref2 = 0;
  int reported = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double got = output_value(out, dtype, i);
    const double tol = tolerance(ref[i], abs_sums[i], k, dtype);
    if (!(std::fabs(got - ref[i]) <= tol) && reported++ < 5) {
      ADD_FAILURE() << "out flat " << i << " = " << got << ", ref " << ref[i] << ", tol " << tol;
    }
    err2 += (got - ref[i]) * (got - ref[i]);
    ref2 += ref[i] * ref[i];
  }
  EXPECT_EQ(reported, 0);
  // MXFP8.md's relative Frobenius bound for fp32 output. With a handful of elements one
  // cancelling sum (|ref| far below its sum of |products|) can dominate ||ref||, and no fp32
  // accumulation order meets a relative bound there (seen on the H200: M = N = 1, K = 1024, an
  // in-order split-K sum at 1.0e-4); such shapes rest on the per-element bound above.
  // Beyond 8192 terms the bound grows like sqrt(k), as a sum's typical rounding error does
  // (seen on the H200: 1.03e-5 at K = 10336 in the prefill kernel, whose tensor-core sums of
  // 2K terms are held to the same per-element bound).
  constexpr std::size_t kFrobeniusMinElements = 64;
  constexpr double kFrobeniusTerms = 8192;
  if (dtype == DType::kF32 && ref.size() >= kFrobeniusMinElements) {
    const double bound = 1e-5 * std::sqrt(std::max(1.0, static_cast<double>(k) / kFrobeniusTerms));
    EXPECT_LE(std::sqrt(err2 / ref2), bound);
  }
}

BiasBuffers quarter_bias(std::int64_t n) {
  BiasBuffers b;
  b.values.resize(static_cast<std::size_t>(n));
  std::vector<float> f32(b.values.size());
  std::vector<std::uint16_t> bf16(b.values.size());
  for (std::size_t i = 0; i < b.values.size(); ++i) {
    b.values[i] = static_cast<double>(i) * 0.25 - 2.0;
    f32[i] = static_cast<float>(b.values[i]);
    std::uint32_t bits;
    std::memcpy(&bits, &f32[i], 4);
    bf16[i] = static_cast<std::uint16_t>(bits >> 16);  // exact: quarters are bf16 values
  }
  b.f32 = DeviceBuffer::from(f32);
  b.bf16 = DeviceBuffer::from(bf16);
  return b;
}

void check_nan_propagates_exactly(const GemmRunner& run, std::int64_t k, std::mt19937_64& rng) {
  constexpr std::int64_t kM = 20, kN = 70;
  MxOperand a = random_operand(kM, k, rng);
  MxOperand w = random_operand(kN, k, rng);
  const std::int64_t blocks = k / kBlockSize;
  // Each operand's scales and codes take their own path through a kernel (the weight scales
  // through shared memory or registers, the activation's through the quantized copy).
  a.scales[static_cast<std::size_t>(3 * blocks + blocks - 2)] = 0xFF;  // row 3: a NaN scale
  a.data[static_cast<std::size_t>(11 * k + 5)] = 0x7F;                 // row 11: a +NaN code
  w.data[static_cast<std::size_t>(17 * k + 70)] = 0x7F;                // column 17: +NaN code
  w.scales[static_cast<std::size_t>(40 * blocks + 1)] = 0xFF;          // column 40: a NaN scale
  w.data[static_cast<std::size_t>(66 * k + k - 124)] = 0xFF;           // column 66: -NaN code
  const auto out = run(a, w, DType::kF32, nullptr, device::BiasType::kNone);
  for (std::int64_t m = 0; m < kM; ++m) {
    for (std::int64_t n = 0; n < kN; ++n) {
      const bool should_be_nan = m == 3 || m == 11 || n == 17 || n == 40 || n == 66;
      const double v = output_value(out, DType::kF32, static_cast<std::size_t>(m * kN + n));
      EXPECT_EQ(std::isnan(v), should_be_nan) << "out[" << m << ", " << n << "] = " << v;
    }
  }
}

void check_bias_is_added(const GemmRunner& run, std::int64_t k, std::int64_t m_large,
                         std::int64_t n_large, std::mt19937_64& rng) {
  // The small shape fits inside one tile of every kernel; the large one also holds whole tiles,
  // which a kernel may store by another path (the prefill kernel's store_whole_tile).
  for (auto [m, n] : {std::pair<std::int64_t, std::int64_t>{9, 21}, {m_large, n_large}}) {
    const MxOperand a = exact_operand(m, k, rng);
    const MxOperand w = exact_operand(n, k, rng);
    const BiasBuffers bias = quarter_bias(n);
    const std::vector<double> ref = reference(a, w, bias.values);
    for (auto [buffer, type] : {std::pair{&bias.f32, device::BiasType::kF32},
                                std::pair{&bias.bf16, device::BiasType::kBF16}}) {
      for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
        SCOPED_TRACE(::testing::Message()
                     << "M=" << m << " N=" << n << " out=" << to_string(dtype)
                     << " bias=" << (type == device::BiasType::kF32 ? "f32" : "bf16"));
        expect_bit_exact(run(a, w, dtype, buffer, type), ref, n, dtype);
      }
    }
  }
}

void check_two_runs_equal(const GemmRunner& run, std::int64_t m, std::int64_t n, std::int64_t k,
                          std::mt19937_64& rng) {
  const MxOperand a = random_operand(m, k, rng);
  const MxOperand w = random_operand(n, k, rng);
  const auto first = run(a, w, DType::kF32, nullptr, device::BiasType::kNone);
  const auto second = run(a, w, DType::kF32, nullptr, device::BiasType::kNone);
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size()), 0);
  // Equal runs must also be right: two runs that wrote nothing leave the same poison.
  expect_within_tolerance(first, reference(a, w, {}), abs_product_sums(a, w), k, DType::kF32);
}

void check_nan_bias_determinism(const GemmRunner& run, const ContractSizes& sizes,
                                std::mt19937_64& rng) {
  {
    SCOPED_TRACE("NaN scale or element makes exactly its outputs NaN");
    check_nan_propagates_exactly(run, sizes.k_small, rng);
  }
  {
    SCOPED_TRACE("bf16 and fp32 bias are added exactly");
    check_bias_is_added(run, sizes.k_small, sizes.m, sizes.n, rng);
  }
  {
    SCOPED_TRACE("two runs are bitwise equal");
    check_two_runs_equal(run, sizes.m, sizes.n, sizes.k_large, rng);
  }
}

std::vector<std::uint8_t> run_launcher(const GemmLauncher& launch, const MxOperand& a,
                                       const MxOperand& w, DType out_dtype,
                                       const DeviceBuffer* bias, device::BiasType bias_type) {
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
  EXPECT_EQ(launch(p, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::uint8_t> r(bytes);
  out.download_to(r.data(), bytes);
  return r;
}

void check_exact_on_shapes(const GemmRunner& run, std::span<const GemmShape> shapes,
                           std::mt19937_64& rng) {
  for (const GemmShape& c : shapes) {
    const MxOperand a = exact_operand(c.m, c.k, rng);
    const MxOperand w = exact_operand(c.n, c.k, rng);
    const std::vector<double> ref = reference(a, w, {});
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      SCOPED_TRACE(::testing::Message()
                   << "M=" << c.m << " N=" << c.n << " K=" << c.k << " out=" << to_string(dtype));
      expect_bit_exact(run(a, w, dtype, nullptr, device::BiasType::kNone), ref, c.n, dtype);
    }
  }
}

void check_random_on_shapes(const GemmRunner& run, std::span<const GemmShape> shapes, int k_factor,
                            std::mt19937_64& rng) {
  for (const GemmShape& c : shapes) {
    const MxOperand a = random_operand(c.m, c.k, rng);
    const MxOperand w = random_operand(c.n, c.k, rng);
    const std::vector<double> ref = reference(a, w, {});
    const std::vector<double> abs_sums = abs_product_sums(a, w);
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(::testing::Message()
                   << "M=" << c.m << " N=" << c.n << " K=" << c.k << " out=" << to_string(dtype));
      expect_within_tolerance(run(a, w, dtype, nullptr, device::BiasType::kNone), ref, abs_sums,
                              k_factor * c.k, dtype);
    }
  }
}

void check_extreme_scale_bytes(const GemmRunner& run, std::int64_t m, std::int64_t n,
                               std::mt19937_64& rng) {
  MxOperand a = exact_operand(m, 1024, rng);
  MxOperand w = exact_operand(n, 1024, rng);
  std::fill(a.scales.begin(), a.scales.end(), std::uint8_t{0});
  for (const std::int64_t row : {std::int64_t{0}, n - 1}) {
    std::fill_n(w.scales.begin() + row * 32, 32, std::uint8_t{254});
  }
  const std::vector<double> ref = reference(a, w, {});
  const auto out = run(a, w, DType::kF32, nullptr, device::BiasType::kNone);
  for (std::size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(output_value(out, DType::kF32, i), round_to(ref[i], DType::kF32))
        << "out[" << i / static_cast<std::size_t>(n) << ", " << i % static_cast<std::size_t>(n)
        << "]";
  }
}

void check_stable_across_runs(const GemmRunner& run, const GemmShape& shape, int runs, int k_factor,
                              std::mt19937_64& rng) {
  const MxOperand a = random_operand(shape.m, shape.k, rng);
  const MxOperand w = random_operand(shape.n, shape.k, rng);
  const auto first = run(a, w, DType::kF32, nullptr, device::BiasType::kNone);
  for (int r = 1; r < runs; ++r) {
    const auto again = run(a, w, DType::kF32, nullptr, device::BiasType::kNone);
    ASSERT_EQ(std::memcmp(first.data(), again.data(), first.size()), 0) << "run " << r;
  }
  expect_within_tolerance(first, reference(a, w, {}), abs_product_sums(a, w), k_factor * shape.k,
                          DType::kF32);
}

void check_graph_replay(const GemmLauncher& launch, const GemmShape& shape, std::mt19937_64& rng) {
  const MxOperand a = random_operand(shape.m, shape.k, rng);
  const MxOperand w = random_operand(shape.n, shape.k, rng);
  const auto eager = run_launcher(launch, a, w, DType::kBF16, nullptr, device::BiasType::kNone);
  DeviceMx da = upload(a);
  DeviceMx dw = upload(w);
  DeviceBuffer out(eager.size());
  const device::GemmParams p = gemm_params(da, dw, out, DType::kBF16);
  cudaStream_t stream;
  MXL_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  MXL_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(launch(p, stream), cudaSuccess);
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

void check_chain_graph_replay(const ChainCall& call, int calls, DeviceBuffer (&out)[2]) {
  DeviceBuffer& last = out[(calls - 1) % 2];
  out[0].poison();
  out[1].poison();
  for (int i = 0; i < calls; ++i) {
    ASSERT_EQ(call(i, nullptr), cudaSuccess);
    MXL_CUDA_OK(cudaDeviceSynchronize());
  }
  const auto eager = last.download<std::uint8_t>(last.size());
  cudaStream_t stream;
  MXL_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  MXL_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) EXPECT_EQ(call(i, stream), cudaSuccess);
  MXL_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  MXL_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    out[0].poison();
    out[1].poison();
    MXL_CUDA_OK(cudaGraphLaunch(exec, stream));
    MXL_CUDA_OK(cudaStreamSynchronize(stream));
    const auto got = last.download<std::uint8_t>(last.size());
    EXPECT_EQ(std::memcmp(got.data(), eager.data(), got.size()), 0) << "replay " << replay;
  }
  MXL_CUDA_OK(cudaGraphExecDestroy(exec));
  MXL_CUDA_OK(cudaGraphDestroy(graph));
  MXL_CUDA_OK(cudaStreamDestroy(stream));
}

namespace {

// A random [m, cols] bf16 or fp16 activation (raw 16-bit patterns) with a NaN at [0, 7] and an
// Inf at [1, 40] (at [0, 40] for one row); from two rows, the last row's first blocks of K (as
// many as there are) are the quantizer's edges: all zero, amax exactly 448 x 2^-3, subnormal
// values only, a -Inf. `finite`: no NaN, Inf or subnormal block; the last row (also of one row)
// keeps its blocks of zeros and of amax 448 x 2^-3.
std::vector<std::uint16_t> random_activation16(std::int64_t m, std::int64_t cols, std::int64_t k,
                                               DType dtype, std::mt19937_64& rng,
                                               bool finite = false) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(m * cols));
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
  if (!finite) {
    x[7] = dtype == DType::kBF16 ? 0x7FC0 : 0x7E00;  // NaN
    x[static_cast<std::size_t>(cols + 40) % x.size()] =
        dtype == DType::kBF16 ? 0x7F80 : 0x7C00;  // Inf
    if (m < 2) return x;                          // one row: it keeps its NaN and Inf
  }
  const bool bf16 = dtype == DType::kBF16;
  std::uint16_t* last = &x[static_cast<std::size_t>((m - 1) * cols)];
  const auto block = [&](std::int64_t b) -> std::uint16_t* {
    return (b + 1) * kBlockSize <= k ? last + b * kBlockSize : nullptr;
  };
  if (std::uint16_t* z = block(0)) std::fill(z, z + kBlockSize, std::uint16_t{0});
  if (std::uint16_t* e = block(1)) e[9] = bf16 ? 0x4260 : 0x5300;  // 56 = 448 x 2^-3, the amax
  if (finite) return x;
  if (std::uint16_t* t = block(2)) {
    std::uniform_int_distribution<int> code(1, bf16 ? 0x7F : 0x3FF);  // subnormal magnitudes
    for (std::int64_t i = 0; i < kBlockSize; ++i) {
      t[i] = static_cast<std::uint16_t>(code(rng) | (i % 2 ? 0x8000 : 0));
    }
  }
  if (std::uint16_t* n = block(3)) n[30] = bf16 ? 0xFF80 : 0xFC00;  // -Inf
  return x;
}

// One shape, dtype and activation row stride of check_quantizing_inside.
void compare_quantizing_inside(const GemmLauncher& launch, const GemmShape& c, std::int64_t ld_x,
                               DType dtype, bool finite, std::mt19937_64& rng) {
  // ld_x columns a row, the last ld_x - K of them outside the view.
  const DeviceBuffer dx =
      DeviceBuffer::from(random_activation16(c.m, ld_x, c.k, dtype, rng, finite));
  const MxOperand w = random_operand(c.n, c.k, rng);
  const DeviceMx dw = upload(w);
  DeviceMx da{DeviceBuffer(static_cast<std::size_t>(c.m * c.k)),
              DeviceBuffer(static_cast<std::size_t>(c.m * c.k / kBlockSize)), c.m, c.k};
  device::QuantizeParams qp;
  qp.x = dx.get();
  qp.q = da.data.bytes();
  qp.scales = da.scales.bytes();
  qp.ld_x = ld_x;
  qp.ld_q = c.k;
  qp.ld_s = c.k / kBlockSize;
  qp.m = static_cast<int>(c.m);
  qp.k = static_cast<int>(c.k);
  qp.in_type = dtype == DType::kBF16 ? device::InType::kBF16 : device::InType::kF16;
  ASSERT_EQ(device::launch_quantize(qp, nullptr), cudaSuccess);
  const std::size_t bytes = static_cast<std::size_t>(c.m * c.n) * 4;
  DeviceBuffer first(bytes), inside(bytes);
  first.poison();
  inside.poison();
  device::GemmParams p = gemm_params(da, dw, first, DType::kF32);
  ASSERT_EQ(launch(p, nullptr), cudaSuccess);
  p.out = inside.get();
  p.x = dx.get();
  p.ld_x = ld_x;
  p.x_is_f16 = dtype == DType::kF16;
  ASSERT_EQ(launch(p, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto a = first.download<std::uint32_t>(bytes / 4);
  const auto b = inside.download<std::uint32_t>(bytes / 4);
  EXPECT_EQ(a, b);
  for (std::uint32_t bits : b) ASSERT_NE(bits, 0xFFFFFFFFu) << "an output was not written";
  if (finite) {
    for (std::uint32_t bits : b) ASSERT_NE(bits & 0x7F800000u, 0x7F800000u) << "Inf or NaN";
    return;
  }
  // Row 0 holds a NaN (and the last row, from 4 blocks of K, a -Inf): NaN across the row.
  const auto nan_row = [&](std::int64_t r) {
    for (std::int64_t n = 0; n < c.n; ++n) {
      float v = 0;
      std::memcpy(&v, &b[static_cast<std::size_t>(r * c.n + n)], 4);
      EXPECT_TRUE(std::isnan(v)) << "out[" << r << ", " << n << "] = " << v;
    }
  };
  nan_row(0);
  if (c.m >= 2 && c.k >= 4 * kBlockSize) nan_row(c.m - 1);
}

}  // namespace

void check_quantizing_inside(const GemmLauncher& launch, std::span<const GemmShape> shapes,
                             std::mt19937_64& rng, bool finite) {
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    for (const GemmShape& c : shapes) {
      // Dense rows, and rows 64 elements longer than K (a view of a wider buffer).
      for (const std::int64_t ld_x : {c.k, c.k + 64}) {
        SCOPED_TRACE(::testing::Message()
                     << to_string(dtype) << " M=" << c.m << " N=" << c.n << " K=" << c.k
                     << " ld_x=" << ld_x << (finite ? " finite" : ""));
        compare_quantizing_inside(launch, c, ld_x, dtype, finite, rng);
      }
    }
  }
}

namespace {

std::uint16_t nan16(DType dtype) { return dtype == DType::kBF16 ? 0x7FC0 : 0x7E00; }

std::uint16_t code16(float value, DType dtype) {
  std::uint16_t bits;
  if (dtype == DType::kBF16) {
    const __nv_bfloat16 b = __float2bfloat16_rn(value);
    std::memcpy(&bits, &b, 2);
  } else {
    const __half h = __float2half_rn(value);
    std::memcpy(&bits, &h, 2);
  }
  return bits;
}

// An activation of NaN codes with its [rows, k] view filled by sample().
template <class Sample>
Activation16 make_activation16(std::int64_t rows, std::int64_t k, std::int64_t ld_x, DType dtype,
                               Sample sample) {
  Activation16 x{rows, k, ld_x, dtype,
                 std::vector<std::uint16_t>(static_cast<std::size_t>(rows * ld_x), nan16(dtype))};
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < k; ++c) {
      x.codes[static_cast<std::size_t>(r * ld_x + c)] = code16(sample(), dtype);
    }
  }
  return x;
}

}  // namespace

Activation16 exact_activation16(std::int64_t rows, std::int64_t k, std::int64_t ld_x, DType dtype,
                                std::mt19937_64& rng) {
  std::uniform_int_distribution<int> value(-7, 7);
  std::uniform_int_distribution<int> exponent(-2, 1);
  std::uniform_int_distribution<int> keep(0, 3);
  return make_activation16(rows, k, ld_x, dtype, [&] {
    if (keep(rng) != 0) return 0.0f;
    return std::ldexp(static_cast<float>(value(rng)), exponent(rng));  // exact in bf16 and fp16
  });
}

MxOperand quantized_bf16_rows(const std::uint16_t* codes, std::int64_t rows, std::int64_t k,
                              std::int64_t ld_x) {
  MxOperand a;
  a.rows = rows;
  a.k = k;
  a.data.resize(static_cast<std::size_t>(rows * k));
  a.scales.resize(static_cast<std::size_t>(rows * k / kBlockSize));
  std::array<float, kBlockSize> block{};
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t b = 0; b < k / kBlockSize; ++b) {
      for (std::int64_t i = 0; i < kBlockSize; ++i) {
        const std::uint32_t bits = static_cast<std::uint32_t>(codes[r * ld_x + b * kBlockSize + i])
                                   << 16;
        std::memcpy(&block[static_cast<std::size_t>(i)], &bits, 4);
      }
      const QuantizedBlock q = quantize_block(block.data(), ScaleRule::kRceil);
      const auto at = static_cast<std::size_t>(r * (k / kBlockSize) + b);
      a.scales[at] = q.scale;
      std::copy(q.q.begin(), q.q.end(),
                a.data.begin() + static_cast<std::ptrdiff_t>(at * kBlockSize));
    }
  }
  return a;
}

Activation16 random_activation16_as_is(std::int64_t rows, std::int64_t k, std::int64_t ld_x,
                                       DType dtype, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  return make_activation16(rows, k, ld_x, dtype, [&] { return normal(rng); });
}

W8A16Operands w8a16_operands(const Activation16& x, const MxOperand& w) {
  return {.m = x.rows,
          .n = w.rows,
          .k = x.k,
          .x = x.codes.data(),
          .ld_x = x.ld_x,
          .x_format = x.dtype == DType::kBF16 ? kBF16Format : kF16Format,
          .w = w.data.data(),
          .w_scales = w.scales.data()};
}

void check_w8a16_layouts(const GemmLauncher& launch, std::span<const GemmShape> shapes,
                         std::span<const XLayout> layouts, std::span<const DType> out_dtypes,
                         std::mt19937_64& rng, std::span<const DType> x_dtypes) {
  for (const DType x_dtype : x_dtypes) {
    for (const GemmShape& c : shapes) {
      const MxOperand w = exact_operand(c.n, c.k, rng);
      for (const XLayout& layout : layouts) {
        const Activation16 x =
            exact_activation16(c.m, c.k, c.k + layout.extra_stride, x_dtype, rng);
        const std::vector<double> ref = w8a16_reference(w8a16_operands(x, w), {});
        for (const DType dtype : out_dtypes) {
          SCOPED_TRACE(::testing::Message()
                       << "x=" << to_string(x_dtype) << " M=" << c.m << " N=" << c.n << " K=" << c.k
                       << " ld_x=" << x.ld_x << " base offset=" << layout.offset
                       << " elements, out=" << to_string(dtype));
          expect_bit_exact(run_w8a16(launch, x, layout.offset, w, dtype), ref, c.n, dtype);
        }
      }
    }
  }
}

void check_w8a16_exact(const GemmLauncher& launch, std::span<const GemmShape> shapes,
                       std::mt19937_64& rng, std::span<const DType> x_dtypes) {
  constexpr XLayout kPacked[] = {XLayout{}};
  constexpr DType kOutputs[] = {DType::kBF16, DType::kF16, DType::kF32};
  check_w8a16_layouts(launch, shapes, kPacked, kOutputs, rng, x_dtypes);
}

void check_w8a16_random(const GemmLauncher& launch, std::span<const GemmShape> shapes,
                        std::mt19937_64& rng, std::span<const DType> x_dtypes) {
  for (const DType x_dtype : x_dtypes) {
    for (const GemmShape& c : shapes) {
      const Activation16 x = random_activation16_as_is(c.m, c.k, c.k, x_dtype, rng);
      const MxOperand w = random_operand(c.n, c.k, rng);
      const W8A16Operands op = w8a16_operands(x, w);
      const std::vector<double> ref = w8a16_reference(op, {});
      const std::vector<double> abs_sums = w8a16_abs_product_sums(op);
      for (const DType dtype : {DType::kBF16, DType::kF32}) {
        SCOPED_TRACE(::testing::Message() << "x=" << to_string(x_dtype) << " M=" << c.m << " N="
                                          << c.n << " K=" << c.k << " out=" << to_string(dtype));
        expect_within_accumulation_bound(run_w8a16(launch, x, 0, w, dtype), ref, abs_sums, c.k,
                                         dtype);
      }
    }
  }
}

void check_w8a16_nan_propagation(const GemmLauncher& launch, std::mt19937_64& rng,
                                 std::span<const DType> x_dtypes) {
  constexpr std::int64_t kM = 20, kN = 70;
  for (const DType x_dtype : x_dtypes) {
    for (const std::int64_t k : {std::int64_t{256}, std::int64_t{544}}) {
      Activation16 x = random_activation16_as_is(kM, k, k, x_dtype, rng);
      MxOperand w = random_operand(kN, k, rng);
      const std::int64_t blocks = k / kBlockSize;
      w.scales[static_cast<std::size_t>(17 * blocks + 2)] = 0xFF;  // column 17: a NaN scale
      w.data[static_cast<std::size_t>(66 * k + k - 5)] = 0xFF;     // column 66: -NaN code
      x.codes[static_cast<std::size_t>(3 * k + 40)] = x_dtype == DType::kBF16 ? 0x7FC0 : 0x7E00;
      SCOPED_TRACE(::testing::Message() << "x=" << to_string(x_dtype) << " K=" << k);
      const auto out = run_w8a16(launch, x, 0, w, DType::kF32);
      for (std::int64_t m = 0; m < kM; ++m) {
        for (std::int64_t n = 0; n < kN; ++n) {
          const bool should_be_nan = m == 3 || n == 17 || n == 66;
          const double v = output_value(out, DType::kF32, static_cast<std::size_t>(m * kN + n));
          EXPECT_EQ(std::isnan(v), should_be_nan) << "out[" << m << ", " << n << "] = " << v;
        }
      }
    }
  }
}

void check_w8a16_bias(const GemmLauncher& launch, std::int64_t m_large, std::mt19937_64& rng,
                      std::span<const DType> x_dtypes) {
  for (const DType x_dtype : x_dtypes) {
    for (auto [m, n] : {std::pair<std::int64_t, std::int64_t>{9, 21}, {m_large, 257}}) {
      constexpr std::int64_t kK = 544;
      const Activation16 x = exact_activation16(m, kK, kK, x_dtype, rng);
      const MxOperand w = exact_operand(n, kK, rng);
      const BiasBuffers bias = quarter_bias(n);
      const std::vector<double> ref = w8a16_reference(w8a16_operands(x, w), bias.values);
      for (auto [buffer, type] : {std::pair{&bias.f32, device::BiasType::kF32},
                                  std::pair{&bias.bf16, device::BiasType::kBF16}}) {
        for (const DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
          SCOPED_TRACE(::testing::Message() << "x=" << to_string(x_dtype) << " M=" << m
                                            << " N=" << n << " out=" << to_string(dtype) << " bias="
                                            << (type == device::BiasType::kF32 ? "f32" : "bf16"));
          expect_bit_exact(run_w8a16(launch, x, 0, w, dtype, buffer, type), ref, n, dtype);
        }
      }
    }
  }
}

std::vector<std::uint8_t> run_w8a16(const GemmLauncher& launch, const Activation16& x,
                                    std::int64_t x_offset, const MxOperand& w, DType out_dtype,
                                    const DeviceBuffer* bias, device::BiasType bias_type) {
  std::vector<std::uint16_t> x_buffer(static_cast<std::size_t>(x_offset), nan16(x.dtype));
  x_buffer.insert(x_buffer.end(), x.codes.begin(), x.codes.end());
  const DeviceBuffer dx = DeviceBuffer::from(x_buffer);
  const DeviceMx dw = upload(w);
  const std::size_t bytes = static_cast<std::size_t>(x.rows * w.rows) * element_size(out_dtype);
  DeviceBuffer out(bytes);
  out.poison();
  device::GemmParams p = weight_params(dw, out, x.rows, out_dtype);
  p.x = static_cast<const std::uint16_t*>(dx.get()) + x_offset;
  p.ld_x = x.ld_x;
  p.x_is_f16 = x.dtype == DType::kF16;
  p.x_as_is = true;
  if (bias) {
    p.bias = bias->get();
    p.bias_type = bias_type;
  }
  EXPECT_EQ(launch(p, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::uint8_t> r(bytes);
  out.download_to(r.data(), bytes);
  return r;
}

double fp32_accumulation_bound(double ref, double abs_sum, std::int64_t k, DType dtype) {
  auto gamma = [](std::int64_t n, double u) {
    const double nu = static_cast<double>(n) * u;
    return nu / (1.0 - nu);
  };
  const double summation = gamma(k + 1, std::ldexp(1.0, -24)) * abs_sum;
  const double reference = gamma(k, std::ldexp(1.0, -53)) * abs_sum;
  // The fp32 sum is within `summation` of ref; its rounding to dtype moves it by at most half the
  // spacing of dtype at its binade.
  const int mantissa_bits = dtype == DType::kBF16 ? 7 : (dtype == DType::kF16 ? 10 : 23);
  const int min_exponent = dtype == DType::kF16 ? -14 : -126;
  const double largest = std::fabs(ref) + summation + reference;
  const int e = largest > 0 ? std::max(std::ilogb(largest), min_exponent) : min_exponent;
  return summation + reference + std::ldexp(1.0, e - mantissa_bits - 1);
}

void expect_within_accumulation_bound(const std::vector<std::uint8_t>& out,
                                      const std::vector<double>& ref,
                                      const std::vector<double>& abs_sums, std::int64_t k,
                                      DType dtype) {
  int reported = 0;
  double worst = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double got = output_value(out, dtype, i);
    const double bound = fp32_accumulation_bound(ref[i], abs_sums[i], k, dtype);
    const double ratio = std::fabs(got - ref[i]) / bound;
    if (!(ratio <= 1.0)) {
      if (reported++ < 5) {
        ADD_FAILURE() << "out flat " << i << " = " << got << ", ref " << ref[i] << ", bound "
                      << bound;
      }
    } else {
      worst = std::max(worst, ratio);
    }
  }
  EXPECT_EQ(reported, 0) << "largest |error| / bound among the rest: " << worst;
}

}  // namespace mxlinear::test
