#include <cmath>
#include <vector>

#include "device/common/mx_format.hpp"
#include "host/numeric.hpp"
#include "host/validate.hpp"
#include "mxlinear/quantize.hpp"
#include "mxlinear/reference.hpp"

namespace mxlinear {
namespace {

constexpr std::string_view kOp = "reference_linear";

// deq(data) as a dense row-major fp64 [rows, K] matrix (exact: e4m3 * 2^e fits fp64).
std::vector<double> dequantize_f64(const TensorView& data, const TensorView& scales) {
  const std::int64_t rows = data.rows();
  const std::int64_t k = data.cols();
  std::vector<double> out(static_cast<std::size_t>(rows * k));
  const auto* q = static_cast<const std::uint8_t*>(data.data);
  const auto* s = static_cast<const std::uint8_t*>(scales.data);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < k; ++c) {
      const double scale = device::e8m0_to_float(s[r * scales.row_stride() + c / kBlockSize]);
      out[static_cast<std::size_t>(r * k + c)] =
          static_cast<double>(device::e4m3_to_float(q[r * data.row_stride() + c])) * scale;
    }
  }
  return out;
}

// A 16-bit x as a dense row-major fp64 [rows, K] matrix (exact).
std::vector<double> widen_f64(const TensorView& x) {
  const std::int64_t rows = x.rows();
  const std::int64_t k = x.cols();
  std::vector<double> out(static_cast<std::size_t>(rows * k));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < k; ++c) {
      out[static_cast<std::size_t>(r * k + c)] =
          static_cast<double>(detail::load_as_float(x.data, x.dtype, r * x.row_stride() + c));
    }
  }
  return out;
}

// a: the activation as a dense fp64 [M, K] matrix.
void linear_f64(const std::vector<double>& a, const MxWeight& weight,
                const std::optional<TensorView>& bias, const LinearShape& shape, double* out) {
  const std::vector<double> w = dequantize_f64(weight.data, weight.scales);
  const auto k = static_cast<std::size_t>(shape.k);
  for (std::int64_t m = 0; m < shape.m; ++m) {
    const double* a_row = a.data() + static_cast<std::size_t>(m) * k;
    for (std::int64_t n = 0; n < shape.n; ++n) {
      const double* w_row = w.data() + static_cast<std::size_t>(n) * k;
      double acc = 0.0;
      for (std::size_t i = 0; i < k; ++i) acc += a_row[i] * w_row[i];
      if (bias) acc += static_cast<double>(detail::load_as_float(bias->data, bias->dtype, n));
      out[m * shape.n + n] = acc;
    }
  }
}

void write_out(const std::vector<double>& result, const LinearShape& shape, const TensorView& out) {
  for (std::int64_t m = 0; m < shape.m; ++m) {
    for (std::int64_t n = 0; n < shape.n; ++n) {
      detail::store_rounded(out.data, out.dtype, m * out.row_stride() + n,
                            result[static_cast<std::size_t>(m * shape.n + n)]);
    }
  }
}

}  // namespace

void reference_linear_f64(const QuantizedActivation& x, const MxWeight& weight,
                          const std::optional<TensorView>& bias, double* out_f64) {
  // The fp64 result has no dtype to check; a placeholder out of the right shape stands in.
  const TensorView shape_only =
      TensorView::matrix(out_f64, x.data.rows(), weight.data.size(0), weight.data.size(0),
                         DType::kF32, Location::kHost);
  const LinearShape shape =
      detail::check_linear(kOp, x.data, &x.scales, weight, bias, shape_only, Location::kHost);
  if (shape.m == 0) return;
  linear_f64(dequantize_f64(x.data, x.scales), weight, bias, shape, out_f64);
}

void reference_linear(const QuantizedActivation& x, const MxWeight& weight,
                      const std::optional<TensorView>& bias, const TensorView& out) {
  const LinearShape shape =
      detail::check_linear(kOp, x.data, &x.scales, weight, bias, out, Location::kHost);
  if (shape.m == 0) return;
  std::vector<double> result(static_cast<std::size_t>(shape.m * shape.n));
  linear_f64(dequantize_f64(x.data, x.scales), weight, bias, shape, result.data());
  write_out(result, shape, out);
}

void reference_linear(const TensorView& x, const MxWeight& weight,
                      const std::optional<TensorView>& bias, const TensorView& out,
                      ScaleRule rule) {
  const LinearShape shape =
      detail::check_linear(kOp, x, nullptr, weight, bias, out, Location::kHost);
  if (shape.m == 0) return;
  std::vector<std::uint8_t> data(static_cast<std::size_t>(shape.m * shape.k));
  std::vector<std::uint8_t> scales(static_cast<std::size_t>(shape.m * shape.k / kBlockSize));
  QuantizedActivation xq{
      TensorView::contiguous(data.data(), {shape.m, shape.k}, DType::kE4M3, Location::kHost),
      TensorView::contiguous(scales.data(), {shape.m, shape.k / kBlockSize}, DType::kE8M0,
                             Location::kHost),
      x.dtype};
  quantize_rows(x, xq.data, xq.scales, rule);
  reference_linear(xq, weight, bias, out);
}

namespace {

// W8A16 takes a bf16 or fp16 x as it is.
LinearShape check_w8a16(const TensorView& x, const MxWeight& weight,
                        const std::optional<TensorView>& bias, const TensorView& out) {
  const LinearShape shape =
      detail::check_linear(kOp, x, nullptr, weight, bias, out, Location::kHost);
  if (x.dtype != DType::kBF16 && x.dtype != DType::kF16) {
    detail::fail(ErrorCode::kInvalidArgument, kOp, "x",
                 std::string("has dtype ") + to_string(x.dtype) +
                     "; W8A16 multiplies a bf16 or fp16 activation as it is");
  }
  return shape;
}

}  // namespace

void reference_linear_w8a16(const TensorView& x, const MxWeight& weight,
                            const std::optional<TensorView>& bias, const TensorView& out) {
  const LinearShape shape = check_w8a16(x, weight, bias, out);
  if (shape.m == 0) return;
  std::vector<double> result(static_cast<std::size_t>(shape.m * shape.n));
  linear_f64(widen_f64(x), weight, bias, shape, result.data());
  write_out(result, shape, out);
}

void reference_linear_w8a16_f64(const TensorView& x, const MxWeight& weight,
                                const std::optional<TensorView>& bias, double* out_f64) {
  const TensorView shape_only = TensorView::matrix(
      out_f64, x.rows(), weight.data.size(0), weight.data.size(0), DType::kF32, Location::kHost);
  const LinearShape shape = check_w8a16(x, weight, bias, shape_only);
  if (shape.m == 0) return;
  linear_f64(widen_f64(x), weight, bias, shape, out_f64);
}

}  // namespace mxlinear
