// Host memory for test operands of any dtype, with per-element bit access, and random MX-style
// inputs (blocks of 32 with their own magnitude, plus the edge blocks the contract names).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "mxlinear/tensor.hpp"

namespace mxlinear::test {

class HostBuffer {
 public:
  HostBuffer(DType dtype, std::size_t count, unsigned char fill = 0);

  DType dtype() const { return dtype_; }
  std::size_t size() const { return count_; }
  void* data() { return bytes_.data(); }
  const std::vector<unsigned char>& bytes() const { return bytes_; }

  std::uint32_t bits(std::size_t i) const;
  void set_bits(std::size_t i, std::uint32_t bits);
  // The element widened to fp32 exactly (bf16 / fp16 / fp32 only), from its bit fields.
  float value(std::size_t i) const;
  // Stores x rounded to the dtype (CUDA host conversions, nearest even) and returns what was
  // stored, widened back.
  float store(std::size_t i, float x);

  // Views over this buffer.
  TensorView matrix(std::int64_t rows, std::int64_t cols, std::int64_t row_stride);
  TensorView view(std::initializer_list<std::int64_t> shape);

 private:
  DType dtype_;
  std::size_t count_;
  std::vector<unsigned char> bytes_;
};

// Fills rows x k elements (row i at offset i * row_stride) block by block: most blocks get values
// sign * [1, 2) * 2^(e0 - spread) with a random top exponent e0 over the dtype's range and a
// spread of up to 20 binades; some blocks are all zero, hold subnormals, or have an amax at or
// next to 448 * 2^e; with `specials`, some blocks hold a NaN or an Inf.
void fill_random_blocks(HostBuffer& x, std::int64_t rows, std::int64_t k, std::int64_t row_stride,
                        std::mt19937_64& rng, bool specials);
// The same with the block's top exponent e0 drawn from [min_top, max_top].
void fill_random_blocks(HostBuffer& x, std::int64_t rows, std::int64_t k, std::int64_t row_stride,
                        std::mt19937_64& rng, bool specials, int min_top, int max_top);

}  // namespace mxlinear::test
