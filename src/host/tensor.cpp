#include "mxlinear/tensor.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <limits>

#include "host/validate.hpp"

namespace mxlinear {

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::kE4M3:
      return "e4m3";
    case DType::kE8M0:
      return "e8m0";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "fp16";
    case DType::kF32:
      return "fp32";
  }
  return "unknown-dtype";
}

const char* to_string(Location location) { return location == Location::kHost ? "host" : "device"; }

std::size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::kE4M3:
    case DType::kE8M0:
      return 1;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kF32:
      return 4;
  }
  return 0;
}

TensorView TensorView::contiguous(void* data, std::initializer_list<std::int64_t> shape,
                                  DType dtype, Location location) {
  if (shape.size() > static_cast<std::size_t>(kMaxRank)) {
    detail::fail(ErrorCode::kInvalidArgument, "TensorView::contiguous", "shape",
                 fmt::format("has rank {}; expected at most {}", shape.size(), kMaxRank));
  }
  TensorView view;
  view.data = data;
  view.rank = static_cast<int>(shape.size());
  view.dtype = dtype;
  view.location = location;
  std::size_t i = 0;
  for (std::int64_t extent : shape) view.shape[i++] = extent;
  std::int64_t stride = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.strides[static_cast<std::size_t>(d)] = stride;
    // A stride past int64 saturates: the entry points' checks refuse such a view by its size.
    if (__builtin_mul_overflow(stride, view.shape[static_cast<std::size_t>(d)], &stride)) {
      stride = std::numeric_limits<std::int64_t>::max();
    }
  }
  return view;
}

TensorView TensorView::matrix(void* data, std::int64_t rows, std::int64_t cols,
                              std::int64_t row_stride, DType dtype, Location location) {
  TensorView view = contiguous(data, {rows, cols}, dtype, location);
  view.strides[0] = row_stride;
  return view;
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= size(d);
  return n;
}

std::int64_t TensorView::rows() const {
  std::int64_t n = 1;
  for (int d = 0; d + 1 < rank; ++d) n *= size(d);
  return n;
}

bool TensorView::rows_are_flattenable() const {
  // Each leading dim must step over exactly the rows of the next leading dim inside it. Dims of
  // extent 1 never step, so their strides do not matter (x[:, -1:, :] of a contiguous [B, S, K]
  // is [B, 1, K] with strides {S*K, K, 1}: B rows, S*K apart).
  std::int64_t expected = -1;  // the stride the next outer stepping dim must have; -1: any
  for (int d = rank - 2; d >= 0; --d) {
    if (size(d) == 1) continue;
    if (expected >= 0 && stride(d) != expected) return false;
    expected = stride(d) * size(d);
  }
  return true;
}

std::int64_t TensorView::row_stride() const {
  if (rank < 2) return cols();
  // The innermost leading dim that steps (see rows_are_flattenable).
  for (int d = rank - 2; d >= 0; --d) {
    if (size(d) != 1) return stride(d);
  }
  return stride(rank - 2);
}

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (int d = 0; d < rank; ++d) s += fmt::format("{}{}", d ? ", " : "", size(d));
  return s + "]";
}

}  // namespace mxlinear
