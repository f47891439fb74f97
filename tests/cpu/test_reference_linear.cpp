// The CPU reference linear against a naive computation written here: operands decoded with the
// test's own E4M3/E8M0 formulas (support/mx_oracle), products summed in long double, and the sum
// rounded with the test's own binary-search rounding. Outputs are poisoned with NaN (0xFF bytes)
// before every call, so an element the library does not write fails the comparison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "mxlinear/error.hpp"
#include "mxlinear/format.hpp"
#include "mxlinear/linear_types.hpp"
#include "mxlinear/quantize.hpp"
#include "mxlinear/reference.hpp"
#include "mxlinear/tensor.hpp"
#include "support/host_buffer.hpp"
#include "support/mx_oracle.hpp"
#include "support/random.hpp"

namespace mxlinear {
namespace {

using test::HostBuffer;

std::size_t Idx(std::int64_t i) { return static_cast<std::size_t>(i); }

constexpr DType kOutDTypes[] = {DType::kBF16, DType::kF16, DType::kF32};

test::BinaryFormat FormatOf(DType dtype) {
  return dtype == DType::kBF16 ? test::kBF16Format
                               : (dtype == DType::kF16 ? test::kF16Format : test::kF32Format);
}

// An MX operand [rows, K] owned by the test: e4m3 codes and e8m0 scales, row-major.
struct Mx {
  Mx(std::int64_t r, std::int64_t kk)
      : rows(r), k(kk), data(DType::kE4M3, Idx(r * kk)), scales(DType::kE8M0, Idx(r * kk / 32)) {
    for (std::size_t i = 0; i < scales.size(); ++i) scales.set_bits(i, 127);  // 2^0
  }
  std::int64_t rows;
  std::int64_t k;
  HostBuffer data;
  HostBuffer scales;

  void set(std::int64_t r, std::int64_t c, std::uint8_t code) {
    data.set_bits(Idx(r * k + c), code);
  }
  void set_scale(std::int64_t r, std::int64_t block, std::uint8_t b) {
    scales.set_bits(Idx(r * k / 32 + block), b);
  }
  std::uint8_t code(std::int64_t r, std::int64_t c) const {
    return static_cast<std::uint8_t>(data.bits(Idx(r * k + c)));
  }
  std::uint8_t scale(std::int64_t r, std::int64_t c) const {
    return static_cast<std::uint8_t>(scales.bits(Idx(r * k / 32 + c / 32)));
  }
  // deq(r, c) from the test's own decoders, exact in long double.
  long double value(std::int64_t r, std::int64_t c) const {
    return static_cast<long double>(test::e4m3_value(code(r, c))) *
           static_cast<long double>(test::e8m0_value(scale(r, c)));
  }
  MxWeight weight() { return MxWeight{data.view({rows, k}), scales.view({rows, k / 32})}; }
  QuantizedActivation activation(DType original = DType::kBF16) {
    return QuantizedActivation{data.view({rows, k}), scales.view({rows, k / 32}), original};
  }
};

// Random non-NaN codes with the given fraction of non-zeros, scales uniform in [lo, hi].
void FillRandom(Mx& mx, std::mt19937_64& rng, int scale_lo, int scale_hi, double density = 1.0) {
  std::uniform_int_distribution<std::uint32_t> magnitude(1, 0x7E);
  std::uniform_int_distribution<std::uint32_t> scale(static_cast<std::uint32_t>(scale_lo),
                                                     static_cast<std::uint32_t>(scale_hi));
  std::bernoulli_distribution nonzero(density);
  for (std::size_t i = 0; i < mx.data.size(); ++i) {
    const std::uint32_t sign = (rng() & 1) ? 0x80u : 0u;
    mx.data.set_bits(i, nonzero(rng) ? (sign | magnitude(rng)) : 0u);
  }
  for (std::size_t i = 0; i < mx.scales.size(); ++i) mx.scales.set_bits(i, scale(rng));
}

// The naive layer: the exact sum and the sum of |products| (for error bounds), per output.
struct Naive {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::vector<long double> sum;
  std::vector<long double> abs_sum;
  long double at(std::int64_t i, std::int64_t j) const { return sum[Idx(i * n + j)]; }
};

Naive NaiveLinear(const Mx& a, const Mx& w, const HostBuffer* bias) {
  Naive out;
  out.m = a.rows;
  out.n = w.rows;
  out.sum.assign(Idx(a.rows * w.rows), 0.0L);
  out.abs_sum.assign(Idx(a.rows * w.rows), 0.0L);
  for (std::int64_t i = 0; i < a.rows; ++i) {
    for (std::int64_t j = 0; j < w.rows; ++j) {
      long double acc = 0.0L;
      long double abs_acc = 0.0L;
      for (std::int64_t c = 0; c < a.k; ++c) {
        const long double p = a.value(i, c) * w.value(j, c);
        acc += p;
        abs_acc += std::fabs(p);
      }
      if (bias != nullptr) {
        const long double b = bias->value(Idx(j));
        acc += b;
        abs_acc += std::fabs(b);
      }
      out.sum[Idx(i * w.rows + j)] = acc;
      out.abs_sum[Idx(i * w.rows + j)] = abs_acc;
    }
  }
  return out;
}

// An output buffer [m, n] with row stride `stride`, poisoned with NaN (0xFF bytes) in the
// elements and with a different, finite pattern in the gaps between rows.
struct Out {
  Out(DType dtype, std::int64_t rows, std::int64_t cols, std::int64_t row_stride)
      : m(rows),
        n(cols),
        stride(row_stride),
        buffer(dtype, Idx(std::max<std::int64_t>(rows, 1) * row_stride), 0xFF) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = n; j < stride; ++j) buffer.set_bits(Idx(i * stride + j), kGap);
    }
  }
  static constexpr std::uint32_t kGap = 0x3C3C;
  std::int64_t m;
  std::int64_t n;
  std::int64_t stride;
  HostBuffer buffer;

  TensorView view() { return buffer.matrix(m, n, stride); }
  std::uint32_t bits(std::int64_t i, std::int64_t j) const {
    return buffer.bits(Idx(i * stride + j));
  }
  float value(std::int64_t i, std::int64_t j) const { return buffer.value(Idx(i * stride + j)); }
  void ExpectGapsUntouched() const {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = n; j < stride; ++j) {
        ASSERT_EQ(buffer.bits(Idx(i * stride + j)), kGap) << "gap at row " << i << " col " << j;
      }
    }
  }
};

// Every output equals the naive sum rounded once to the output type, bit for bit (NaN: any NaN).
void ExpectBitExact(const Out& out, const Naive& naive) {
  const test::BinaryFormat format = FormatOf(out.buffer.dtype());
  int failures = 0;
  for (std::int64_t i = 0; i < out.m; ++i) {
    for (std::int64_t j = 0; j < out.n; ++j) {
      const long double want = naive.at(i, j);
      const bool ok = std::isnan(want) ? std::isnan(out.value(i, j))
                                       : out.bits(i, j) == test::round_to_format(want, format);
      if (!ok && failures++ < 10) {
        ADD_FAILURE() << to_string(out.buffer.dtype()) << " out[" << i << ", " << j
                      << "] = " << std::hexfloat << out.value(i, j) << " (bits 0x" << std::hex
                      << out.bits(i, j) << "), expected " << std::hexfloat
                      << static_cast<double>(want) << " rounded (bits 0x" << std::hex
                      << test::round_to_format(want, format) << ")";
      }
    }
  }
  EXPECT_EQ(failures, 0);
  out.ExpectGapsUntouched();
}

// For sums that fp64 may round: the library sums K + 1 exact fp64 products/bias in some order,
// so its fp64 result S_D is within (K + 1) * 2^-53 * sum|p| of the exact sum S; our long double
// sum S_L is within (K + 1) * 2^-64 * sum|p| of S. Rounding to the output type is monotone, so
// RN(S_D) and RN(S_L) differ by at most one ulp of the output type, plus |S_D - S_L| when
// cancellation makes that difference larger than an ulp. Without cancellation (the common
// case) this is the "exact or within 1 ulp" rule: RN(S_D) = RN(S_L) unless S lies within the
// fp64 error of a rounding boundary of the output type, where the two may pick neighbours.
void ExpectWithinOneUlpOrFp64Bound(const Out& out, const Naive& naive, std::int64_t k) {
  const test::BinaryFormat format = FormatOf(out.buffer.dtype());
  const std::uint32_t sign_bit = 1u << (format.exponent_bits + format.mantissa_bits);
  auto ulp_at = [&](std::uint32_t bits) {
    const std::uint32_t mag = bits & (sign_bit - 1);
    return std::fabs(test::format_value(format, mag + 1) - test::format_value(format, mag));
  };
  int failures = 0;
  int exact = 0;
  for (std::int64_t i = 0; i < out.m; ++i) {
    for (std::int64_t j = 0; j < out.n; ++j) {
      const long double s = naive.at(i, j);
      const std::uint32_t got = out.bits(i, j);
      const std::uint32_t want = test::round_to_format(s, format);
      bool ok;
      if (std::isnan(s)) {
        ok = std::isnan(out.value(i, j));
        exact += ok ? 1 : 0;
      } else if (got == want) {
        ok = true;
        ++exact;
      } else {
        const long double diff =
            std::fabs(test::format_value(format, got) - test::format_value(format, want));
        const long double bound = std::max(ulp_at(got), ulp_at(want)) +
                                  2.0L * static_cast<long double>(k + 1) * std::ldexp(1.0L, -53) *
                                      naive.abs_sum[Idx(i * naive.n + j)];
        ok = diff <= bound;
      }
      if (!ok && failures++ < 10) {
        ADD_FAILURE() << to_string(out.buffer.dtype()) << " out[" << i << ", " << j
                      << "] = " << std::hexfloat << out.value(i, j) << ", expected about "
                      << static_cast<double>(s);
      }
    }
  }
  EXPECT_EQ(failures, 0);
  // How many outputs matched bit for bit (the rest needed the one-ulp allowance), for the XML log.
  ::testing::Test::RecordProperty(
      "exact_fraction_x1000",
      static_cast<int>(1000 * exact / std::max<std::int64_t>(1, out.m * out.n)));
  out.ExpectGapsUntouched();
}

HostBuffer MakeBias(DType dtype, const std::vector<float>& values) {
  HostBuffer bias(dtype, values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float stored = bias.store(i, values[i]);
    EXPECT_EQ(stored, values[i]) << "bias value not exact in " << to_string(dtype);
  }
  return bias;
}

std::optional<TensorView> BiasView(HostBuffer* bias) {
  if (bias == nullptr) return std::nullopt;
  return bias->view({static_cast<std::int64_t>(bias->size())});
}

// --- Exactly representable inputs: bit-exact
// ------------------------------------------------------

// A 2 x 32 activation against a 3 x 32 weight, worked out by hand:
//   A row 0: a[0] = 1 (0x38), a[1] = 2 (0x40), a[31] = -3 (0xC4); row 1: a[0] = 0.5 (0x30),
//   a[5] = 4 (0x48).
//   W row 0: w[0] = w[1] = w[31] = 1. W row 1: w[0] = 2, w[5] = -1.5 (0xBC), w[31] = 0.25 (0x28).
//   W row 2: w[1] = 1 with scale byte 130 (2^3), so deq = 8.
//   out row 0: [1 + 2 - 3, 2 - 0.75, 16] = [0, 1.25, 16]
//   out row 1: [0.5, 1 - 6, 0] = [0.5, -5, 0]
//   bias [0.5, -1, 3] -> [[0.5, 0.25, 19], [1, -6, 3]].
TEST(ReferenceLinear, HandComputedTwoByThreeIsExactInEveryOutputType) {
  Mx a(2, 32);
  a.set(0, 0, 0x38);
  a.set(0, 1, 0x40);
  a.set(0, 31, 0xC4);
  a.set(1, 0, 0x30);
  a.set(1, 5, 0x48);
  Mx w(3, 32);
  w.set(0, 0, 0x38);
  w.set(0, 1, 0x38);
  w.set(0, 31, 0x38);
  w.set(1, 0, 0x40);
  w.set(1, 5, 0xBC);
  w.set(1, 31, 0x28);
  w.set(2, 1, 0x38);
  w.set_scale(2, 0, 130);
  const float no_bias[2][3] = {{0.0f, 1.25f, 16.0f}, {0.5f, -5.0f, 0.0f}};
  const float with_bias[2][3] = {{0.5f, 0.25f, 19.0f}, {1.0f, -6.0f, 3.0f}};
  for (DType dtype : kOutDTypes) {
    for (DType bias_dtype : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(testing::Message() << to_string(dtype) << " bias " << to_string(bias_dtype));
      HostBuffer bias = MakeBias(bias_dtype, {0.5f, -1.0f, 3.0f});
      Out plain(dtype, 2, 3, 3);
      Out biased(dtype, 2, 3, 3);
      reference_linear(a.activation(), w.weight(), std::nullopt, plain.view());
      reference_linear(a.activation(), w.weight(), BiasView(&bias), biased.view());
      for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 3; ++j) {
          EXPECT_EQ(plain.value(i, j), no_bias[i][j]) << "out[" << i << ", " << j << "]";
          EXPECT_EQ(biased.value(i, j), with_bias[i][j]) << "out[" << i << ", " << j << "]";
        }
      }
    }
  }
}

// Few non-zeros per row, codes of small integers and powers of two, scales near 2^0: every
// product and partial sum is exact in fp64, so the library must equal the naive result bit for bit.
TEST(ReferenceLinear, SparseSmallIntegerInputsAreBitExactForAllOutputTypesAndBiases) {
  std::mt19937_64 rng = test::make_rng();
  // 0.25, 0.5, 1, 1.5, 2, 3, 4, 6, 8, 12 and their negatives.
  const std::uint8_t small[] = {0x28, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C, 0x50, 0x54};
  std::uniform_int_distribution<int> pick(0, 9);
  std::uniform_int_distribution<int> scale(124, 130);
  struct Shape {
    std::int64_t m, n, k;
  };
  for (const Shape& s : {Shape{1, 1, 32}, Shape{7, 13, 96}, Shape{100, 130, 544}}) {
    SCOPED_TRACE(testing::Message() << "M " << s.m << " N " << s.n << " K " << s.k);
    Mx a(s.m, s.k);
    Mx w(s.n, s.k);
    for (Mx* mx : {&a, &w}) {
      for (std::int64_t r = 0; r < mx->rows; ++r) {
        for (int t = 0; t < 6; ++t) {  // about six non-zeros per row
          const std::int64_t c =
              static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(mx->k));
          const auto sign = static_cast<std::uint8_t>((rng() & 1) ? 0x80 : 0x00);
          mx->set(r, c, static_cast<std::uint8_t>(sign | small[pick(rng)]));
        }
        for (std::int64_t b = 0; b < mx->k / 32; ++b) {
          mx->set_scale(r, b, static_cast<std::uint8_t>(scale(rng)));
        }
      }
    }
    std::vector<float> bias_values;
    for (std::int64_t j = 0; j < s.n; ++j)
      bias_values.push_back(static_cast<float>(pick(rng) - 4) * 0.5f);
    HostBuffer bias_bf16 = MakeBias(DType::kBF16, bias_values);
    HostBuffer bias_f32 = MakeBias(DType::kF32, bias_values);
    for (DType dtype : kOutDTypes) {
      for (HostBuffer* bias : {static_cast<HostBuffer*>(nullptr), &bias_bf16, &bias_f32}) {
        SCOPED_TRACE(testing::Message()
                     << to_string(dtype) << " bias " << (bias ? to_string(bias->dtype()) : "none"));
        Out out(dtype, s.m, s.n, s.n);
        reference_linear(a.activation(), w.weight(), BiasView(bias), out.view());
        ExpectBitExact(out, NaiveLinear(a, w, bias));
      }
    }
  }
}

// --- Random inputs
// ----------------------------------------------------------------------------------

// Dense random codes with scale bytes in [lo, lo + 3] for both operands. Each product is a
// multiple of 2^(-18 + 2 lo - 254) below 2^(17.61 + 2 (lo + 3) - 254), so the sum of K <= 544 of
// them spans less than 2^(9.1 + 17.61 + 18 + 6) = 2^50.7 units (plus a bias on the same grid)
// and every partial sum is exact in fp64: the library's result must be bit-exact.
TEST(ReferenceLinear, RandomOperandsWithExactFp64SumsAreBitExactForAllOutputTypes) {
  std::mt19937_64 rng = test::make_rng();
  for (std::int64_t m : {1, 7, 100}) {
    for (std::int64_t k : {32, 96, 544}) {
      const std::int64_t n = m == 100 ? 130 : 13;
      for (DType dtype : kOutDTypes) {
        SCOPED_TRACE(testing::Message() << to_string(dtype) << " M " << m << " K " << k);
        // fp16 tops out at 65504: keep its sums small (products < 2^5.6).
        const int lo = dtype == DType::kF16 ? 118 : 125;
        Mx a(m, k);
        Mx w(n, k);
        FillRandom(a, rng, lo, lo + 3);
        FillRandom(w, rng, lo, lo + 3);
        std::vector<float> bias_values;
        std::uniform_int_distribution<int> bias_int(-1000, 1000);
        for (std::int64_t j = 0; j < n; ++j) {
          bias_values.push_back(static_cast<float>(bias_int(rng)) * 0.125f);
        }
        HostBuffer bias = MakeBias(DType::kF32, bias_values);
        Out plain(dtype, m, n, n + 3);
        reference_linear(a.activation(), w.weight(), std::nullopt, plain.view());
        ExpectBitExact(plain, NaiveLinear(a, w, nullptr));
        Out biased(dtype, m, n, n);
        reference_linear(a.activation(), w.weight(), BiasView(&bias), biased.view());
        ExpectBitExact(biased, NaiveLinear(a, w, &bias));

        // The unrounded fp64 entry point is exact here too.
        std::vector<double> f64(Idx(m * n), std::numeric_limits<double>::quiet_NaN());
        reference_linear_f64(a.activation(), w.weight(), BiasView(&bias), f64.data());
        const Naive naive = NaiveLinear(a, w, &bias);
        for (std::int64_t i = 0; i < m * n; ++i) {
          ASSERT_EQ(static_cast<long double>(f64[Idx(i)]), naive.sum[Idx(i)]) << "element " << i;
        }
      }
    }
  }
}

// Scales over a wide range (2^-40 .. 2^40 per block), so fp64 sums do round: see
// ExpectWithinOneUlpOrFp64Bound for why the fp32 result is exact or within one ulp.
TEST(ReferenceLinear, RandomWideRangeOperandsFp32WithinOneUlpOfNaive) {
  std::mt19937_64 rng = test::make_rng();
  for (std::int64_t m : {1, 7, 100}) {
    for (std::int64_t k : {32, 96, 544}) {
      SCOPED_TRACE(testing::Message() << "M " << m << " K " << k);
      const std::int64_t n = m == 100 ? 130 : 13;
      Mx a(m, k);
      Mx w(n, k);
      FillRandom(a, rng, 87, 167);
      FillRandom(w, rng, 87, 167);
      HostBuffer bias(DType::kBF16, Idx(n));
      test::fill_random_blocks(bias, 1, n / 32 * 32, n, rng, false, -10, 10);
      for (DType dtype : kOutDTypes) {
        Out out(dtype, m, n, n);
        reference_linear(a.activation(), w.weight(), BiasView(&bias), out.view());
        ExpectWithinOneUlpOrFp64Bound(out, NaiveLinear(a, w, &bias), k);
      }
    }
  }
}

// --- The two entry points -----------------------------------------------------------------------

// The activation quantized by the test's own quantizer (RCEIL) into an Mx operand.
Mx QuantizeWithOracle(const HostBuffer& x, std::int64_t rows, std::int64_t k) {
  Mx a(rows, k);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t b = 0; b < k / 32; ++b) {
      float values[32];
      for (int i = 0; i < 32; ++i) values[i] = x.value(Idx(r * k + b * 32 + i));
      const test::QuantizedBlock q = test::quantize_block(values, ScaleRule::kRceil);
      a.set_scale(r, b, q.scale);
      for (int i = 0; i < 32; ++i) a.set(r, b * 32 + i, q.q[Idx(i)]);
    }
  }
  return a;
}

TEST(ReferenceLinear, UnquantizedAndPreQuantizedEntryPointsAgree) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t m = 37;
  const std::int64_t n = 45;
  const std::int64_t k = 160;
  Mx w(n, k);
  FillRandom(w, rng, 110, 140);
  HostBuffer bias(DType::kF32, Idx(n));
  test::fill_random_blocks(bias, 1, 32, n, rng, false, -5, 5);
  for (DType x_dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    HostBuffer x(x_dtype, Idx(m * k));
    // Magnitudes 2^-20 .. 2^14, NaN/Inf blocks included.
    test::fill_random_blocks(x, m, k, k, rng, true, -20, 14);
    const Mx a = QuantizeWithOracle(x, m, k);
    // The library's own quantization of x, for the pre-quantized entry point.
    Mx lib(m, k);
    quantize_rows(x.view({m, k}), lib.data.view({m, k}), lib.scales.view({m, k / 32}));
    ASSERT_EQ(lib.data.bytes(), a.data.bytes());
    ASSERT_EQ(lib.scales.bytes(), a.scales.bytes());
    const Naive naive = NaiveLinear(a, w, &bias);
    for (DType dtype : kOutDTypes) {
      SCOPED_TRACE(testing::Message() << "x " << to_string(x_dtype) << " out " << to_string(dtype));
      Out inside(dtype, m, n, n);
      Out prequantized(dtype, m, n, n);
      Out default_rule(dtype, m, n, n);
      reference_linear(x.view({m, k}), w.weight(), BiasView(&bias), inside.view(),
                       ScaleRule::kRceil);
      reference_linear(x.view({m, k}), w.weight(), BiasView(&bias), default_rule.view());
      reference_linear(lib.activation(x_dtype), w.weight(), BiasView(&bias), prequantized.view());
      EXPECT_EQ(inside.buffer.bytes(), prequantized.buffer.bytes());
      EXPECT_EQ(default_rule.buffer.bytes(), prequantized.buffer.bytes());
      ExpectWithinOneUlpOrFp64Bound(inside, naive, k);
    }
  }
}

TEST(ReferenceLinear, FloorRuleOnTheUnquantizedEntryPointUsesFloorScales) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t m = 9;
  const std::int64_t n = 5;
  const std::int64_t k = 96;
  Mx w(n, k);
  FillRandom(w, rng, 120, 134);
  HostBuffer x(DType::kBF16, Idx(m * k));
  test::fill_random_blocks(x, m, k, k, rng, false, -10, 10);
  Mx a(m, k);
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t b = 0; b < k / 32; ++b) {
      float values[32];
      for (int i = 0; i < 32; ++i) values[i] = x.value(Idx(r * k + b * 32 + i));
      const test::QuantizedBlock q = test::quantize_block(values, ScaleRule::kFloor);
      a.set_scale(r, b, q.scale);
      for (int i = 0; i < 32; ++i) a.set(r, b * 32 + i, q.q[Idx(i)]);
    }
  }
  Out floor(DType::kF32, m, n, n);
  Out expected(DType::kF32, m, n, n);
  reference_linear(x.view({m, k}), w.weight(), std::nullopt, floor.view(), ScaleRule::kFloor);
  reference_linear(a.activation(), w.weight(), std::nullopt, expected.view());
  EXPECT_EQ(floor.buffer.bytes(), expected.buffer.bytes());
  ExpectWithinOneUlpOrFp64Bound(floor, NaiveLinear(a, w, nullptr), k);
}

// --- Shapes and strides
// ---------------------------------------------------------------------------

TEST(ReferenceLinear, BatchSeqKInputGivesBatchSeqNOutput) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t batch = 3;
  const std::int64_t seq = 7;
  const std::int64_t n = 19;
  const std::int64_t k = 96;
  Mx w(n, k);
  FillRandom(w, rng, 120, 134);
  HostBuffer x(DType::kBF16, Idx(batch * seq * k));
  test::fill_random_blocks(x, batch * seq, k, k, rng, true, -10, 10);
  for (DType dtype : kOutDTypes) {
    SCOPED_TRACE(to_string(dtype));
    HostBuffer out3(dtype, Idx(batch * seq * n), 0xFF);
    reference_linear(x.view({batch, seq, k}), w.weight(), std::nullopt, out3.view({batch, seq, n}));
    Out flat(dtype, batch * seq, n, n);
    reference_linear(x.view({batch * seq, k}), w.weight(), std::nullopt, flat.view());
    EXPECT_EQ(out3.bytes(), flat.buffer.bytes());
    ExpectWithinOneUlpOrFp64Bound(
        flat, NaiveLinear(QuantizeWithOracle(x, batch * seq, k), w, nullptr), k);

    // The pre-quantized entry point: data [B, S, K], scales [B * S, K/32].
    const Mx a = QuantizeWithOracle(x, batch * seq, k);
    Mx a3(batch * seq, k);
    a3.data = a.data;
    a3.scales = a.scales;
    HostBuffer out3q(dtype, Idx(batch * seq * n), 0xFF);
    QuantizedActivation xq{a3.data.view({batch, seq, k}), a3.scales.view({batch * seq, k / 32}),
                           DType::kBF16};
    reference_linear(xq, w.weight(), std::nullopt, out3q.view({batch, seq, n}));
    EXPECT_EQ(out3q.bytes(), flat.buffer.bytes());
  }
}

TEST(ReferenceLinear, OutputRowStrideLargerThanNLeavesGapBytesUntouched) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t m = 11;
  const std::int64_t n = 21;
  const std::int64_t k = 64;
  Mx a(m, k);
  Mx w(n, k);
  FillRandom(a, rng, 125, 128);
  FillRandom(w, rng, 125, 128);
  for (DType dtype : kOutDTypes) {
    for (std::int64_t stride : {n + 1, n + 11, 2 * n}) {
      SCOPED_TRACE(testing::Message() << to_string(dtype) << " stride " << stride);
      Out out(dtype, m, n, stride);
      reference_linear(a.activation(), w.weight(), std::nullopt, out.view());
      ExpectBitExact(out, NaiveLinear(a, w, nullptr));  // checks the gaps too
    }
  }
}

TEST(ReferenceLinear, StridedActivationRowsAreRead) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t m = 6;
  const std::int64_t n = 10;
  const std::int64_t k = 64;
  const std::int64_t xs = 100;
  Mx w(n, k);
  FillRandom(w, rng, 125, 128);
  HostBuffer x(DType::kBF16, Idx(m * xs));
  test::fill_random_blocks(x, m, k, xs, rng, false, -3, 3);
  HostBuffer x_dense(DType::kBF16, Idx(m * k));
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t c = 0; c < k; ++c) x_dense.set_bits(Idx(r * k + c), x.bits(Idx(r * xs + c)));
  }
  Out strided(DType::kF32, m, n, n);
  Out dense(DType::kF32, m, n, n);
  reference_linear(x.matrix(m, k, xs), w.weight(), std::nullopt, strided.view());
  reference_linear(x_dense.view({m, k}), w.weight(), std::nullopt, dense.view());
  EXPECT_EQ(strided.buffer.bytes(), dense.buffer.bytes());
  ExpectWithinOneUlpOrFp64Bound(dense, NaiveLinear(QuantizeWithOracle(x_dense, m, k), w, nullptr),
                                k);
}

// Pre-quantized activation and weight whose data and scale rows are padded (row strides > K and
// > K/32): the strided copies must give the same exact result as the naive sum of the dense ones.
TEST(ReferenceLinear, StridedQuantizedActivationAndWeightRowsAreRead) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t m = 9;
  const std::int64_t n = 11;
  const std::int64_t k = 96;
  Mx a(m, k);
  Mx w(n, k);
  FillRandom(a, rng, 125, 128);
  FillRandom(w, rng, 125, 128);
  auto strided_copy = [](const Mx& mx, std::int64_t data_stride, std::int64_t scales_stride,
                         HostBuffer& data, HostBuffer& scales) {
    for (std::int64_t r = 0; r < mx.rows; ++r) {
      for (std::int64_t c = 0; c < mx.k; ++c)
        data.set_bits(Idx(r * data_stride + c), mx.code(r, c));
      for (std::int64_t b = 0; b < mx.k / 32; ++b) {
        scales.set_bits(Idx(r * scales_stride + b), mx.scale(r, b * 32));
      }
    }
  };
  // Padding bytes hold NaN codes and NaN scales: reading one would turn outputs into NaN.
  HostBuffer a_data(DType::kE4M3, Idx(m * (k + 24)), 0x7F);
  HostBuffer a_scales(DType::kE8M0, Idx(m * (k / 32 + 2)), 0xFF);
  HostBuffer w_data(DType::kE4M3, Idx(n * (k + 8)), 0xFF);
  HostBuffer w_scales(DType::kE8M0, Idx(n * (k / 32 + 1)), 0xFF);
  strided_copy(a, k + 24, k / 32 + 2, a_data, a_scales);
  strided_copy(w, k + 8, k / 32 + 1, w_data, w_scales);
  const QuantizedActivation xq{a_data.matrix(m, k, k + 24), a_scales.matrix(m, k / 32, k / 32 + 2),
                               DType::kBF16};
  const MxWeight weight{w_data.matrix(n, k, k + 8), w_scales.matrix(n, k / 32, k / 32 + 1)};
  const Naive naive = NaiveLinear(a, w, nullptr);
  for (DType dtype : kOutDTypes) {
    SCOPED_TRACE(to_string(dtype));
    Out out(dtype, m, n, n);
    reference_linear(xq, weight, std::nullopt, out.view());
    ExpectBitExact(out, naive);
  }
  std::vector<double> f64(Idx(m * n), 0.0);
  reference_linear_f64(xq, weight, std::nullopt, f64.data());
  for (std::int64_t i = 0; i < m * n; ++i) {
    EXPECT_EQ(static_cast<long double>(f64[Idx(i)]), naive.sum[Idx(i)]) << "element " << i;
  }
}

// Decode-step slices: x = h[:, -1:, :] of a [B, S, K] tensor ([B, 1, K], strides {S*K, K, 1})
// into out = y[:, -1:, :] of a [B, S, N] buffer; the other positions of y stay untouched.
TEST(ReferenceLinear, UnitMiddleDimSlicesOfLargerTensorsAreReadAndWrittenAsRows) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t batch = 3;
  const std::int64_t seq = 4;
  const std::int64_t n = 10;
  const std::int64_t k = 64;
  Mx w(n, k);
  FillRandom(w, rng, 120, 134);
  HostBuffer h(DType::kBF16, Idx(batch * seq * k));
  test::fill_random_blocks(h, batch * seq, k, k, rng, false, -8, 8);
  TensorView x = TensorView::contiguous(static_cast<unsigned char*>(h.data()) + (seq - 1) * k * 2,
                                        {batch, 1, k}, DType::kBF16, Location::kHost);
  x.strides = {seq * k, k, 1};
  HostBuffer y(DType::kF32, Idx(batch * seq * n), 0xFF);
  TensorView out = TensorView::contiguous(static_cast<unsigned char*>(y.data()) + (seq - 1) * n * 4,
                                          {batch, 1, n}, DType::kF32, Location::kHost);
  out.strides = {seq * n, n, 1};
  reference_linear(x, w.weight(), std::nullopt, out);

  HostBuffer dense(DType::kBF16, Idx(batch * k));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t c = 0; c < k; ++c) {
      dense.set_bits(Idx(b * k + c), h.bits(Idx((b * seq + seq - 1) * k + c)));
    }
  }
  Out want(DType::kF32, batch, n, n);
  reference_linear(dense.view({batch, k}), w.weight(), std::nullopt, want.view());
  ExpectWithinOneUlpOrFp64Bound(want, NaiveLinear(QuantizeWithOracle(dense, batch, k), w, nullptr),
                                k);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t s = 0; s < seq; ++s) {
      for (std::int64_t j = 0; j < n; ++j) {
        const std::uint32_t got = y.bits(Idx((b * seq + s) * n + j));
        if (s == seq - 1) {
          EXPECT_EQ(got, want.bits(b, j)) << "batch " << b << " col " << j;
        } else {
          EXPECT_EQ(got, 0xFFFFFFFFu) << "position " << s << " of batch " << b << " written";
        }
      }
    }
  }
}

TEST(ReferenceLinear, ZeroRowsDoesNothing) {
  const std::int64_t n = 8;
  const std::int64_t k = 64;
  Mx w(n, k);
  w.set(0, 0, 0x38);
  HostBuffer x(DType::kBF16, Idx(k));
  HostBuffer data(DType::kE4M3, Idx(k));
  HostBuffer scales(DType::kE8M0, 2);
  for (DType dtype : kOutDTypes) {
    HostBuffer out(dtype, Idx(2 * n), 0xA7);
    const std::vector<unsigned char> before = out.bytes();
    reference_linear(x.view({0, k}), w.weight(), std::nullopt, out.view({0, n}));
    reference_linear(x.view({4, 0, k}), w.weight(), std::nullopt, out.view({4, 0, n}));
    reference_linear(QuantizedActivation{data.view({0, k}), scales.view({0, 2}), DType::kBF16},
                     w.weight(), std::nullopt, out.view({0, n}));
    reference_linear(TensorView::contiguous(nullptr, {0, k}, DType::kBF16, Location::kHost),
                     w.weight(), std::nullopt,
                     TensorView::contiguous(nullptr, {0, n}, dtype, Location::kHost));
    EXPECT_EQ(out.bytes(), before);
  }
  double sentinel = 42.0;
  reference_linear_f64(QuantizedActivation{data.view({0, k}), scales.view({0, 2}), DType::kBF16},
                       w.weight(), std::nullopt, &sentinel);
  EXPECT_EQ(sentinel, 42.0);
}

TEST(ReferenceLinear, RowResultDoesNotDependOnMOrOtherRowsAndRepeats) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t m = 40;
  const std::int64_t n = 17;
  const std::int64_t k = 128;
  Mx a(m, k);
  Mx w(n, k);
  FillRandom(a, rng, 100, 150);
  FillRandom(w, rng, 100, 150);
  Out all(DType::kBF16, m, n, n);
  Out again(DType::kBF16, m, n, n);
  reference_linear(a.activation(), w.weight(), std::nullopt, all.view());
  reference_linear(a.activation(), w.weight(), std::nullopt, again.view());
  EXPECT_EQ(all.buffer.bytes(), again.buffer.bytes());
  for (std::int64_t r : {std::int64_t{0}, std::int64_t{13}, m - 1}) {
    Mx one(1, k);
    for (std::int64_t c = 0; c < k; ++c) one.set(0, c, a.code(r, c));
    for (std::int64_t b = 0; b < k / 32; ++b) one.set_scale(0, b, a.scale(r, b * 32));
    Out single(DType::kBF16, 1, n, n);
    reference_linear(one.activation(), w.weight(), std::nullopt, single.view());
    for (std::int64_t j = 0; j < n; ++j)
      EXPECT_EQ(single.bits(0, j), all.bits(r, j)) << r << " " << j;
  }
}

// --- NaN propagation
// ------------------------------------------------------------------------------

TEST(ReferenceLinear, NaNScaleOrElementMakesExactlyTheOutputsItFeedsNaN) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t m = 6;
  const std::int64_t n = 7;
  const std::int64_t k = 96;
  Mx a(m, k);
  Mx w(n, k);
  FillRandom(a, rng, 125, 128);
  FillRandom(w, rng, 125, 128);
  a.set_scale(1, 2, 0xFF);  // row 1 of the output
  a.set(3, 40, 0x7F);       // row 3
  a.set(4, 0, 0xFF);        // row 4 (negative-sign NaN code)
  w.set_scale(2, 1, 0xFF);  // column 2
  w.set(5, 95, 0xFF);       // column 5
  const Naive naive = NaiveLinear(a, w, nullptr);
  for (std::int64_t i = 0; i < m; ++i) {  // the oracle agrees on which outputs are NaN
    for (std::int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(std::isnan(naive.at(i, j)), i == 1 || i == 3 || i == 4 || j == 2 || j == 5);
    }
  }
  for (DType dtype : kOutDTypes) {
    SCOPED_TRACE(to_string(dtype));
    Out out(dtype, m, n, n);
    reference_linear(a.activation(), w.weight(), std::nullopt, out.view());
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        const bool fed = i == 1 || i == 3 || i == 4 || j == 2 || j == 5;
        EXPECT_EQ(std::isnan(out.value(i, j)), fed) << "out[" << i << ", " << j << "]";
      }
    }
    ExpectBitExact(out, naive);  // and every other output is exact
  }
}

TEST(ReferenceLinear, NaNOrInfInAnUnquantizedActivationMakesItsRowNaN) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t m = 4;
  const std::int64_t n = 5;
  const std::int64_t k = 64;
  Mx w(n, k);
  FillRandom(w, rng, 125, 128);
  HostBuffer x(DType::kBF16, Idx(m * k));
  test::fill_random_blocks(x, m, k, k, rng, false, -2, 2);
  x.set_bits(Idx(1 * k + 33), 0x7FC0);  // NaN in row 1
  x.set_bits(Idx(2 * k + 0), 0xFF80);   // -Inf in row 2: non-finite input never turns finite
  Out out(DType::kF32, m, n, n);
  reference_linear(x.view({m, k}), w.weight(), std::nullopt, out.view());
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(std::isnan(out.value(i, j)), i == 1 || i == 2) << "out[" << i << ", " << j << "]";
    }
  }
}

// --- Rounding of the fp64 sum
// ------------------------------------------------------------------------

// Sums crafted so that rounding the fp64 sum via fp32 would give a different answer (K = 96, a
// weight of ones; each E4M3 value below is 1 (0x38) unless stated, with its block's scale):
//   row 0: 1 + 2^-8 (code 0x02 = 2 * 2^-9, block 0 at 2^0) + 2^-30 (block 2, scale byte 97).
//     fp64 -> bf16 directly: 1 + 2^-8 is the midpoint of bf16 1 and 1 + 2^-7 and the extra 2^-30
//     puts the sum above it: 1 + 2^-7 (0x3F81). Via fp32, the 2^-30 is lost (below half the fp32
//     ulp 2^-24), leaving the tie 1 + 2^-8, which rounds to even: 1.0 (0x3F80). Expect 0x3F81.
//   row 1: the negative of row 0: expect 0xBF81.
//   row 2: 1 + 2^-11 (block 1, scale byte 116) + 2^-30 (block 2). fp16 directly: above the
//     midpoint of 1 and 1 + 2^-10, so 0x3C01; via fp32 the tie 1 + 2^-11 would give 0x3C00.
//   row 3: 1 + 2^-8 exactly, a true bf16 tie: 1.0 (0x3F80) either way (the control).
TEST(ReferenceLinear, Fp64SumIsRoundedStraightToTheOutputTypeWithoutDoubleRounding) {
  const std::int64_t k = 96;
  Mx a(4, k);
  for (std::int64_t r = 0; r < 4; ++r) a.set(r, 0, 0x38);
  a.set(0, 1, 0x02);
  a.set(0, 64, 0x38);
  a.set_scale(0, 2, 97);
  a.set(1, 0, 0xB8);
  a.set(1, 1, 0x82);
  a.set(1, 64, 0xB8);
  a.set_scale(1, 2, 97);
  a.set(2, 32, 0x38);
  a.set_scale(2, 1, 116);
  a.set(2, 64, 0x38);
  a.set_scale(2, 2, 97);
  a.set(3, 1, 0x02);
  Mx w(1, k);
  for (std::int64_t c = 0; c < k; ++c) w.set(0, c, 0x38);

  std::vector<double> f64(4, 0.0);
  reference_linear_f64(a.activation(), w.weight(), std::nullopt, f64.data());
  EXPECT_EQ(f64[0], 1.0 + 0x1p-8 + 0x1p-30);
  EXPECT_EQ(f64[2], 1.0 + 0x1p-11 + 0x1p-30);

  Out bf16(DType::kBF16, 4, 1, 1);
  reference_linear(a.activation(), w.weight(), std::nullopt, bf16.view());
  EXPECT_EQ(bf16.bits(0, 0), 0x3F81u) << "1 + 2^-8 + 2^-30 must round up to 1 + 2^-7";
  EXPECT_EQ(bf16.bits(1, 0), 0xBF81u);
  EXPECT_EQ(bf16.bits(3, 0), 0x3F80u) << "a true tie rounds to even";
  Out f16(DType::kF16, 4, 1, 1);
  reference_linear(a.activation(), w.weight(), std::nullopt, f16.view());
  EXPECT_EQ(f16.bits(2, 0), 0x3C01u) << "1 + 2^-11 + 2^-30 must round up to 1 + 2^-10";
  EXPECT_EQ(f16.bits(0, 0), 0x3C04u);  // 1 + 2^-8 is an fp16 number; 2^-30 is far below its ulp
  Out f32(DType::kF32, 4, 1, 1);
  reference_linear(a.activation(), w.weight(), std::nullopt, f32.view());
  EXPECT_EQ(f32.value(0, 0), 1.0f + 0x1p-8f);
  EXPECT_EQ(f32.value(2, 0), 1.0f + 0x1p-11f);
}

// W8A16: x (bf16 or fp16) as it is times deq(W). Random 16-bit x with small-integer weights:
// every product and sum is exact in long double, so the reference must equal the naive result
// rounded once, in every output type, and with a bias.
TEST(ReferenceLinear, W8A16IsTheSixteenBitActivationTimesTheDequantizedWeights) {
  std::mt19937_64 rng = test::make_rng();
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const DType x_dtype : {DType::kBF16, DType::kF16}) {
    const std::int64_t m = 5, n = 7, k = 96;
    HostBuffer x(x_dtype, Idx(m * k));
    for (std::size_t i = 0; i < x.size(); ++i) x.store(i, normal(rng));
    Mx w(n, k);
    FillRandom(w, rng, 120, 134, 0.5);
    HostBuffer bias = MakeBias(DType::kF32, {0.5f, -1.0f, 3.0f, 0.0f, 2.0f, -0.25f, 1.0f});
    for (const DType out_dtype : kOutDTypes) {
      SCOPED_TRACE(testing::Message() << to_string(x_dtype) << " x, " << to_string(out_dtype));
      Out out(out_dtype, m, n, n);
      reference_linear_w8a16(x.matrix(m, k, k), w.weight(), BiasView(&bias), out.view());
      const test::BinaryFormat format = FormatOf(out_dtype);
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
          long double acc = bias.value(Idx(j));
          for (std::int64_t c = 0; c < k; ++c) {
            acc += static_cast<long double>(x.value(Idx(i * k + c))) * w.value(j, c);
          }
          EXPECT_EQ(out.bits(i, j), test::round_to_format(acc, format))
              << "out[" << i << ", " << j << "]";
        }
      }
      std::vector<double> f64(Idx(m * n));
      reference_linear_w8a16_f64(x.matrix(m, k, k), w.weight(), BiasView(&bias), f64.data());
      EXPECT_EQ(test::round_to_format(f64[Idx(n + 1)], format), out.bits(1, 1));
    }
  }
}

// W8A16 multiplies a 16-bit activation: fp32 x is refused, naming x and the mode.
TEST(ReferenceLinear, W8A16RefusesAnFp32Activation) {
  HostBuffer x(DType::kF32, 2 * 32);
  Mx w(3, 32);
  Out out(DType::kF32, 2, 3, 3);
  try {
    reference_linear_w8a16(x.matrix(2, 32, 32), w.weight(), std::nullopt, out.view());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("W8A16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mxlinear
