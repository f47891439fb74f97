#include "host/validate.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <optional>

namespace mxlinear::detail {
namespace {

std::string dtype_list(std::initializer_list<DType> allowed) {
  std::string s;
  std::size_t i = 0;
  for (DType d : allowed) {
    s += (i == 0) ? "" : (i + 1 == allowed.size() ? " or " : ", ");
    s += to_string(d);
    ++i;
  }
  return s;
}

// a * b where it is at most kMaxElements (a, b >= 0); nullopt otherwise.
std::optional<std::int64_t> bounded_product(std::int64_t a, std::int64_t b) {
  std::int64_t p = 0;
  if (__builtin_mul_overflow(a, b, &p) || p > kMaxElements) return std::nullopt;
  return p;
}

// The view's element count and the elements its leading dims step over, checked before the
// TensorView helpers (numel, rows, rows_are_flattenable) multiply them in int64.
void check_extent_products(std::string_view op, std::string_view name, const TensorView& view) {
  std::int64_t elements = 1;
  for (int d = 0; d < view.rank; ++d) {
    const std::optional<std::int64_t> p = bounded_product(elements, view.size(d));
    if (!p) {
      fail(ErrorCode::kInvalidArgument, op, name,
           fmt::format("has shape {}; expected at most 2^48 elements", view.shape_string()));
    }
    elements = *p;
  }
  if (view.rows() > kMaxExtent) {
    fail(ErrorCode::kInvalidArgument, op, name,
         fmt::format("has shape {}, {} rows; expected at most {}", view.shape_string(), view.rows(),
                     kMaxExtent));
  }
  for (int d = 0; d + 1 < view.rank; ++d) {
    const std::int64_t stride = view.stride(d);
    if (view.size(d) > 1 &&
        (stride < -kMaxElements || !bounded_product(stride < 0 ? -stride : stride, view.size(d)))) {
      fail(ErrorCode::kInvalidArgument, op, name,
           fmt::format("has stride {} on dim {} of shape {}; expected |stride| x {} at most 2^48",
                       stride, d, view.shape_string(), view.size(d)));
    }
  }
}

}  // namespace

void fail(ErrorCode code, std::string_view op, std::string_view argument, const std::string& what) {
  throw Error(code, std::string(argument), fmt::format("{}: argument '{}' {}", op, argument, what));
}

void check_view(std::string_view op, std::string_view name, const TensorView& view, Location where,
                std::initializer_list<DType> allowed) {
  bool dtype_ok = false;
  for (DType d : allowed) dtype_ok = dtype_ok || d == view.dtype;
  if (!dtype_ok) {
    fail(ErrorCode::kInvalidArgument, op, name,
         fmt::format("has dtype {}; expected {}", to_string(view.dtype), dtype_list(allowed)));
  }
  if (view.location != where) {
    fail(ErrorCode::kInvalidArgument, op, name,
         fmt::format("is in {} memory; expected {} memory", to_string(view.location),
                     to_string(where)));
  }
  if (view.rank < 1 || view.rank > kMaxRank) {
    fail(ErrorCode::kInvalidArgument, op, name,
         fmt::format("has rank {}; expected 1 to {}", view.rank, kMaxRank));
  }
  for (int d = 0; d < view.rank; ++d) {
    if (view.size(d) < 0 || view.size(d) > kMaxExtent) {
      fail(ErrorCode::kInvalidArgument, op, name,
           fmt::format("has shape {}; expected every extent in 0..{}", view.shape_string(),
                       kMaxExtent));
    }
  }
  for (int d = 0; d < view.rank; ++d) {
    if (view.size(d) == 0) return;  // no elements, whatever the other extents
  }
  check_extent_products(op, name, view);
  if (view.data == nullptr) {
    fail(ErrorCode::kInvalidArgument, op, name,
         fmt::format("is a null pointer with shape {}; expected data for {} elements",
                     view.shape_string(), view.numel()));
  }
  if (view.cols() > 1 && view.stride(view.rank - 1) != 1) {
    fail(ErrorCode::kInvalidArgument, op, name,
         fmt::format("has stride {} on its last dim; expected 1 (contiguous rows)",
                     view.stride(view.rank - 1)));
  }
  if (!view.rows_are_flattenable()) {
    fail(ErrorCode::kInvalidArgument, op, name,
         fmt::format("has shape {} with strides that do not flatten into rows; expected each "
                     "leading dim's stride to equal the next dim's stride times its extent",
                     view.shape_string()));
  }
  if (view.rows() > 1 && view.row_stride() < view.cols()) {
    fail(ErrorCode::kInvalidArgument, op, name,
         fmt::format("has row stride {}; expected at least the row length {}", view.row_stride(),
                     view.cols()));
  }
}

void check_mx_pair(std::string_view op, std::string_view name, const TensorView& data,
                   const TensorView& scales, Location where) {
  const std::string data_name = fmt::format("{}.data", name);
  const std::string scales_name = fmt::format("{}.scales", name);
  check_view(op, data_name, data, where, {DType::kE4M3});
  check_view(op, scales_name, scales, where, {DType::kE8M0});
  const std::int64_t k = data.cols();
  if (k <= 0 || k % kBlockSize != 0) {
    fail(ErrorCode::kInvalidArgument, op, data_name,
         fmt::format("has K = {} (shape {}); expected a positive multiple of {}", k,
                     data.shape_string(), kBlockSize));
  }
  if (scales.rows() != data.rows() || scales.cols() != k / kBlockSize) {
    fail(ErrorCode::kInvalidArgument, op, scales_name,
         fmt::format("has shape {}; expected [{}, {}] (rows of {}, K/32)", scales.shape_string(),
                     data.rows(), k / kBlockSize, data_name));
  }
}

void check_quantize(std::string_view op, const TensorView& x, const TensorView& data,
                    const TensorView& scales, Location where) {
  check_view(op, "x", x, where, {DType::kF32, DType::kBF16, DType::kF16});
  check_mx_pair(op, "out", data, scales, where);
  if (data.rows() != x.rows() || data.cols() != x.cols()) {
    fail(ErrorCode::kInvalidArgument, op, "out.data",
         fmt::format("has shape {}; expected the shape of x {}", data.shape_string(),
                     x.shape_string()));
  }
}

LinearShape check_linear(std::string_view op, const TensorView& x, const TensorView* x_scales,
                         const MxWeight& weight, const std::optional<TensorView>& bias,
                         const TensorView& out, Location where) {
  if (x_scales != nullptr) {
    check_mx_pair(op, "x", x, *x_scales, where);
  } else {
    check_view(op, "x", x, where, {DType::kBF16, DType::kF16, DType::kF32});
  }
  check_mx_pair(op, "weight", weight.data, weight.scales, where);
  if (weight.data.rank != 2) {
    fail(ErrorCode::kInvalidArgument, op, "weight.data",
         fmt::format("has rank {} (shape {}); expected rank 2 [N, K]", weight.data.rank,
                     weight.data.shape_string()));
  }
  LinearShape shape{x.rows(), weight.data.size(0), weight.data.size(1)};
  if (shape.n < 1) {
    fail(ErrorCode::kInvalidArgument, op, "weight.data",
         fmt::format("has N = 0 (shape {}); expected N >= 1", weight.data.shape_string()));
  }
  if (x.cols() != shape.k) {
    fail(ErrorCode::kInvalidArgument, op, "x",
         fmt::format("has shape {} with K = {}; expected K = {} to match weight.data {}",
                     x.shape_string(), x.cols(), shape.k, weight.data.shape_string()));
  }
  if (shape.k % kBlockSize != 0) {
    fail(ErrorCode::kInvalidArgument, op, "x",
         fmt::format("has K = {}; expected a multiple of {}", shape.k, kBlockSize));
  }
  if (bias) {
    check_view(op, "bias", *bias, where, {DType::kBF16, DType::kF32});
    if (bias->rank != 1 || bias->size(0) != shape.n) {
      fail(ErrorCode::kInvalidArgument, op, "bias",
           fmt::format("has shape {}; expected [{}] (N)", bias->shape_string(), shape.n));
    }
  }
  check_view(op, "out", out, where, {DType::kBF16, DType::kF16, DType::kF32});
  if (out.rows() != shape.m || out.cols() != shape.n) {
    fail(ErrorCode::kInvalidArgument, op, "out",
         fmt::format("has shape {}; expected {} rows of N = {} (x is {})", out.shape_string(),
                     shape.m, shape.n, x.shape_string()));
  }
  return shape;
}

}  // namespace mxlinear::detail
