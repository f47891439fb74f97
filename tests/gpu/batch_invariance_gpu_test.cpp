// The batch-invariant mode (LinearOptions::batch_invariant): a row's output bits never depend on
// M or on the row's place in x. Eight fixed rows of x go through the public linear() at every M
// the dispatch tells apart (1 to 8192, and M between buckets), at positions spread over the batch
// among fresh random rows, and through every config the mode can select; each time their output
// rows must equal those of one reference call bit for bit, in fp32 (a bf16 output would round
// away most changes of the summation order the mode fixes). In W8A8 (bf16 x), W8A16 (bf16 x) and
// W8A16 (fp16 x), on shapes with long K and N not a multiple of 128.
#include <gmock/gmock.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpu/gemm_checks.hpp"
#include "gpu/gpu_support.hpp"
#include "host/registry/registry.hpp"
#include "mxlinear/linear.hpp"
#include "support/mx_oracle.hpp"
#include "support/random.hpp"

namespace mxlinear::test {
namespace {

struct Mode {
  const char* name;
  ActivationMode activation;
  DType x_dtype;
};
const Mode kModes[] = {{"W8A8", ActivationMode::kW8A8, DType::kBF16},
                       {"W8A16 bf16", ActivationMode::kW8A16, DType::kBF16},
                       {"W8A16 fp16", ActivationMode::kW8A16, DType::kF16}};

constexpr std::int64_t kFixedRows = 8;
// Where the eight fixed rows sit in a batch of M rows: below 8 rows the first M of them, reversed
// (no row keeps its place in the reference call); from 8 rows up spread over the batch, reversed
// beyond M = 8 (the reference call's rows in place).
std::vector<std::int64_t> positions(std::int64_t m) {
  std::vector<std::int64_t> p;
  if (m < kFixedRows) {
    for (std::int64_t i = 0; i < m; ++i) p.push_back(m - 1 - i);
    return p;
  }
  for (std::int64_t i = 0; i < kFixedRows; ++i)
    p.push_back(m == kFixedRows ? i : (i * (m - 1)) / 7);
  if (m > kFixedRows) std::reverse(p.begin(), p.end());
  return p;
}

// A layer and its fixed rows: the weights on the device, the eight rows and a pool of other rows
// (random, 16-bit codes) that fill the rest of each batch.
struct Layer {
  std::int64_t n, k;
  MxOperand host_w;
  DeviceMx w;
  Activation16 fixed, pool;
};

// Weight scales: as random_operand draws them; tiny, every one 2^-127 .. 2^-121, so that most
// scale-folded weights are bf16 subnormals (the rounding every kernel of the order must share);
// or the GEMV's scaled-domain window edges, 2^-30 or 2^10 at random, so that its accumulators
// move by 2^40 from block to block.
enum class WeightScales { kRandom, kTiny, kWindowEdges };

Layer make_layer(std::int64_t n, std::int64_t k, DType dtype, std::mt19937_64& rng,
                 WeightScales scales = WeightScales::kRandom) {
  MxOperand w = random_operand(n, k, rng);
  if (scales == WeightScales::kTiny) {
    std::uniform_int_distribution<int> tiny(0, 6);
    for (auto& b : w.scales) b = static_cast<std::uint8_t>(tiny(rng));
  } else if (scales == WeightScales::kWindowEdges) {
    std::bernoulli_distribution high(0.5);
    for (auto& b : w.scales) b = high(rng) ? 137 : 97;
  }
  DeviceMx dw = upload(w);
  Layer l{n, k, std::move(w), std::move(dw), {}, {}};
  l.fixed = random_activation16_as_is(kFixedRows, k, k, dtype, rng);
  l.pool = random_activation16_as_is(61, k, k, dtype, rng);
  return l;
}

// The outputs (bf16 codes) of the fixed rows in a call of M rows through linear() (kernel null)
// or linear_with(kernel, config), in the fixed rows' order wherever they sat; the other rows are
// drawn from the pool at a random offset.
// `prequantized` (W8A8): x quantized by mxlinear::quantize first, then the pre-quantized entry.
std::vector<std::uint32_t> fixed_outputs(const Layer& l, const Mode& mode, std::int64_t m,
                                         std::mt19937_64& rng, const Kernel* kernel = nullptr,
                                         const std::string& config = {},
                                         bool prequantized = false) {
  const std::vector<std::int64_t> at = positions(m);
  const auto k = static_cast<std::size_t>(l.k);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(m) * k);
  const std::size_t shift = std::uniform_int_distribution<std::size_t>(0, 60)(rng);
  for (std::int64_t r = 0; r < m; ++r) {
    const std::size_t src = (static_cast<std::size_t>(r) + shift) % 61;
    std::memcpy(&x[static_cast<std::size_t>(r) * k], &l.pool.codes[src * k], k * 2);
  }
  for (std::size_t i = 0; i < at.size(); ++i) {
    std::memcpy(&x[static_cast<std::size_t>(at[i]) * k], &l.fixed.codes[i * k], k * 2);
  }
  const DeviceBuffer dx = DeviceBuffer::from(x);
  DeviceBuffer out(static_cast<std::size_t>(m * l.n) * 4);
  out.poison();
  const TensorView xv = TensorView::contiguous(dx.get(), {m, l.k}, mode.x_dtype, Location::kDevice);
  const TensorView ov = TensorView::contiguous(out.get(), {m, l.n}, DType::kF32, Location::kDevice);
  const MxWeight weight{l.w.data_view(), l.w.scales_view()};
  LinearOptions options;
  options.activation = mode.activation;
  options.batch_invariant = true;
  if (prequantized) {
    const DeviceBuffer q(static_cast<std::size_t>(m * l.k)),
        qs(static_cast<std::size_t>(m * l.k / 32));
    const TensorView qv =
        TensorView::contiguous(q.get(), {m, l.k}, DType::kE4M3, Location::kDevice);
    const TensorView sv =
        TensorView::contiguous(qs.get(), {m, l.k / 32}, DType::kE8M0, Location::kDevice);
    quantize(xv, qv, sv, nullptr);
    linear(QuantizedActivation{qv, sv, DType::kBF16}, weight, std::nullopt, ov, nullptr, {},
           LinearOptions{.batch_invariant = true});
  } else if (kernel != nullptr) {
    linear_with(*kernel, config, xv, weight, std::nullopt, ov, nullptr, {}, options);
  } else {
    linear(xv, weight, std::nullopt, ov, nullptr, {}, options);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<std::uint32_t> all =
      out.download<std::uint32_t>(static_cast<std::size_t>(m * l.n));
  std::vector<std::uint32_t> rows;
  for (const std::int64_t p : at) {
    rows.insert(rows.end(), all.begin() + p * l.n, all.begin() + (p + 1) * l.n);
  }
  return rows;
}

// The reference call (M = 8, rows in place) must be a real answer: finite, not all zero, and
// within MXFP8.md's accumulation bound of the fp64 product, of the quantized rows in W8A8 (bf16
// x) and of the rows as they are in W8A16 (not with tiny scales: the folded weights' subnormal
// rounding has its own bound, which the prefill kernel's tests check).
void check_reference(const Layer& l, const Mode& mode, const std::vector<std::uint32_t>& ref,
                     bool tiny_scales) {
  int nonzero = 0;
  for (const std::uint32_t c : ref) {
    ASSERT_TRUE(std::isfinite(std::bit_cast<float>(c)));
    nonzero += std::bit_cast<float>(c) != 0.0f ? 1 : 0;
  }
  EXPECT_GT(nonzero, static_cast<int>(ref.size() / 2));
  if (tiny_scales) return;
  std::vector<std::uint8_t> raw(ref.size() * 4);
  std::memcpy(raw.data(), ref.data(), raw.size());
  if (mode.activation == ActivationMode::kW8A8 && l.fixed.dtype == DType::kBF16) {
    // W8A8: the fixed rows quantized by the contract's model, then the fp32 bound of the exact
    // product, so that a wrong answer given alike at every M cannot pass as invariant.
    const MxOperand a = quantized_bf16_rows(l.fixed.codes.data(), l.fixed.rows, l.k, l.fixed.ld_x);
    expect_within_accumulation_bound(raw, reference(a, l.host_w, {}), abs_product_sums(a, l.host_w),
                                     l.k, DType::kF32);
  }
  if (mode.activation == ActivationMode::kW8A16) {
    const W8A16Operands op = w8a16_operands(l.fixed, l.host_w);
    expect_within_accumulation_bound(raw, w8a16_reference(op, {}), w8a16_abs_product_sums(op), l.k,
                                     DType::kF32);
  }
}

// The first differing element of a fixed row, for the failure message.
std::string first_difference(const std::vector<std::uint32_t>& got,
                             const std::vector<std::uint32_t>& ref, std::int64_t n) {
  if (got.size() != ref.size()) return "sizes differ";
  const auto un = static_cast<std::size_t>(n);
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (got[i] != ref[i]) {
      return (::testing::Message()
              << "first difference: fixed row " << i / un << ", column " << i % un << ": "
              << std::bit_cast<float>(got[i]) << " against " << std::bit_cast<float>(ref[i]))
          .GetString();
    }
  }
  return "equal";
}

// The reference's first min(M, 8) fixed rows: what a call of M rows returns for them.
std::vector<std::uint32_t> head(const std::vector<std::uint32_t>& ref, std::int64_t m,
                                std::int64_t n) {
  return {ref.begin(), ref.begin() + std::min(m, kFixedRows) * n};
}

struct Shape {
  std::int64_t n, k, max_m;
  WeightScales scales = WeightScales::kRandom;  // make_layer's
};
// Long K (14336, 25600), N not a multiple of 128 (200, 1000, 96, 520), K not a multiple of 128
// (4160: two parts, the last chunk short), a seed layer, and tiny weight scales; the largest M
// keeps each case's activation near 100 MB.
const Shape kShapes[] = {{2560, 6144, 8192},
                         {200, 1024, 8192},
                         {1000, 14336, 4096},
                         {96, 25600, 2048},
                         {6144, 2048, 8192},
                         {1300, 4096, 4096},
                         {520, 4160, 4096},
                         {264, 8192, 2048, WeightScales::kTiny},
                         {1000, 6144, 2048, WeightScales::kWindowEdges}};

class BatchInvariance : public ::testing::TestWithParam<int> {};

// The public linear() at every dispatch bucket from 1 to 8192 and at M between buckets.
TEST_P(BatchInvariance, FixedRowsGiveTheSameBitsAtEveryM) {
  MXL_REQUIRE_GPU();
  const Shape s = kShapes[GetParam()];
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(::testing::Message() << mode.name << ", " << s.n << " x " << s.k);
    auto rng = make_rng();
    const Layer l = make_layer(s.n, s.k, mode.x_dtype, rng, s.scales);
    const std::vector<std::uint32_t> ref = fixed_outputs(l, mode, kFixedRows, rng);
    check_reference(l, mode, ref, s.scales == WeightScales::kTiny);
    for (const std::int64_t m : {1,   2,   3,   4,   5,    13,   16,   32,   33,   64,  100,
                                 128, 256, 300, 512, 1000, 1024, 2048, 2500, 4096, 8192}) {
      if (m > s.max_m) continue;
      const std::vector<std::uint32_t> want = head(ref, m, s.n);
      const std::vector<std::uint32_t> got = fixed_outputs(l, mode, m, rng);
      EXPECT_TRUE(got == want) << "M = " << m << ": " << first_difference(got, want, s.n);
      if (mode.activation == ActivationMode::kW8A8 && (m == 1 || m == 64 || m == 1000)) {
        // An activation its producer quantized gives the same rows through the other entry.
        const std::vector<std::uint32_t> pre = fixed_outputs(l, mode, m, rng, nullptr, {}, true);
        EXPECT_TRUE(pre == want) << "pre-quantized, M = " << m << ": "
                                 << first_difference(pre, want, s.n);
      }
    }
  }
}

// Every config the mode can select for the layer (the configs that keep the K order of the
// selected kernel and of the kernels that join its order: the GEMV's k-parts configs beside the
// prefill kernel) gives the same bits, at five M and positions (1 and 3: the GEMV's few tokens;
// 300: the k-parts tiles whose part sums live in the workspace run from 256 rows).
TEST_P(BatchInvariance, EveryConfigTheModeCanSelectGivesTheSameBits) {
  MXL_REQUIRE_GPU();
  const Shape s = kShapes[GetParam()];
  const Registry& registry = Registry::global();
  const DeviceDescription device = DeviceDescription::current();
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(::testing::Message() << mode.name << ", " << s.n << " x " << s.k);
    auto rng = make_rng();
    const Layer l = make_layer(s.n, s.k, mode.x_dtype, rng, s.scales);
    const std::vector<std::uint32_t> ref = fixed_outputs(l, mode, kFixedRows, rng);
    LayerDescription layer;
    layer.n = s.n;
    layer.k = s.k;
    layer.operand = mode.activation == ActivationMode::kW8A8 ? ActivationOperand::kMx
                    : mode.x_dtype == DType::kF16            ? ActivationOperand::kF16
                                                             : ActivationOperand::kBf16;
    layer.batch_invariant = true;
    const LayerSelection selection = registry.select(layer, device);
    ASSERT_NE(selection.kernel, nullptr);
    // Configs run per kernel of the family: each must run some (a kernel whose configs all
    // dropped out of runnable() or keeps_k_order() would otherwise go untested unseen).
    std::map<std::string, int> ran;
    for (const auto& kernel : registry.kernels()) {
      if (!in_k_order_of(*kernel, *selection.kernel) || !kernel->can_implement(layer).ok()) {
        continue;
      }
      int& ran_here = ran[std::string(kernel->name())];
      for (const std::string& config : kernel->configs()) {
        if (!kernel->keeps_k_order(config, s.k)) continue;
        for (const std::int64_t m : {1, 3, 8, 77, 300}) {
          if (!registry.runnable(*kernel, config, layer, m, device).ok()) continue;
          SCOPED_TRACE(std::string(kernel->name()) + "/" + config + " at M = " + std::to_string(m));
          const std::vector<std::uint32_t> want = head(ref, m, s.n);
          const std::vector<std::uint32_t> got =
              fixed_outputs(l, mode, m, rng, kernel.get(), config);
          EXPECT_TRUE(got == want) << first_difference(got, want, s.n);
          ++ran_here;
        }
      }
    }
    EXPECT_FALSE(ran.empty()) << selection.kernel->name() << " has no kernel in its K order";
    for (const auto& [name, count] : ran) EXPECT_GT(count, 0) << name << " ran no config";
  }
}

// Named by the shape ("n2560_k6144"), for the sanitizer runs' filters.
std::string shape_name(const ::testing::TestParamInfo<int>& p) {
  const Shape s = kShapes[p.param];
  return (::testing::Message() << "n" << s.n << "_k" << s.k
                               << (s.scales == WeightScales::kTiny          ? "_tiny"
                                   : s.scales == WeightScales::kWindowEdges ? "_edges"
                                                                            : ""))
      .GetString();
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchInvariance, ::testing::Range(0, 9), shape_name);

}  // namespace
}  // namespace mxlinear::test
