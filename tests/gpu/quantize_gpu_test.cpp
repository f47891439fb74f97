// The GPU activation quantizer must equal the CPU reference byte for byte.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "device/kernels/prefill/activation_bf16.hpp"
#include "device/kernels/quantize/quantize.hpp"
#include "gpu/gpu_support.hpp"
#include "mxlinear/quantize.hpp"
#include "support/random.hpp"

namespace mxlinear::test {
namespace {

// The quantize pass over `rows` x `k` activation rows `ld_x` elements apart, into dense e4m3
// rows and [rows, k / 32] scales (their pointers are the caller's to set).
device::QuantizeParams dense_quantize(const void* x, std::int64_t ld_x, std::int64_t rows,
                                      std::int64_t k) {
  device::QuantizeParams p;
  p.x = x;
  p.ld_x = ld_x;
  p.ld_q = k;
  p.ld_s = k / 32;
  p.m = static_cast<int>(rows);
  p.k = static_cast<int>(k);
  return p;
}

// The bf16 pre-pass over a dense [rows, k] e4m3 activation and its [rows, k / 32] scales.
device::ActivationBf16Params dense_prepass(const std::uint8_t* q, const std::uint8_t* scales,
                                           void* out, std::int64_t rows, std::int64_t k) {
  device::ActivationBf16Params a;
  a.q = q;
  a.scales = scales;
  a.ld_q = k;
  a.ld_scales = k / 32;
  a.out = out;
  a.ld_out = k;
  a.m = static_cast<int>(rows);
  a.k = static_cast<int>(k);
  return a;
}

std::vector<std::uint8_t> encode_as(const std::vector<float>& values, DType dtype) {
  std::vector<std::uint8_t> raw(values.size() * element_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kBF16) {
      const __nv_bfloat16 v = __float2bfloat16_rn(values[i]);
      std::memcpy(raw.data() + 2 * i, &v, 2);
    } else if (dtype == DType::kF16) {
      const __half v = __float2half_rn(values[i]);
      std::memcpy(raw.data() + 2 * i, &v, 2);
    } else {
      std::memcpy(raw.data() + 4 * i, &values[i], 4);
    }
  }
  return raw;
}

// Quantizes [rows, k] (row stride ld_x elements) on CPU and GPU and compares every byte.
void expect_gpu_matches_cpu(const std::vector<float>& values, std::int64_t rows, std::int64_t k,
                            std::int64_t ld_x, DType dtype, ScaleRule rule) {
  SCOPED_TRACE(::testing::Message()
               << "rows=" << rows << " k=" << k << " ld_x=" << ld_x << " dtype=" << to_string(dtype)
               << " rule=" << (rule == ScaleRule::kRceil ? "rceil" : "floor"));
  std::vector<std::uint8_t> raw = encode_as(values, dtype);
  const TensorView host_x = TensorView::matrix(raw.data(), rows, k, ld_x, dtype, Location::kHost);
  std::vector<std::uint8_t> cpu_q(static_cast<std::size_t>(rows * k));
  std::vector<std::uint8_t> cpu_s(static_cast<std::size_t>(rows * k / 32));
  quantize_rows(
      host_x, TensorView::contiguous(cpu_q.data(), {rows, k}, DType::kE4M3, Location::kHost),
      TensorView::contiguous(cpu_s.data(), {rows, k / 32}, DType::kE8M0, Location::kHost), rule);

  DeviceBuffer x = DeviceBuffer::from(raw);
  DeviceBuffer q(cpu_q.size());
  DeviceBuffer s(cpu_s.size());
  // Twice, poisoned with 0xFF and with 0x00: each is the right byte somewhere (a NaN block's
  // scale, an all-zero block's data), so one run alone would pass where a byte was never written.
  for (const int poison : {0xFF, 0x00}) {
    SCOPED_TRACE(::testing::Message() << "outputs poisoned with " << poison);
    q.fill(static_cast<unsigned char>(poison));
    s.fill(static_cast<unsigned char>(poison));
    quantize(TensorView::matrix(x.get(), rows, k, ld_x, dtype, Location::kDevice),
             TensorView::contiguous(q.get(), {rows, k}, DType::kE4M3, Location::kDevice),
             TensorView::contiguous(s.get(), {rows, k / 32}, DType::kE8M0, Location::kDevice),
             nullptr, rule);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto gpu_q = q.download<std::uint8_t>(cpu_q.size());
    const auto gpu_s = s.download<std::uint8_t>(cpu_s.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < cpu_q.size() && bad < 5; ++i) {
      if (gpu_q[i] != cpu_q[i]) {
        ++bad;
        ADD_FAILURE() << "data byte " << i << ": gpu " << int(gpu_q[i]) << " cpu " << int(cpu_q[i]);
      }
    }
    for (std::size_t i = 0; i < cpu_s.size() && bad < 10; ++i) {
      if (gpu_s[i] != cpu_s[i]) {
        ++bad;
        ADD_FAILURE() << "scale " << i << ": gpu " << int(gpu_s[i]) << " cpu " << int(cpu_s[i]);
      }
    }
  }
}

// Values of very different magnitudes per block, so scales cover a wide range.
std::vector<float> random_values(std::int64_t rows, std::int64_t ld_x, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 30);
  std::vector<float> v(static_cast<std::size_t>(rows * ld_x));
  float block_scale = 1.0f;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i % 32 == 0) block_scale = std::ldexp(1.0f, exponent(rng));
    v[i] = normal(rng) * block_scale;
  }
  return v;
}

TEST(QuantizeGpu, RandomInputsBitExactForEveryDtypeRuleAndShape) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kFloor}) {
      for (auto [rows, k] :
           {std::pair<std::int64_t, std::int64_t>{1, 32}, {7, 96}, {100, 544}, {1000, 2048}}) {
        expect_gpu_matches_cpu(random_values(rows, k, rng), rows, k, k, dtype, rule);
      }
    }
  }
}

TEST(QuantizeGpu, StridedAndUnalignedRowsTakeTheScalarPathBitExact) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    // ld_x = 96 + 3 elements breaks 16-byte alignment of every row but the first.
    expect_gpu_matches_cpu(random_values(33, 99, rng), 33, 96, 99, dtype, ScaleRule::kRceil);
  }
}

TEST(QuantizeGpu, EdgeBlocksBitExact) {
  MXL_REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> blocks;
  blocks.push_back(std::vector<float>(32, 0.0f));  // all zero
  std::vector<float> huge(32, 1.0f);
  huge[5] = 1e30f;
  blocks.push_back(huge);  // one huge value
  std::vector<float> sub(32);
  for (int i = 0; i < 32; ++i) sub[i] = std::ldexp(static_cast<float>(i - 16), -140);
  blocks.push_back(sub);  // fp32 subnormals only
  for (int e : {-20, 0, 7, 20}) {
    std::vector<float> straddle(32);
    const float edge = std::ldexp(448.0f, e);
    for (int i = 0; i < 32; ++i) {
      straddle[i] =
          i % 3 == 0 ? std::nextafter(edge, inf) : (i % 3 == 1 ? edge : std::nextafter(edge, 0.0f));
    }
    blocks.push_back(straddle);  // around 448 * 2^e
  }
  std::vector<float> with_nan(32, 2.0f);
  with_nan[31] = nan;
  blocks.push_back(with_nan);
  std::vector<float> with_inf(32, -3.0f);
  with_inf[0] = inf;
  blocks.push_back(with_inf);
  std::vector<float> with_ninf(32, 0.5f);
  with_ninf[17] = -inf;
  blocks.push_back(with_ninf);
  std::vector<float> at_max(32, 1.0f);
  at_max[3] = FLT_MAX;
  at_max[4] = -FLT_MAX;
  blocks.push_back(at_max);
  blocks.push_back(std::vector<float>(32, FLT_MIN));
  std::vector<float> values;
  for (const auto& b : blocks) values.insert(values.end(), b.begin(), b.end());
  const auto rows = static_cast<std::int64_t>(blocks.size());
  for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kFloor}) {
    // One block per row, and the same blocks as one long row.
    expect_gpu_matches_cpu(values, rows, 32, 32, DType::kF32, rule);
    expect_gpu_matches_cpu(values, 1, rows * 32, rows * 32, DType::kF32, rule);
  }
  // bf16 and fp16 see the same blocks after their own rounding (fp16 overflows to Inf).
  expect_gpu_matches_cpu(values, rows, 32, 32, DType::kBF16, ScaleRule::kRceil);
  expect_gpu_matches_cpu(values, rows, 32, 32, DType::kF16, ScaleRule::kRceil);
}

// More groups than two sweeps of the grid (8 CTAs per SM), with groups per row (132) that do not
// divide the grid's stride: every position advance, including the carry into the next row.
TEST(QuantizeGpu, InputLargerThanTheGridIsWalkedBitExact) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  expect_gpu_matches_cpu(random_values(4100, 1056, rng), 4100, 1056, 1056, DType::kBF16,
                         ScaleRule::kRceil);
}

// The pass that also dequantizes (for the prefill kernel) writes the same e4m3 bytes and scales
// as the plain pass, and bf16 values equal to the activation pre-pass run on them, for aligned
// (vector) and strided (scalar) input of every dtype, NaN and Inf blocks included.
TEST(QuantizeGpu, DequantizingPassEqualsQuantizeThenPrePass) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (const std::int64_t ld_x : {std::int64_t{544}, std::int64_t{547}}) {
      SCOPED_TRACE(::testing::Message() << to_string(dtype) << " ld_x=" << ld_x);
      const std::int64_t rows = 37, k = 544;
      std::vector<float> values = random_values(rows, ld_x, rng);
      values[5] = std::numeric_limits<float>::quiet_NaN();
      values[static_cast<std::size_t>(3 * ld_x + 70)] = std::numeric_limits<float>::infinity();
      const DeviceBuffer x = DeviceBuffer::from(encode_as(values, dtype));
      const auto count = static_cast<std::size_t>(rows * k);
      DeviceBuffer q_plain(count), s_plain(count / 32), q(count), s(count / 32), dq(count * 2);
      for (DeviceBuffer* b : {&q_plain, &s_plain, &q, &s, &dq}) b->poison();
      device::QuantizeParams p = dense_quantize(x.get(), ld_x, rows, k);
      p.in_type = dtype == DType::kBF16
                      ? device::InType::kBF16
                      : (dtype == DType::kF16 ? device::InType::kF16 : device::InType::kF32);
      p.q = q_plain.bytes();
      p.scales = s_plain.bytes();
      ASSERT_EQ(device::launch_quantize(p, nullptr), cudaSuccess);
      p.q = q.bytes();
      p.scales = s.bytes();
      p.dequantized = dq.get();
      p.ld_dq = k;
      ASSERT_EQ(device::launch_quantize(p, nullptr), cudaSuccess);
      DeviceBuffer prepass(count * 2);
      prepass.poison();
      ASSERT_EQ(
          device::launch_activation_bf16(
              dense_prepass(q_plain.bytes(), s_plain.bytes(), prepass.get(), rows, k), nullptr),
          cudaSuccess);
      // Only the bf16 values (what linear() asks for when the prefill kernel runs).
      DeviceBuffer dq_only(count * 2);
      dq_only.poison();
      p.q = nullptr;
      p.scales = nullptr;
      p.dequantized = dq_only.get();
      ASSERT_EQ(device::launch_quantize(p, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(q.download<std::uint8_t>(count), q_plain.download<std::uint8_t>(count));
      EXPECT_EQ(s.download<std::uint8_t>(count / 32), s_plain.download<std::uint8_t>(count / 32));
      EXPECT_EQ(dq.download<std::uint16_t>(count), prepass.download<std::uint16_t>(count));
      EXPECT_EQ(dq_only.download<std::uint16_t>(count), prepass.download<std::uint16_t>(count));
    }
  }
}

// Both passes that run before the prefill GEMM zero the words it asks for (its stream-K
// flags), and only those: 300 words, more than one block's threads, between two poisoned guards.
TEST(QuantizeGpu, BothPassesZeroTheWordsTheNextKernelAsksFor) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  const std::int64_t rows = 3, k = 64;
  const auto count = static_cast<std::size_t>(rows * k);
  const DeviceBuffer x = DeviceBuffer::from(encode_as(random_values(rows, k, rng), DType::kBF16));
  DeviceBuffer q(count), s(count / 32), dq(count * 2);
  constexpr int kWords = 300;
  for (const bool prepass : {false, true}) {
    SCOPED_TRACE(prepass ? "activation pre-pass" : "quantize pass");
    DeviceBuffer words((kWords + 2) * 4);
    words.poison();
    const device::ZeroedWords zero{reinterpret_cast<std::uint32_t*>(words.bytes()) + 1, kWords};
    if (prepass) {
      device::ActivationBf16Params a = dense_prepass(q.bytes(), s.bytes(), dq.get(), rows, k);
      a.zero_for_next = zero;
      ASSERT_EQ(device::launch_activation_bf16(a, nullptr), cudaSuccess);
    } else {
      device::QuantizeParams p = dense_quantize(x.get(), k, rows, k);
      p.q = q.bytes();
      p.scales = s.bytes();
      p.dequantized = dq.get();
      p.ld_dq = k;
      p.zero_for_next = zero;
      ASSERT_EQ(device::launch_quantize(p, nullptr), cudaSuccess);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto got = words.download<std::uint32_t>(kWords + 2);
    EXPECT_EQ(got.front(), 0xFFFFFFFFu);
    EXPECT_EQ(got.back(), 0xFFFFFFFFu);
    EXPECT_EQ(std::count(got.begin() + 1, got.end() - 1, 0u), kWords);
  }
}

// The kernel stores 16 bytes at a time: outputs it cannot store that way are refused before
// anything is written, not written misaligned.
TEST(QuantizeGpu, LaunchRefusesOutputRowsThatAreNotSixteenByteAligned) {
  MXL_REQUIRE_GPU();
  const std::int64_t rows = 4, k = 64;
  const auto count = static_cast<std::size_t>(rows * k);
  const DeviceBuffer x =
      DeviceBuffer::from(encode_as(std::vector<float>(count, 1.5f), DType::kBF16));
  DeviceBuffer q(count + 64), s(count), dq(count * 2 + 64);
  for (DeviceBuffer* b : {&q, &s, &dq}) b->poison();
  const auto q_before = q.download<std::uint8_t>(count + 64);
  const auto dq_before = dq.download<std::uint8_t>(count * 2 + 64);
  device::QuantizeParams p = dense_quantize(x.get(), k, rows, k);
  p.scales = s.bytes();
  p.q = q.bytes() + 8;  // misaligned start
  p.ld_q = k;
  EXPECT_EQ(device::launch_quantize(p, nullptr), cudaErrorInvalidValue);
  p.q = q.bytes();
  p.ld_q = k + 8;  // misaligned rows
  EXPECT_EQ(device::launch_quantize(p, nullptr), cudaErrorInvalidValue);
  p.ld_q = k;
  p.dequantized = dq.bytes() + 4;  // misaligned dequantized start
  p.ld_dq = k;
  EXPECT_EQ(device::launch_quantize(p, nullptr), cudaErrorInvalidValue);
  p.dequantized = dq.get();
  p.ld_dq = k + 4;  // 8-byte rows of the dequantized copy
  EXPECT_EQ(device::launch_quantize(p, nullptr), cudaErrorInvalidValue);
  p.ld_dq = k;
  p.q = nullptr;  // e4m3 data without its scales
  EXPECT_EQ(device::launch_quantize(p, nullptr), cudaErrorInvalidValue);
  p.scales = nullptr;
  p.dequantized = nullptr;  // no output at all
  EXPECT_EQ(device::launch_quantize(p, nullptr), cudaErrorInvalidValue);
  p.q = q.bytes();
  p.scales = s.bytes();
  p.dequantized = dq.get();
  p.ld_dq = k + 4;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(q.download<std::uint8_t>(count + 64), q_before);
  EXPECT_EQ(dq.download<std::uint8_t>(count * 2 + 64), dq_before);
  p.ld_dq = k;  // all aligned: runs
  EXPECT_EQ(device::launch_quantize(p, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(QuantizeGpu, ZeroRowsIsANoOp) {
  MXL_REQUIRE_GPU();
  DeviceBuffer q(64);
  q.poison();
  quantize(TensorView::contiguous(q.get(), {0, 64}, DType::kBF16, Location::kDevice),
           TensorView::contiguous(q.get(), {0, 64}, DType::kE4M3, Location::kDevice),
           TensorView::contiguous(q.get(), {0, 2}, DType::kE8M0, Location::kDevice), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (std::uint8_t b : q.download<std::uint8_t>(64)) EXPECT_EQ(b, 0xFF);
}

}  // namespace
}  // namespace mxlinear::test
