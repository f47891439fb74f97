// A small non-owning tensor view: what every entry point takes, so callers keep their own memory
// (PyTorch tensors, engine buffers, cudaMalloc) and nothing is copied to cross the API.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace mxlinear {

enum class DType : std::uint8_t { kE4M3, kE8M0, kBF16, kF16, kF32 };
enum class Location : std::uint8_t { kHost, kDevice };

const char* to_string(DType dtype);
const char* to_string(Location location);
std::size_t element_size(DType dtype);

inline constexpr int kMaxRank = 3;

struct TensorView {
  void* data = nullptr;
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};  // in elements, not bytes
  DType dtype = DType::kF32;
  Location location = Location::kHost;

  // A contiguous row-major view.
  static TensorView contiguous(void* data, std::initializer_list<std::int64_t> shape, DType dtype,
                               Location location);
  // A 2-D view whose rows are row_stride elements apart (row_stride >= cols).
  static TensorView matrix(void* data, std::int64_t rows, std::int64_t cols,
                           std::int64_t row_stride, DType dtype, Location location);

  std::int64_t numel() const;
  std::int64_t size(int dim) const { return shape[static_cast<std::size_t>(dim)]; }
  std::int64_t stride(int dim) const { return strides[static_cast<std::size_t>(dim)]; }
  // The product of all but the last dimension: rows once [B, S, K] is read as [B*S, K].
  std::int64_t rows() const;
  std::int64_t cols() const { return rank == 0 ? 1 : size(rank - 1); }
  bool rows_are_flattenable() const;  // leading dims collapse into one row dim with one stride
  std::int64_t row_stride() const;    // stride between flattened rows (valid if flattenable)
  std::string shape_string() const;   // "[2, 3, 64]"
};

}  // namespace mxlinear
