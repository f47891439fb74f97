// quantize_rows / dequantize_rows on fresh random inputs (fp32, bf16, fp16), every element and
// scale compared with the brute-force per-block quantizer of support/mx_oracle; strided rows,
// [B, S, K] views, M = 0, and exact dequantization.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mxlinear/format.hpp"
#include "mxlinear/quantize.hpp"
#include "mxlinear/tensor.hpp"
#include "support/host_buffer.hpp"
#include "support/mx_oracle.hpp"
#include "support/random.hpp"

namespace mxlinear {
namespace {

using test::HostBuffer;

constexpr unsigned char kPoison = 0xCD;
constexpr std::int64_t kShapesM[] = {1, 7, 100};
constexpr std::int64_t kShapesK[] = {32, 96, 544};

std::size_t Idx(std::int64_t i) { return static_cast<std::size_t>(i); }

const char* RuleName(ScaleRule rule) { return rule == ScaleRule::kRceil ? "RCEIL" : "FLOOR"; }

// Compares the quantized rows (and only them) with the oracle; then checks that every byte of
// data and scales outside the rows' extents still holds kPoison. Reports at most 10 mismatches.
void ExpectQuantizedMatchesOracle(const HostBuffer& x, std::int64_t rows, std::int64_t k,
                                  std::int64_t x_stride, const HostBuffer& data,
                                  std::int64_t data_stride, const HostBuffer& scales,
                                  std::int64_t scales_stride, ScaleRule rule) {
  int failures = 0;
  std::vector<bool> data_written(data.size(), false);
  std::vector<bool> scales_written(scales.size(), false);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t b = 0; b < k / kBlockSize; ++b) {
      float values[kBlockSize];
      for (int i = 0; i < kBlockSize; ++i) values[i] = x.value(Idx(r * x_stride + b * 32 + i));
      const test::QuantizedBlock want = test::quantize_block(values, rule);
      const std::size_t s = Idx(r * scales_stride + b);
      scales_written[s] = true;
      if (scales.bits(s) != want.scale && failures++ < 10) {
        ADD_FAILURE() << RuleName(rule) << " row " << r << " block " << b << ": scale "
                      << scales.bits(s) << ", expected " << int{want.scale};
      }
      for (int i = 0; i < kBlockSize; ++i) {
        const std::size_t d = Idx(r * data_stride + b * 32 + i);
        data_written[d] = true;
        if (data.bits(d) != want.q[Idx(i)] && failures++ < 10) {
          ADD_FAILURE() << RuleName(rule) << " row " << r << " col " << b * 32 + i << " value "
                        << std::hexfloat << values[i] << std::dec << " (block scale "
                        << int{want.scale} << "): code " << data.bits(d) << ", expected "
                        << int{want.q[Idx(i)]};
        }
      }
    }
  }
  for (std::size_t i = 0; i < data.size(); ++i) {
    if (!data_written[i]) {
      ASSERT_EQ(data.bits(i), kPoison) << "data byte " << i << " written";
    }
  }
  for (std::size_t i = 0; i < scales.size(); ++i) {
    if (!scales_written[i]) {
      ASSERT_EQ(scales.bits(i), kPoison) << "scale byte " << i << " written";
    }
  }
  EXPECT_EQ(failures, 0);
}

// Random rows of `dtype`, quantized by quantize_rows with the given row strides (>= K).
void RunRandomQuantize(std::mt19937_64& rng, DType dtype, ScaleRule rule, std::int64_t rows,
                       std::int64_t k, std::int64_t x_pad, std::int64_t data_pad,
                       std::int64_t scales_pad) {
  SCOPED_TRACE(testing::Message() << "M = " << rows << ", K = " << k << ", pads " << x_pad << "/"
                                  << data_pad << "/" << scales_pad);
  const std::int64_t xs = k + x_pad;
  const std::int64_t ds = k + data_pad;
  const std::int64_t ss = k / kBlockSize + scales_pad;
  HostBuffer x(dtype, Idx(rows * xs), 0x77);
  test::fill_random_blocks(x, rows, k, xs, rng, /*specials=*/true);
  HostBuffer data(DType::kE4M3, Idx(rows * ds), kPoison);
  HostBuffer scales(DType::kE8M0, Idx(rows * ss), kPoison);
  quantize_rows(x.matrix(rows, k, xs), data.matrix(rows, k, ds),
                scales.matrix(rows, k / kBlockSize, ss), rule);
  ExpectQuantizedMatchesOracle(x, rows, k, xs, data, ds, scales, ss, rule);
}

void RunRandomShapes(DType dtype, ScaleRule rule) {
  std::mt19937_64 rng = test::make_rng();
  for (std::int64_t m : kShapesM) {
    for (std::int64_t k : kShapesK) RunRandomQuantize(rng, dtype, rule, m, k, 0, 0, 0);
  }
}

TEST(QuantizeRows, RandomFp32RceilMatchesBruteForceEveryElement) {
  RunRandomShapes(DType::kF32, ScaleRule::kRceil);
}
TEST(QuantizeRows, RandomFp32FloorMatchesBruteForceEveryElement) {
  RunRandomShapes(DType::kF32, ScaleRule::kFloor);
}
TEST(QuantizeRows, RandomBf16RceilMatchesBruteForceEveryElement) {
  RunRandomShapes(DType::kBF16, ScaleRule::kRceil);
}
TEST(QuantizeRows, RandomBf16FloorMatchesBruteForceEveryElement) {
  RunRandomShapes(DType::kBF16, ScaleRule::kFloor);
}
TEST(QuantizeRows, RandomF16RceilMatchesBruteForceEveryElement) {
  RunRandomShapes(DType::kF16, ScaleRule::kRceil);
}
TEST(QuantizeRows, RandomF16FloorMatchesBruteForceEveryElement) {
  RunRandomShapes(DType::kF16, ScaleRule::kFloor);
}

TEST(QuantizeRows, RowStridesLargerThanKAreHonouredAndGapsLeftUntouched) {
  std::mt19937_64 rng = test::make_rng();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(to_string(dtype));
    RunRandomQuantize(rng, dtype, ScaleRule::kRceil, 7, 96, 40, 17, 3);
    RunRandomQuantize(rng, dtype, ScaleRule::kFloor, 5, 544, 1, 32, 1);
    RunRandomQuantize(rng, dtype, ScaleRule::kRceil, 3, 32, 0, 5, 0);
  }
}

TEST(QuantizeRows, DefaultScaleRuleIsRceil) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t rows = 16;
  const std::int64_t k = 256;
  HostBuffer x(DType::kBF16, Idx(rows * k));
  test::fill_random_blocks(x, rows, k, k, rng, false);
  HostBuffer data(DType::kE4M3, Idx(rows * k), kPoison);
  HostBuffer scales(DType::kE8M0, Idx(rows * k / kBlockSize), kPoison);
  quantize_rows(x.view({rows, k}), data.view({rows, k}), scales.view({rows, k / kBlockSize}));
  ExpectQuantizedMatchesOracle(x, rows, k, k, data, k, scales, k / kBlockSize, ScaleRule::kRceil);
}

TEST(QuantizeRows, ThreeDimensionalBSKViewsFlattenIntoRows) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t batch = 3;
  const std::int64_t seq = 5;
  const std::int64_t k = 96;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    SCOPED_TRACE(to_string(dtype));
    // Contiguous [B, S, K] in, [B, S, K] data and [B * S, K/32] scales out.
    HostBuffer x(dtype, Idx(batch * seq * k));
    test::fill_random_blocks(x, batch * seq, k, k, rng, true);
    HostBuffer data(DType::kE4M3, Idx(batch * seq * k), kPoison);
    HostBuffer scales(DType::kE8M0, Idx(batch * seq * k / 32), kPoison);
    quantize_rows(x.view({batch, seq, k}), data.view({batch, seq, k}),
                  scales.view({batch * seq, k / 32}), ScaleRule::kRceil);
    ExpectQuantizedMatchesOracle(x, batch * seq, k, k, data, k, scales, k / 32, ScaleRule::kRceil);

    // [B, S, K] whose rows are 160 elements apart (strides {S * 160, 160, 1}); 3-D scales.
    const std::int64_t rs = 160;
    HostBuffer xs(dtype, Idx(batch * seq * rs), 0x55);
    test::fill_random_blocks(xs, batch * seq, k, rs, rng, true);
    TensorView xv = xs.view({batch, seq, k});
    xv.strides = {seq * rs, rs, 1};
    HostBuffer data2(DType::kE4M3, Idx(batch * seq * k), kPoison);
    HostBuffer scales2(DType::kE8M0, Idx(batch * seq * k / 32), kPoison);
    quantize_rows(xv, data2.view({batch, seq, k}), scales2.view({batch, seq, k / 32}),
                  ScaleRule::kFloor);
    ExpectQuantizedMatchesOracle(xs, batch * seq, k, rs, data2, k, scales2, k / 32,
                                 ScaleRule::kFloor);
  }
}

// x[:, -1:, :] of a contiguous [B, S, K] tensor: shape [B, 1, K], strides {S * K, K, 1}. The
// extent-1 dim never steps, so the view is B rows S * K apart and must be accepted as such.
TEST(QuantizeRows, UnitMiddleDimSliceIsReadAsRowsOfTheOuterStride) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t batch = 4;
  const std::int64_t seq = 5;
  const std::int64_t k = 64;
  HostBuffer x(DType::kBF16, Idx(batch * seq * k));
  test::fill_random_blocks(x, batch * seq, k, k, rng, true);
  TensorView last =
      TensorView::contiguous(static_cast<unsigned char*>(x.data()) + (seq - 1) * k * 2,
                             {batch, 1, k}, DType::kBF16, Location::kHost);
  last.strides = {seq * k, k, 1};
  HostBuffer data(DType::kE4M3, Idx(batch * k), kPoison);
  HostBuffer scales(DType::kE8M0, Idx(batch * k / 32), kPoison);
  quantize_rows(last, data.view({batch, 1, k}), scales.view({batch, k / 32}), ScaleRule::kRceil);
  // The rows it must have read, gathered densely.
  HostBuffer gathered(DType::kBF16, Idx(batch * k));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t c = 0; c < k; ++c) {
      gathered.set_bits(Idx(b * k + c), x.bits(Idx((b * seq + seq - 1) * k + c)));
    }
  }
  ExpectQuantizedMatchesOracle(gathered, batch, k, k, data, k, scales, k / 32, ScaleRule::kRceil);
}

TEST(QuantizeRows, RankOneViewIsASingleRow) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t k = 128;
  HostBuffer x(DType::kF32, Idx(k));
  test::fill_random_blocks(x, 1, k, k, rng, true);
  HostBuffer data(DType::kE4M3, Idx(k), kPoison);
  HostBuffer scales(DType::kE8M0, Idx(k / 32), kPoison);
  quantize_rows(x.view({k}), data.view({k}), scales.view({k / 32}), ScaleRule::kRceil);
  ExpectQuantizedMatchesOracle(x, 1, k, k, data, k, scales, k / 32, ScaleRule::kRceil);
}

TEST(QuantizeRows, ZeroRowsIsANoOpThatWritesNothing) {
  const std::int64_t k = 64;
  HostBuffer x(DType::kBF16, 4 * Idx(k), 0x11);
  HostBuffer data(DType::kE4M3, 4 * Idx(k), kPoison);
  HostBuffer scales(DType::kE8M0, 8, kPoison);
  const std::vector<unsigned char> data_before = data.bytes();
  const std::vector<unsigned char> scales_before = scales.bytes();
  quantize_rows(x.view({0, k}), data.view({0, k}), scales.view({0, k / 32}));
  quantize_rows(x.view({2, 0, k}), data.view({2, 0, k}), scales.view({0, k / 32}),
                ScaleRule::kFloor);
  // Empty views may carry null pointers.
  quantize_rows(TensorView::contiguous(nullptr, {0, k}, DType::kF32, Location::kHost),
                TensorView::contiguous(nullptr, {0, k}, DType::kE4M3, Location::kHost),
                TensorView::contiguous(nullptr, {0, k / 32}, DType::kE8M0, Location::kHost));
  EXPECT_EQ(data.bytes(), data_before);
  EXPECT_EQ(scales.bytes(), scales_before);
}

// --- dequantize_rows -----------------------------------------------------------------------------

// Random codes (all 256, NaN included) and scale bytes: mostly 27..227, plus 0, 1, 254 and 255.
void FillRandomMx(std::mt19937_64& rng, HostBuffer& data, HostBuffer& scales) {
  std::uniform_int_distribution<std::uint32_t> code(0, 255);
  std::uniform_int_distribution<std::uint32_t> scale(27, 227);
  std::uniform_int_distribution<int> kind(0, 19);
  for (std::size_t i = 0; i < data.size(); ++i) data.set_bits(i, code(rng));
  for (std::size_t i = 0; i < scales.size(); ++i) {
    const int k = kind(rng);
    const std::uint32_t extremes[] = {0, 1, 254, 255};
    scales.set_bits(i, k < 4 ? extremes[k] : scale(rng));
  }
}

// value(q) * 2^(b - 127), computed exactly in long double from the test's own decoders.
long double ExactDequantized(std::uint32_t code, std::uint32_t scale) {
  return static_cast<long double>(test::e4m3_value(static_cast<std::uint8_t>(code))) *
         static_cast<long double>(test::e8m0_value(static_cast<std::uint8_t>(scale)));
}

test::BinaryFormat FormatOf(DType dtype) {
  return dtype == DType::kBF16 ? test::kBF16Format
                               : (dtype == DType::kF16 ? test::kF16Format : test::kF32Format);
}

void RunDequantize(std::mt19937_64& rng, DType out_dtype, std::int64_t rows, std::int64_t k,
                   std::int64_t data_pad, std::int64_t scales_pad, std::int64_t out_pad) {
  SCOPED_TRACE(testing::Message() << to_string(out_dtype) << " M = " << rows << ", K = " << k);
  const std::int64_t ds = k + data_pad;
  const std::int64_t ss = k / 32 + scales_pad;
  const std::int64_t os = k + out_pad;
  HostBuffer data(DType::kE4M3, Idx(rows * ds));
  HostBuffer scales(DType::kE8M0, Idx(rows * ss));
  FillRandomMx(rng, data, scales);
  HostBuffer out(out_dtype, Idx(rows * os), 0xFF);  // NaN in every float format
  for (std::int64_t r = 0; r < rows; ++r) {         // gaps get a distinct, non-NaN poison
    for (std::int64_t c = k; c < os; ++c) out.set_bits(Idx(r * os + c), 0x1234);
  }
  dequantize_rows(data.matrix(rows, k, ds), scales.matrix(rows, k / 32, ss),
                  out.matrix(rows, k, os));
  int failures = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < os; ++c) {
      const std::uint32_t got = out.bits(Idx(r * os + c));
      if (c >= k) {
        ASSERT_EQ(got, 0x1234u) << "gap element row " << r << " col " << c << " written";
        continue;
      }
      const std::uint32_t code = data.bits(Idx(r * ds + c));
      const std::uint32_t scale = scales.bits(Idx(r * ss + c / 32));
      const long double exact = ExactDequantized(code, scale);
      const std::uint32_t want = test::round_to_format(exact, FormatOf(out_dtype));
      const bool ok = std::isnan(exact) ? std::isnan(out.value(Idx(r * os + c))) : got == want;
      if (!ok && failures++ < 10) {
        ADD_FAILURE() << "row " << r << " col " << c << ": code " << code << " scale " << scale
                      << " -> bits 0x" << std::hex << got << ", expected 0x" << want;
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(DequantizeRows, Fp32OutputIsExactlyValueTimes2PowBMinus127) {
  std::mt19937_64 rng = test::make_rng();
  // First the exactness claim itself: for every code and every scale byte whose product stays
  // below FLT_MAX, value(q) * 2^(b-127) is an fp32 number (4 significant bits, >= 2^-136).
  for (int b = 0; b < 255; ++b) {
    for (int q = 0; q < 256; ++q) {
      if (q == 0x7F || q == 0xFF) continue;
      const long double exact =
          ExactDequantized(static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(b));
      if (std::fabs(exact) > static_cast<long double>(std::numeric_limits<float>::max())) {
        continue;
      }
      ASSERT_EQ(static_cast<long double>(static_cast<float>(exact)), exact) << q << " " << b;
    }
  }
  for (std::int64_t m : kShapesM) {
    for (std::int64_t k : kShapesK) RunDequantize(rng, DType::kF32, m, k, 0, 0, 0);
  }
}

TEST(DequantizeRows, EveryCodeTimesEveryScaleInFp32) {
  // All 256 x 256 (code, scale) pairs: one row per scale byte, the 256 codes along K.
  const std::int64_t rows = 256;
  const std::int64_t k = 256;
  HostBuffer data(DType::kE4M3, Idx(rows * k));
  HostBuffer scales(DType::kE8M0, Idx(rows * k / 32));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < k; ++c)
      data.set_bits(Idx(r * k + c), static_cast<std::uint32_t>(c));
    for (std::int64_t b = 0; b < k / 32; ++b) {
      scales.set_bits(Idx(r * k / 32 + b), static_cast<std::uint32_t>(r));
    }
  }
  HostBuffer out(DType::kF32, Idx(rows * k), 0xFF);
  dequantize_rows(data.view({rows, k}), scales.view({rows, k / 32}), out.view({rows, k}));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < k; ++c) {
      const float got = out.value(Idx(r * k + c));
      const long double exact =
          ExactDequantized(static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(r));
      if (r == 255 || c == 0x7F || c == 0xFF) {
        ASSERT_TRUE(std::isnan(got)) << "code " << c << " scale " << r;
      } else {
        // Overflow past FLT_MAX (448 * 2^127 and the like) rounds to +-inf.
        ASSERT_EQ(test::float_bits(got), test::round_to_format(exact, test::kF32Format))
            << "code " << c << " scale " << r;
      }
    }
  }
}

TEST(DequantizeRows, Bf16AndF16OutputsAreRoundedOnceToNearestEven) {
  std::mt19937_64 rng = test::make_rng();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (std::int64_t m : kShapesM) {
      for (std::int64_t k : kShapesK) RunDequantize(rng, dtype, m, k, 0, 0, 0);
    }
  }
}

TEST(DequantizeRows, StridedRowsLeaveGapsUntouched) {
  std::mt19937_64 rng = test::make_rng();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    RunDequantize(rng, dtype, 7, 96, 13, 2, 9);
    RunDequantize(rng, dtype, 4, 544, 0, 1, 1);
  }
}

TEST(DequantizeRows, ThreeDimensionalViewsMatchTheFlattenedCall) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t batch = 2;
  const std::int64_t seq = 3;
  const std::int64_t k = 64;
  HostBuffer data(DType::kE4M3, Idx(batch * seq * k));
  HostBuffer scales(DType::kE8M0, Idx(batch * seq * k / 32));
  FillRandomMx(rng, data, scales);
  HostBuffer out3(DType::kF32, Idx(batch * seq * k), 0xFF);
  HostBuffer out2(DType::kF32, Idx(batch * seq * k), 0xFF);
  dequantize_rows(data.view({batch, seq, k}), scales.view({batch * seq, k / 32}),
                  out3.view({batch, seq, k}));
  dequantize_rows(data.view({batch * seq, k}), scales.view({batch * seq, k / 32}),
                  out2.view({batch * seq, k}));
  EXPECT_EQ(out3.bytes(), out2.bytes());
  for (std::int64_t i = 0; i < batch * seq * k; ++i) {
    const long double exact = ExactDequantized(data.bits(Idx(i)), scales.bits(Idx(i / 32)));
    if (std::isnan(exact)) {
      EXPECT_TRUE(std::isnan(out3.value(Idx(i))));
    } else {
      EXPECT_EQ(out3.bits(Idx(i)), test::round_to_format(exact, test::kF32Format)) << i;
    }
  }
}

TEST(DequantizeRows, ZeroRowsWritesNothing) {
  HostBuffer data(DType::kE4M3, 64);
  HostBuffer scales(DType::kE8M0, 2);
  HostBuffer out(DType::kBF16, 64, kPoison);
  const std::vector<unsigned char> before = out.bytes();
  dequantize_rows(data.view({0, 64}), scales.view({0, 2}), out.view({0, 64}));
  dequantize_rows(data.view({0, 2, 64}), scales.view({0, 2}), out.view({0, 2, 64}));
  EXPECT_EQ(out.bytes(), before);
}

// --- Round trip --------------------------------------------------------------------------------

// Under RCEIL no element saturates, so quantize -> dequantize moves each finite value by at most
// half the E4M3 step around its scaled value: 2^(max(floor(log2|s|), -6) - 3) / 2 in the scaled
// domain, times the block's scale.
TEST(QuantizeDequantize, RceilRoundTripErrorIsAtMostHalfAnE4M3Step) {
  std::mt19937_64 rng = test::make_rng();
  const std::int64_t rows = 50;
  const std::int64_t k = 256;
  HostBuffer x(DType::kF32, Idx(rows * k));
  test::fill_random_blocks(x, rows, k, k, rng, /*specials=*/false);
  HostBuffer data(DType::kE4M3, Idx(rows * k));
  HostBuffer scales(DType::kE8M0, Idx(rows * k / 32));
  HostBuffer back(DType::kF32, Idx(rows * k), 0xFF);
  quantize_rows(x.view({rows, k}), data.view({rows, k}), scales.view({rows, k / 32}));
  dequantize_rows(data.view({rows, k}), scales.view({rows, k / 32}), back.view({rows, k}));
  for (std::int64_t i = 0; i < rows * k; ++i) {
    const int b = static_cast<int>(scales.bits(Idx(i / 32)));
    const double v = x.value(Idx(i));
    const double s = std::fabs(v) * std::ldexp(1.0, 127 - b);  // the scaled magnitude
    const int binade = s > 0 ? std::max(std::ilogb(s), -6) : -6;
    const double half_step = std::ldexp(1.0, binade - 3 - 1 + b - 127);
    ASSERT_LE(std::fabs(static_cast<double>(back.value(Idx(i))) - v), half_step)
        << "element " << i << " = " << std::hexfloat << v << " scale " << std::dec << b;
  }
}

}  // namespace
}  // namespace mxlinear
