// Every bad-input path of the host entry points throws mxlinear::Error with kInvalidArgument, a
// message naming the argument, the value it had and what was expected, and leaves the caller's
// output untouched.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "host/diagnostics.hpp"
#include "mxlinear/error.hpp"
#include "mxlinear/linear.hpp"
#include "mxlinear/quantize.hpp"
#include "mxlinear/reference.hpp"
#include "mxlinear/selection.hpp"
#include "mxlinear/tensor.hpp"
#include "support/host_buffer.hpp"

namespace mxlinear {
namespace {

using test::HostBuffer;
using ::testing::HasSubstr;

constexpr std::int64_t kM = 6;  // also viewed as [2, 3, K]
constexpr std::int64_t kN = 4;
constexpr std::int64_t kK = 64;

std::size_t Idx(std::int64_t i) { return static_cast<std::size_t>(i); }

// Runs `call`, which must throw Error(kInvalidArgument) about `argument` with every one of
// `fragments` in its message, and must leave every buffer in `watched` as it was.
void ExpectInvalidArgument(const std::function<void()>& call, const std::string& argument,
                           const std::vector<std::string>& fragments,
                           const std::vector<const HostBuffer*>& watched) {
  std::vector<std::vector<unsigned char>> before;
  for (const HostBuffer* b : watched) before.push_back(b->bytes());
  try {
    call();
    ADD_FAILURE() << "no exception; expected one about '" << argument << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_THAT(std::string(e.what()), HasSubstr("'" + argument + "'"));
    for (const std::string& fragment : fragments) {
      EXPECT_THAT(std::string(e.what()), HasSubstr(fragment));
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-mxlinear exception: " << e.what();
  }
  for (std::size_t i = 0; i < watched.size(); ++i) {
    EXPECT_EQ(watched[i]->bytes(), before[i]) << "buffer " << i << " was written before the throw";
  }
}

// Valid operands for x [6, 64] (bf16 or pre-quantized) times W [4, 64]^T + bias [4] -> out [6, 4];
// each test breaks exactly one of them.
class LinearErrors : public ::testing::Test {
 protected:
  LinearErrors()
      : x_buf_(DType::kBF16, Idx(2 * kM * kK), 0x3F),
        xq_data_buf_(DType::kE4M3, Idx(2 * kM * kK), 0x38),
        xq_scales_buf_(DType::kE8M0, Idx(2 * kM * kK / 32), 127),
        w_data_buf_(DType::kE4M3, Idx(2 * kN * kK), 0x38),
        w_scales_buf_(DType::kE8M0, Idx(2 * kN * kK / 32), 127),
        bias_buf_(DType::kBF16, Idx(2 * kN), 0),
        out_buf_(DType::kF32, Idx(2 * kM * kN), 0xFF) {
    x = x_buf_.view({kM, kK});
    xq.data = xq_data_buf_.view({kM, kK});
    xq.scales = xq_scales_buf_.view({kM, kK / 32});
    xq.original_dtype = DType::kBF16;
    weight.data = w_data_buf_.view({kN, kK});
    weight.scales = w_scales_buf_.view({kN, kK / 32});
    bias = bias_buf_.view({kN});
    out = out_buf_.view({kM, kN});
  }

  void CallBf16() { reference_linear(x, weight, bias, out); }
  void CallQuantized() { reference_linear(xq, weight, bias, out); }

  // Both entry points must reject the (shared) broken operand.
  void ExpectBothReject(const std::string& argument, const std::vector<std::string>& fragments) {
    SCOPED_TRACE("argument " + argument);
    ExpectInvalidArgument([&] { CallBf16(); }, argument, fragments, {&out_buf_});
    ExpectInvalidArgument([&] { CallQuantized(); }, argument, fragments, {&out_buf_});
    std::vector<double> f64(Idx(kM * kN), 7.0);
    const std::vector<double> f64_before = f64;
    if (argument != "out") {  // the fp64 entry point has no out view to break
      EXPECT_THROW(reference_linear_f64(xq, weight, bias, f64.data()), Error);
      EXPECT_EQ(f64, f64_before);
    }
  }
  void ExpectBf16Rejects(const std::string& argument, const std::vector<std::string>& fragments) {
    ExpectInvalidArgument([&] { CallBf16(); }, argument, fragments, {&out_buf_});
  }
  void ExpectQuantizedRejects(const std::string& argument,
                              const std::vector<std::string>& fragments) {
    ExpectInvalidArgument([&] { CallQuantized(); }, argument, fragments, {&out_buf_});
    std::vector<double> f64(Idx(kM * kN), 7.0);
    EXPECT_THROW(reference_linear_f64(xq, weight, bias, f64.data()), Error);
    EXPECT_EQ(f64, std::vector<double>(Idx(kM * kN), 7.0));
  }

  HostBuffer x_buf_, xq_data_buf_, xq_scales_buf_, w_data_buf_, w_scales_buf_, bias_buf_, out_buf_;
  TensorView x;
  QuantizedActivation xq;
  MxWeight weight;
  std::optional<TensorView> bias;
  TensorView out;
};

TEST_F(LinearErrors, ValidOperandsAreAcceptedByBothEntryPoints) {
  // The baseline every other test breaks one thing of: it must not throw.
  EXPECT_NO_THROW(CallBf16());
  EXPECT_NO_THROW(CallQuantized());
  x = x_buf_.view({2, 3, kK});
  out = out_buf_.view({2, 3, kN});
  EXPECT_NO_THROW(CallBf16());
  bias = std::nullopt;
  EXPECT_NO_THROW(CallQuantized());
}

TEST_F(LinearErrors, KNotAMultipleOf32) {
  x = x_buf_.view({kM, 48});
  xq.data = xq_data_buf_.view({kM, 48});
  xq.scales = xq_scales_buf_.view({kM, 1});
  weight.data = w_data_buf_.view({kN, 48});
  weight.scales = w_scales_buf_.view({kN, 1});
  ExpectBf16Rejects("weight.data", {"K = 48", "[4, 48]", "multiple of 32"});
  ExpectQuantizedRejects("x.data", {"K = 48", "[6, 48]", "multiple of 32"});
}

TEST_F(LinearErrors, KOfXDiffersFromKOfWeight) {
  x = x_buf_.view({kM, 96});
  ExpectBf16Rejects("x", {"[6, 96]", "K = 96", "expected K = 64"});
  xq.data = xq_data_buf_.view({kM, 96});
  xq.scales = xq_scales_buf_.view({kM, 3});
  ExpectQuantizedRejects("x", {"K = 96", "expected K = 64"});
}

TEST_F(LinearErrors, KIsZero) {
  weight.data = w_data_buf_.view({kN, 0});
  weight.scales = w_scales_buf_.view({kN, 0});
  x = x_buf_.view({kM, 0});
  ExpectBf16Rejects("weight.data", {"K = 0", "positive multiple of 32"});
  xq.data = xq_data_buf_.view({kM, 0});
  xq.scales = xq_scales_buf_.view({kM, 0});
  ExpectQuantizedRejects("x.data", {"K = 0", "positive multiple of 32"});
}

TEST_F(LinearErrors, WeightScalesShapeWrong) {
  weight.scales = w_scales_buf_.view({kN, 3});
  ExpectBothReject("weight.scales", {"[4, 3]", "expected [4, 2]"});
  weight.scales = w_scales_buf_.view({kN + 1, 2});
  ExpectBothReject("weight.scales", {"[5, 2]", "expected [4, 2]"});
}

TEST_F(LinearErrors, ActivationScalesShapeWrong) {
  xq.scales = xq_scales_buf_.view({kM, 1});
  ExpectQuantizedRejects("x.scales", {"[6, 1]", "expected [6, 2]"});
  xq.scales = xq_scales_buf_.view({kM - 1, 2});
  ExpectQuantizedRejects("x.scales", {"[5, 2]", "expected [6, 2]"});
}

TEST_F(LinearErrors, WrongDTypeForX) {
  x.dtype = DType::kE4M3;
  ExpectBf16Rejects("x", {"dtype e4m3", "expected bf16, fp16 or fp32"});
  xq.data.dtype = DType::kBF16;
  ExpectQuantizedRejects("x.data", {"dtype bf16", "expected e4m3"});
}

TEST_F(LinearErrors, WrongDTypeForActivationScales) {
  xq.scales.dtype = DType::kE4M3;
  ExpectQuantizedRejects("x.scales", {"dtype e4m3", "expected e8m0"});
}

TEST_F(LinearErrors, WrongDTypeForWeight) {
  weight.data.dtype = DType::kF16;
  ExpectBothReject("weight.data", {"dtype fp16", "expected e4m3"});
}

TEST_F(LinearErrors, WrongDTypeForWeightScales) {
  weight.scales.dtype = DType::kF32;
  ExpectBothReject("weight.scales", {"dtype fp32", "expected e8m0"});
}

TEST_F(LinearErrors, WrongDTypeForBias) {
  bias->dtype = DType::kF16;
  ExpectBothReject("bias", {"dtype fp16", "expected bf16 or fp32"});
}

TEST_F(LinearErrors, WrongDTypeForOut) {
  out.dtype = DType::kE8M0;
  ExpectBothReject("out", {"dtype e8m0", "expected bf16, fp16 or fp32"});
}

TEST_F(LinearErrors, NullDataPointerWithNonZeroSize) {
  x.data = nullptr;
  ExpectBf16Rejects("x", {"null pointer", "[6, 64]", "384 elements"});
  x = x_buf_.view({kM, kK});
  xq.data.data = nullptr;
  ExpectQuantizedRejects("x.data", {"null pointer", "[6, 64]"});
  xq.data = xq_data_buf_.view({kM, kK});
  xq.scales.data = nullptr;
  ExpectQuantizedRejects("x.scales", {"null pointer", "[6, 2]"});
  xq.scales = xq_scales_buf_.view({kM, 2});
  weight.data.data = nullptr;
  ExpectBothReject("weight.data", {"null pointer", "[4, 64]", "256 elements"});
  weight.data = w_data_buf_.view({kN, kK});
  weight.scales.data = nullptr;
  ExpectBothReject("weight.scales", {"null pointer", "[4, 2]"});
  weight.scales = w_scales_buf_.view({kN, 2});
  bias->data = nullptr;
  ExpectBothReject("bias", {"null pointer", "[4]"});
  bias = bias_buf_.view({kN});
  out.data = nullptr;
  ExpectBothReject("out", {"null pointer", "[6, 4]", "24 elements"});
}

TEST_F(LinearErrors, DeviceLocationPassedToTheHostReference) {
  const std::vector<std::string> fragments = {"device memory", "expected host memory"};
  x.location = Location::kDevice;
  ExpectBf16Rejects("x", fragments);
  x.location = Location::kHost;
  xq.data.location = Location::kDevice;
  ExpectQuantizedRejects("x.data", fragments);
  xq.data.location = Location::kHost;
  xq.scales.location = Location::kDevice;
  ExpectQuantizedRejects("x.scales", fragments);
  xq.scales.location = Location::kHost;
  weight.data.location = Location::kDevice;
  ExpectBothReject("weight.data", fragments);
  weight.data.location = Location::kHost;
  weight.scales.location = Location::kDevice;
  ExpectBothReject("weight.scales", fragments);
  weight.scales.location = Location::kHost;
  bias->location = Location::kDevice;
  ExpectBothReject("bias", fragments);
  bias->location = Location::kHost;
  out.location = Location::kDevice;
  ExpectBothReject("out", fragments);
}

TEST_F(LinearErrors, LastDimStrideNotOne) {
  x.strides[1] = 2;
  ExpectBf16Rejects("x", {"stride 2 on its last dim", "expected 1"});
  x = x_buf_.view({kM, kK});
  xq.data.strides[1] = 2;
  ExpectQuantizedRejects("x.data", {"stride 2 on its last dim", "expected 1"});
  xq.data = xq_data_buf_.view({kM, kK});
  weight.data.strides[1] = 2;
  ExpectBothReject("weight.data", {"stride 2 on its last dim", "expected 1"});
  weight.data = w_data_buf_.view({kN, kK});
  out.strides[1] = 3;
  ExpectBothReject("out", {"stride 3 on its last dim", "expected 1"});
}

TEST_F(LinearErrors, LeadingStridesThatDoNotFlattenIntoRows) {
  // [2, 3, 64] whose batch stride (3 * 64 + 32) is not 3 rows of 64.
  x = x_buf_.view({2, 3, kK});
  x.strides = {3 * kK + 32, kK, 1};
  ExpectBf16Rejects("x", {"[2, 3, 64]", "do not flatten", "expected each leading dim's stride"});
  x = x_buf_.view({kM, kK});
  out = out_buf_.view({2, 3, kN});
  out.strides = {2 * kN, kN, 1};  // batches overlap
  ExpectBothReject("out", {"[2, 3, 4]", "do not flatten"});
}

TEST_F(LinearErrors, RowStrideSmallerThanTheRow) {
  x = x_buf_.matrix(kM, kK, 32);
  ExpectBf16Rejects("x", {"row stride 32", "at least the row length 64"});
  x = x_buf_.view({kM, kK});
  weight.data = w_data_buf_.matrix(kN, kK, kK - 1);
  ExpectBothReject("weight.data", {"row stride 63", "at least the row length 64"});
  weight.data = w_data_buf_.view({kN, kK});
  out = out_buf_.matrix(kM, kN, 0);
  ExpectBothReject("out", {"row stride 0", "at least the row length 4"});
}

TEST_F(LinearErrors, BiasShapeWrong) {
  bias = bias_buf_.view({kN + 1});
  ExpectBothReject("bias", {"[5]", "expected [4] (N)"});
  bias = bias_buf_.view({1, kN});
  ExpectBothReject("bias", {"[1, 4]", "expected [4] (N)"});
}

TEST_F(LinearErrors, OutShapeWrong) {
  out = out_buf_.view({kM, kN + 1});
  ExpectBothReject("out", {"[6, 5]", "expected 6 rows of N = 4"});
  out = out_buf_.view({kM + 1, kN});
  ExpectBothReject("out", {"[7, 4]", "expected 6 rows of N = 4"});
}

TEST_F(LinearErrors, NIsZero) {
  weight.data = w_data_buf_.view({0, kK});
  weight.scales = w_scales_buf_.view({0, 2});
  out = out_buf_.view({kM, 0});
  bias = std::nullopt;
  ExpectBothReject("weight.data", {"N = 0", "[0, 64]", "expected N >= 1"});
}

TEST_F(LinearErrors, RankZeroOrAboveThree) {
  x.rank = 0;
  ExpectBf16Rejects("x", {"rank 0", "expected 1 to 3"});
  x.rank = 4;
  ExpectBf16Rejects("x", {"rank 4", "expected 1 to 3"});
  x = x_buf_.view({kM, kK});
  out.rank = 4;
  ExpectBothReject("out", {"rank 4", "expected 1 to 3"});
  out = out_buf_.view({kM, kN});
  weight.data = w_data_buf_.view({1, kN, kK});
  ExpectBothReject("weight.data", {"rank 3", "[1, 4, 64]", "expected rank 2 [N, K]"});
}

TEST_F(LinearErrors, NegativeExtent) {
  out.shape[0] = -1;
  ExpectBothReject("out", {"[-1, 4]", "expected every extent in 0.."});
}

TEST(TensorViewErrors, ContiguousWithRankAboveThreeThrows) {
  try {
    (void)TensorView::contiguous(nullptr, {1, 2, 3, 4}, DType::kF32, Location::kHost);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.argument(), "shape");
    EXPECT_THAT(std::string(e.what()), HasSubstr("rank 4"));
    EXPECT_THAT(std::string(e.what()), HasSubstr("expected at most 3"));
  }
}

// --- quantize_rows / dequantize_rows
// ---------------------------------------------------------------

class QuantizeErrors : public ::testing::Test {
 protected:
  QuantizeErrors()
      : x_buf_(DType::kF32, Idx(2 * kM * kK), 0),
        data_buf_(DType::kE4M3, Idx(2 * kM * kK), 0xCD),
        scales_buf_(DType::kE8M0, Idx(2 * kM * kK / 32), 0xCD),
        out_buf_(DType::kBF16, Idx(2 * kM * kK), 0xEE) {
    x = x_buf_.view({kM, kK});
    data = data_buf_.view({kM, kK});
    scales = scales_buf_.view({kM, kK / 32});
    out = out_buf_.view({kM, kK});
  }
  void ExpectQuantizeRejects(const std::string& argument,
                             const std::vector<std::string>& fragments) {
    ExpectInvalidArgument([&] { quantize_rows(x, data, scales); }, argument, fragments,
                          {&data_buf_, &scales_buf_});
  }
  void ExpectDequantizeRejects(const std::string& argument,
                               const std::vector<std::string>& fragments) {
    ExpectInvalidArgument([&] { dequantize_rows(data, scales, out); }, argument, fragments,
                          {&out_buf_});
  }

  HostBuffer x_buf_, data_buf_, scales_buf_, out_buf_;
  TensorView x, data, scales, out;
};

TEST_F(QuantizeErrors, ValidOperandsAreAccepted) {
  EXPECT_NO_THROW(quantize_rows(x, data, scales));
  EXPECT_NO_THROW(dequantize_rows(data, scales, out));
}

TEST_F(QuantizeErrors, KNotAMultipleOf32OrZero) {
  x = x_buf_.view({kM, 40});
  data = data_buf_.view({kM, 40});
  scales = scales_buf_.view({kM, 1});
  ExpectQuantizeRejects("out.data", {"K = 40", "positive multiple of 32"});
  out = out_buf_.view({kM, 40});
  ExpectDequantizeRejects("x.data", {"K = 40", "positive multiple of 32"});
  x = x_buf_.view({kM, 0});
  data = data_buf_.view({kM, 0});
  scales = scales_buf_.view({kM, 0});
  ExpectQuantizeRejects("out.data", {"K = 0", "positive multiple of 32"});
}

TEST_F(QuantizeErrors, ScalesShapeWrong) {
  scales = scales_buf_.view({kM, 3});
  ExpectQuantizeRejects("out.scales", {"[6, 3]", "expected [6, 2]"});
  ExpectDequantizeRejects("x.scales", {"[6, 3]", "expected [6, 2]"});
}

TEST_F(QuantizeErrors, DataShapeDiffersFromX) {
  data = data_buf_.view({kM + 1, kK});
  scales = scales_buf_.view({kM + 1, 2});
  ExpectQuantizeRejects("out.data", {"[7, 64]", "expected the shape of x [6, 64]"});
  ExpectDequantizeRejects("out", {"[6, 64]", "expected the shape of x.data [7, 64]"});
}

TEST_F(QuantizeErrors, WrongDTypes) {
  x.dtype = DType::kE4M3;
  ExpectQuantizeRejects("x", {"dtype e4m3", "expected fp32, bf16 or fp16"});
  x.dtype = DType::kF32;
  data.dtype = DType::kBF16;
  ExpectQuantizeRejects("out.data", {"dtype bf16", "expected e4m3"});
  ExpectDequantizeRejects("x.data", {"dtype bf16", "expected e4m3"});
  data.dtype = DType::kE4M3;
  scales.dtype = DType::kE4M3;
  ExpectQuantizeRejects("out.scales", {"dtype e4m3", "expected e8m0"});
  scales.dtype = DType::kE8M0;
  out.dtype = DType::kE4M3;
  ExpectDequantizeRejects("out", {"dtype e4m3", "expected fp32, bf16 or fp16"});
}

TEST_F(QuantizeErrors, NullDeviceAndStrideProblems) {
  x.data = nullptr;
  ExpectQuantizeRejects("x", {"null pointer", "[6, 64]"});
  x = x_buf_.view({kM, kK});
  data.location = Location::kDevice;
  ExpectQuantizeRejects("out.data", {"device memory", "expected host memory"});
  ExpectDequantizeRejects("x.data", {"device memory", "expected host memory"});
  data.location = Location::kHost;
  out.strides[1] = 2;
  ExpectDequantizeRejects("out", {"stride 2 on its last dim", "expected 1"});
  out = out_buf_.matrix(kM, kK, 10);
  ExpectDequantizeRejects("out", {"row stride 10", "at least the row length 64"});
  out = out_buf_.view({kM, kK});
  x = x_buf_.view({2, 3, kK});
  x.strides = {kK, kK, 1};  // batches overlap rows
  ExpectQuantizeRejects("x", {"[2, 3, 64]", "do not flatten"});
  x = x_buf_.view({kM, kK});
  x.rank = 0;
  ExpectQuantizeRejects("x", {"rank 0", "expected 1 to 3"});
}

// Extents whose product wraps int64 (2^90 elements read as 0) or exceeds what a row index or a
// span may hold are refused by size, before any pointer or stride is used.
TEST_F(QuantizeErrors, HugeShapesAndStridesAreRefusedBySize) {
  constexpr std::int64_t kHuge = std::int64_t{1} << 30;
  x = TensorView::contiguous(nullptr, {kHuge, kHuge, kHuge}, DType::kF32, Location::kHost);
  ExpectQuantizeRejects("x", {"[1073741824, 1073741824, 1073741824]", "at most 2^48 elements"});
  x = TensorView::contiguous(nullptr, {1 << 20, 1 << 20, kK}, DType::kF32, Location::kHost);
  ExpectQuantizeRejects("x", {"1099511627776 rows", "expected at most 2147483647"});
  x = x_buf_.matrix(2, kK, std::int64_t{1} << 62);
  ExpectQuantizeRejects("x", {"stride 4611686018427387904 on dim 0", "at most 2^48"});
  x = x_buf_.view({kM, kK});
  data = TensorView::contiguous(nullptr, {kHuge, kHuge, kHuge}, DType::kE4M3, Location::kHost);
  ExpectDequantizeRejects("x.data", {"at most 2^48 elements"});
}

TEST(WorkspaceErrors, BytesForABadShapeAreRefusedNotWrapped) {
  const auto expect_refused = [](std::int64_t rows, std::int64_t k, const std::string& argument,
                                 const std::string& fragment) {
    ExpectInvalidArgument([&] { (void)linear_workspace_bytes(rows, k); }, argument,
                          {"linear_workspace_bytes", fragment}, {});
  };
  expect_refused(-1, 4096, "rows", "is -1; expected 0..2147483647");
  expect_refused(std::int64_t{1} << 33, 4096, "rows", "expected 0..2147483647");
  expect_refused(1, 33, "k", "is 33; expected a positive multiple of 32");
  expect_refused(1, 0, "k", "is 0;");
  expect_refused(std::int64_t{1} << 30, std::int64_t{1} << 30, "rows", "rows x K at most 2^48");
  EXPECT_GE(linear_workspace_bytes(1024, 4096), 1024u * 4096u);
}

// Timeline stamps: a build without them says so, naming the argument; a kernel without stamps is
// refused by name in a build with them.
TEST(Errors, TimelineNamesWhatItCannotTime) {
  try {
    set_kernel_timeline(timeline_compiled() ? "generic" : "decode", nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(),
              timeline_compiled() ? ErrorCode::kInvalidArgument : ErrorCode::kUnsupported);
    EXPECT_EQ(e.argument(), "kernel");
    EXPECT_THAT(e.what(),
                ::testing::HasSubstr(timeline_compiled() ? "'generic'" : "MXLINEAR_TIMELINE"));
  }
}

// A described device's arch is echoed in every report: only letters, digits and '_' pass, and
// a refused spec is echoed escaped.
TEST(Errors, DeviceSpecsAreCheckedAndEchoedEscaped) {
  EXPECT_EQ(DeviceDescription::parse("sm_90a:132").arch, "sm_90a");
  for (const std::string& spec :
       {std::string("sm\x1b[2J:132"), std::string("sm 90:132"), std::string(":132"),
        std::string("sm_90a:0"), std::string("sm_90a:4097"), std::string(40, 'a') + ":8"}) {
    ExpectInvalidArgument([&] { (void)DeviceDescription::parse(spec); }, "spec",
                          {"DeviceDescription::parse", "expected 'cpu' or '<arch>:<sms>'"}, {});
  }
  try {
    (void)DeviceDescription::parse("sm\x1b[2J:132");
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("is 'sm\\x1b[2J:132'"));
  }
}

TEST_F(LinearErrors, PrefillPrepassTakesOnlyDeviceOperands) {
  // Host views (no GPU needed): the first check names x and where it lives; no output written.
  ExpectInvalidArgument([&] { run_prefill_activation_prepass(xq, out_buf_.data(), nullptr); },
                        "x.data", {"host memory", "expected device memory"}, {&out_buf_});
}

// linear() on device memory where no GPU kernel runs (a machine without a GPU, or a GPU other
// than Hopper) is refused on both entry points before anything is allocated or launched, naming
// 'x' and the device. (tests/cpu/test_registry.cpp checks the same on described devices, and
// that MXLINEAR_BACKEND=reference lets the CPU reference serve there.)
TEST(LinearDevice, WithoutAHopperGpuTheCallIsRefusedNamingTheDevice) {
  const DeviceDescription device = DeviceDescription::current();
  if (device.arch == "sm_90a") GTEST_SKIP() << "this machine has a Hopper GPU";
  if (const char* backend = std::getenv("MXLINEAR_BACKEND");
      backend != nullptr && std::string(backend) == "reference") {
    GTEST_SKIP() << "MXLINEAR_BACKEND=reference lets the CPU reference serve the call";
  }
  std::vector<std::uint8_t> x(Idx(kM * kK * 2)), q(Idx(kM * kK)), qs(Idx(kM * kK / 32)),
      w(Idx(kN * kK)), ws(Idx(kN * kK / 32)), out(Idx(kM * kN * 2), 0x5A);
  const auto view = [](std::vector<std::uint8_t>& b, std::int64_t rows, std::int64_t cols,
                       DType dtype) {
    return TensorView::contiguous(b.data(), {rows, cols}, dtype, Location::kDevice);
  };
  const MxWeight weight{view(w, kN, kK, DType::kE4M3), view(ws, kN, kK / 32, DType::kE8M0)};
  const TensorView o = view(out, kM, kN, DType::kBF16);
  const std::vector<std::uint8_t> out_before = out;
  const std::vector<std::function<void()>> calls = {
      [&] { linear(view(x, kM, kK, DType::kBF16), weight, std::nullopt, o, nullptr); },
      [&] {
        linear(QuantizedActivation{view(q, kM, kK, DType::kE4M3),
                                   view(qs, kM, kK / 32, DType::kE8M0), DType::kBF16},
               weight, std::nullopt, o, nullptr);
      }};
  for (const auto& call : calls) {
    try {
      call();
      ADD_FAILURE() << "linear ran on " << device.to_string();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
      EXPECT_EQ(e.argument(), "x");
      EXPECT_THAT(e.what(), HasSubstr(device.is_gpu ? "linear: argument 'x' is on device "
                                                    : "linear: argument 'x' is in device "
                                                      "memory, but this machine has no CUDA "
                                                      "device"));
      EXPECT_THAT(e.what(), HasSubstr("need sm_90a (Hopper)"));
      if (device.is_gpu) {
        EXPECT_THAT(e.what(), HasSubstr(device.name + ", " + device.arch));
      }
    }
    EXPECT_EQ(out, out_before);
  }
}

}  // namespace
}  // namespace mxlinear
