// The public linear API in W8A16 mode (LinearOptions::activation): a bf16 or fp16 x multiplied
// as it is, through every W8A16 kernel and config and through the registry's own choice.
#include <gmock/gmock.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gemm_checks.hpp"
#include "gpu/gpu_support.hpp"
#include "host/registry/registry.hpp"
#include "mxlinear/error.hpp"
#include "mxlinear/linear.hpp"
#include "support/mx_oracle.hpp"
#include "support/random.hpp"

namespace mxlinear::test {
namespace {

constexpr LinearOptions kW8A16{ActivationMode::kW8A16};

// Runs `call`, which must throw Error(kInvalidArgument) with every one of `fragments` in its
// message.
void expect_invalid_argument(const std::function<void()>& call,
                             const std::vector<std::string>& fragments) {
  try {
    call();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    for (const std::string& fragment : fragments) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(fragment));
    }
  }
}

// x [m, k] (row stride x.ld_x) on the device at element offset `offset` of its buffer; the
// elements before it are NaN, so a kernel reading before x fails.
struct DeviceX {
  DeviceBuffer buffer;
  TensorView view;
};

DeviceX upload_x(const Activation16& x, std::int64_t offset) {
  std::vector<std::uint16_t> codes(static_cast<std::size_t>(offset),
                                   x.dtype == DType::kF16 ? 0x7E00 : 0x7FC0);
  codes.insert(codes.end(), x.codes.begin(), x.codes.end());
  DeviceX d{DeviceBuffer::from(codes), {}};
  d.view = TensorView::matrix(static_cast<std::uint16_t*>(d.buffer.get()) + offset, x.rows, x.k,
                              x.ld_x, x.dtype, Location::kDevice);
  return d;
}

// out = x @ deq(w)^T through `kernel`/`config` (linear_with), or the registry's choice (null
// kernel), into a NaN-poisoned bf16 [M, N]; the raw output bytes.
std::vector<std::uint8_t> run(const Activation16& x, std::int64_t offset, const MxOperand& w,
                              DType out_dtype, const Kernel* kernel = nullptr,
                              const std::string& config = {}) {
  const DeviceX dx = upload_x(x, offset);
  const DeviceMx dw = upload(w);
  const std::size_t bytes = static_cast<std::size_t>(x.rows * w.rows) * element_size(out_dtype);
  DeviceBuffer out(bytes);
  out.poison();
  const TensorView out_view =
      TensorView::contiguous(out.get(), {x.rows, w.rows}, out_dtype, Location::kDevice);
  const MxWeight weight{dw.data_view(), dw.scales_view()};
  if (kernel != nullptr) {
    linear_with(*kernel, config, dx.view, weight, std::nullopt, out_view, nullptr, {}, kW8A16);
  } else {
    linear(dx.view, weight, std::nullopt, out_view, nullptr, {}, kW8A16);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return out.download<std::uint8_t>(bytes);
}

// Every W8A16 kernel the registry has for the operand, with every config that runs M x K: exact
// inputs give the fp64 reference bit for bit, random ones stay within the accumulation bound.
void check_every_config(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k) {
  auto rng = make_rng();
  const Activation16 exact_x = exact_activation16(m, k, k, dtype, rng);
  const MxOperand exact_w = exact_operand(n, k, rng);
  const Activation16 random_x = random_activation16_as_is(m, k, k, dtype, rng);
  const MxOperand random_w = random_operand(n, k, rng);
  LayerDescription layer;
  layer.n = n;
  layer.k = k;
  layer.operand = dtype == DType::kF16 ? ActivationOperand::kF16 : ActivationOperand::kBf16;
  const DeviceDescription device = DeviceDescription::current();
  int kernels = 0;
  for (const auto& kernel : Registry::global().kernels()) {
    if (kernel->name() == "reference" || !kernel->is_supported(device).ok() ||
        !kernel->can_implement(layer).ok()) {
      continue;
    }
    ++kernels;
    int ran = 0;
    for (const std::string& config : kernel->configs()) {
      if (!kernel->can_run(m, k, config).ok()) continue;
      SCOPED_TRACE(std::string(kernel->name()) + "/" + config);
      // The GEMV's k-parts configs sum K in the prefill kernel's bf16 order: fp16 x is refused
      // by name, never run in another order.
      if (dtype == DType::kF16 && kernel->name() == "gemv_a16" &&
          config.find("_kparts") != std::string::npos) {
        EXPECT_THAT([&] { run(exact_x, 0, exact_w, DType::kF32, kernel.get(), config); },
                    ::testing::ThrowsMessage<Error>(::testing::AllOf(
                        ::testing::HasSubstr(config), ::testing::HasSubstr("expected bf16"))));
        continue;
      }
      expect_bit_exact(run(exact_x, 0, exact_w, DType::kF32, kernel.get(), config),
                       w8a16_reference(w8a16_operands(exact_x, exact_w), {}), n, DType::kF32);
      const W8A16Operands op = w8a16_operands(random_x, random_w);
      expect_within_accumulation_bound(
          run(random_x, 0, random_w, DType::kBF16, kernel.get(), config), w8a16_reference(op, {}),
          w8a16_abs_product_sums(op), k, DType::kBF16);
      ++ran;
    }
    EXPECT_GT(ran, 0) << kernel->name() << " ran no config";
  }
  // bf16: prefill_a16 and generic_a16 at least; fp16: generic_a16 at least.
  EXPECT_GE(kernels, dtype == DType::kF16 ? 1 : 2);
}

TEST(LinearGpuW8A16, EveryKernelAndConfigMatchesFp64Bf16) {
  MXL_REQUIRE_GPU();
  check_every_config(DType::kBF16, 9, 80, 1024);
}

TEST(LinearGpuW8A16, EveryKernelAndConfigMatchesFp64F16) {
  MXL_REQUIRE_GPU();
  check_every_config(DType::kF16, 9, 80, 1024);
}

// The registry's own choice over shapes that are not tile multiples, M from one token to
// prefill sizes, long K, and x rows of every alignment (an odd row stride and a base only
// 2 bytes aligned take the kernels that read x element by element).
TEST(LinearGpuW8A16, DispatchedCallsMatchFp64) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  struct Case {
    std::int64_t m, n, k, ld_x, offset;
  };
  const Case cases[] = {
      {1, 130, 544, 544, 0},   {7, 1000, 96, 96, 0},      {16, 24, 4096, 4096, 0},
      {100, 130, 544, 552, 0}, {300, 256, 2080, 2080, 0}, {1000, 1000, 1024, 1024, 0},
      {5, 72, 160, 161, 1},    {257, 200, 256, 256, 1},   {2, 64, 14336, 14336, 0}};
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message()
                   << to_string(dtype) << " M = " << c.m << ", N = " << c.n << ", K = " << c.k
                   << ", ld_x = " << c.ld_x << ", offset = " << c.offset);
      const Activation16 x = random_activation16_as_is(c.m, c.k, c.ld_x, dtype, rng);
      const MxOperand w = random_operand(c.n, c.k, rng);
      const W8A16Operands op = w8a16_operands(x, w);
      expect_within_accumulation_bound(run(x, c.offset, w, DType::kBF16), w8a16_reference(op, {}),
                                       w8a16_abs_product_sums(op), c.k, DType::kBF16);
      const Activation16 ex = exact_activation16(c.m, c.k, c.ld_x, dtype, rng);
      const MxOperand ew = exact_operand(c.n, c.k, rng);
      if (c.k <= 4096) {  // where every partial sum is exact in fp32
        expect_bit_exact(run(ex, c.offset, ew, DType::kF32),
                         w8a16_reference(w8a16_operands(ex, ew), {}), c.n, DType::kF32);
      }
    }
  }
}

// W8A16 takes the 16-bit activation as it is: fp32 is refused, naming the argument and mode.
TEST(LinearGpuW8A16, Fp32ActivationIsRefused) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  const MxOperand w = random_operand(16, 64, rng);
  const DeviceMx dw = upload(w);
  DeviceBuffer x(4 * 64 * 4), out(4 * 16 * 2);
  expect_invalid_argument(
      [&] {
        linear(TensorView::contiguous(x.get(), {4, 64}, DType::kF32, Location::kDevice),
               MxWeight{dw.data_view(), dw.scales_view()}, std::nullopt,
               TensorView::contiguous(out.get(), {4, 16}, DType::kBF16, Location::kDevice), nullptr,
               {}, kW8A16);
      },
      {"'x'", "fp32", "W8A16"});
}

// An activation already quantized to MXFP8 is W8A8 by nature: asking for W8A16 is refused,
// naming the option, before anything runs (the output keeps its poison).
TEST(LinearGpuW8A16, PreQuantizedActivationRefusesW8A16) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  const DeviceMx dw = upload(random_operand(16, 64, rng));
  const DeviceMx dx = upload(random_operand(4, 64, rng));
  DeviceBuffer out(4 * 16 * 2);
  out.poison();
  expect_invalid_argument(
      [&] {
        linear(QuantizedActivation{dx.data_view(), dx.scales_view(), DType::kBF16},
               MxWeight{dw.data_view(), dw.scales_view()}, std::nullopt,
               TensorView::contiguous(out.get(), {4, 16}, DType::kBF16, Location::kDevice), nullptr,
               {}, kW8A16);
      },
      {"'options.activation'", "'bf16'"});
  for (const std::uint16_t c : out.download<std::uint16_t>(4 * 16)) EXPECT_EQ(c, 0xFFFF);
}

}  // namespace
}  // namespace mxlinear::test
