#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "device/common/mx_format.hpp"
#include "host/numeric.hpp"
#include "host/validate.hpp"
#include "mxlinear/quantize.hpp"

namespace mxlinear {

std::uint8_t quantize_block(const float* values, std::uint8_t* q, ScaleRule rule) {
  float amax = 0.0f;
  for (int i = 0; i < kBlockSize; ++i) {
    if (!std::isfinite(values[i])) {
      for (int j = 0; j < kBlockSize; ++j) q[j] = kE4M3NaN;
      return kE8M0NaN;
    }
    amax = std::fmax(amax, std::fabs(values[i]));
  }
  const std::uint8_t scale = device::e8m0_scale_for_amax(amax, rule);
  const float inverse = device::e8m0_inverse_to_float(scale);
  for (int i = 0; i < kBlockSize; ++i) q[i] = device::float_to_e4m3(values[i] * inverse);
  return scale;
}

void quantize_rows(const TensorView& x, const TensorView& data, const TensorView& scales,
                   ScaleRule rule) {
  constexpr std::string_view kOp = "quantize_rows";
  detail::check_quantize(kOp, x, data, scales, Location::kHost);
  const std::int64_t blocks = x.cols() / kBlockSize;
  auto* q = static_cast<std::uint8_t*>(data.data);
  auto* s = static_cast<std::uint8_t*>(scales.data);
  float values[kBlockSize];
  for (std::int64_t r = 0; r < x.rows(); ++r) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      for (int i = 0; i < kBlockSize; ++i) {
        values[i] = detail::load_as_float(x.data, x.dtype, r * x.row_stride() + b * kBlockSize + i);
      }
      s[r * scales.row_stride() + b] =
          quantize_block(values, q + r * data.row_stride() + b * kBlockSize, rule);
    }
  }
}

void dequantize_rows(const TensorView& data, const TensorView& scales, const TensorView& out) {
  constexpr std::string_view kOp = "dequantize_rows";
  detail::check_mx_pair(kOp, "x", data, scales, Location::kHost);
  detail::check_view(kOp, "out", out, Location::kHost, {DType::kF32, DType::kBF16, DType::kF16});
  if (out.rows() != data.rows() || out.cols() != data.cols()) {
    detail::fail(ErrorCode::kInvalidArgument, kOp, "out",
                 fmt::format("has shape {}; expected the shape of x.data {}", out.shape_string(),
                             data.shape_string()));
  }
  const auto* q = static_cast<const std::uint8_t*>(data.data);
  const auto* s = static_cast<const std::uint8_t*>(scales.data);
  for (std::int64_t r = 0; r < data.rows(); ++r) {
    for (std::int64_t c = 0; c < data.cols(); ++c) {
      const float scale = device::e8m0_to_float(s[r * scales.row_stride() + c / kBlockSize]);
      const double value =
          static_cast<double>(device::e4m3_to_float(q[r * data.row_stride() + c])) *
          static_cast<double>(scale);
      detail::store_rounded(out.data, out.dtype, r * out.row_stride() + c, value);
    }
  }
}

}  // namespace mxlinear
