#include "support/host_buffer.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "support/mx_oracle.hpp"

namespace mxlinear::test {

// One spare byte so data() is never null, even for an empty buffer.
HostBuffer::HostBuffer(DType dtype, std::size_t count, unsigned char fill)
    : dtype_(dtype), count_(count), bytes_(count * element_size(dtype) + 1, fill) {}

std::uint32_t HostBuffer::bits(std::size_t i) const {
  const std::size_t size = element_size(dtype_);
  std::uint32_t out = 0;
  std::memcpy(&out, bytes_.data() + i * size, size);  // little-endian host
  return out;
}

void HostBuffer::set_bits(std::size_t i, std::uint32_t bits) {
  const std::size_t size = element_size(dtype_);
  std::memcpy(bytes_.data() + i * size, &bits, size);
}

float HostBuffer::value(std::size_t i) const {
  switch (dtype_) {
    case DType::kBF16:
      return static_cast<float>(format_value(kBF16Format, bits(i)));
    case DType::kF16:
      return static_cast<float>(format_value(kF16Format, bits(i)));
    case DType::kF32:
      return bits_float(bits(i));
    default:
      return std::numeric_limits<float>::quiet_NaN();
  }
}

float HostBuffer::store(std::size_t i, float x) {
  switch (dtype_) {
    case DType::kBF16:
      set_bits(i, to_bf16_bits(x));
      break;
    case DType::kF16:
      set_bits(i, to_f16_bits(x));
      break;
    case DType::kF32:
      set_bits(i, float_bits(x));
      break;
    default:
      break;
  }
  return value(i);
}

TensorView HostBuffer::matrix(std::int64_t rows, std::int64_t cols, std::int64_t row_stride) {
  return TensorView::matrix(data(), rows, cols, row_stride, dtype_, Location::kHost);
}

TensorView HostBuffer::view(std::initializer_list<std::int64_t> shape) {
  return TensorView::contiguous(data(), shape, dtype_, Location::kHost);
}

void fill_random_blocks(HostBuffer& x, std::int64_t rows, std::int64_t k, std::int64_t row_stride,
                        std::mt19937_64& rng, bool specials) {
  // Exponent range of the largest element in a block, per dtype (fp16 tops out at 65504).
  const bool f16 = x.dtype() == DType::kF16;
  fill_random_blocks(x, rows, k, row_stride, rng, specials, f16 ? -18 : -135, f16 ? 14 : 120);
}

void fill_random_blocks(HostBuffer& x, std::int64_t rows, std::int64_t k, std::int64_t row_stride,
                        std::mt19937_64& rng, bool specials, int min_top, int max_top) {
  const bool f16 = x.dtype() == DType::kF16;
  std::uniform_int_distribution<int> top(min_top, max_top);
  std::uniform_int_distribution<int> spread(0, 20);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> kind(0, 99);
  std::uniform_int_distribution<int> lane(0, 31);
  const float inf = std::numeric_limits<float>::infinity();
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t b = 0; b < k / 32; ++b) {
      const int block_kind = kind(rng);
      const int e0 = top(rng);
      float values[32];
      for (float& v : values) {
        const float sign = (rng() & 1) ? -1.0f : 1.0f;
        v = sign * std::ldexp(mantissa(rng), e0 - spread(rng));
      }
      if (block_kind < 4) {  // all zero, some negative zeros
        for (float& v : values) v = (rng() & 1) ? -0.0f : 0.0f;
      } else if (block_kind < 8) {  // tiny: fp32 subnormals (fp16: fp16 subnormals)
        for (float& v : values) {
          v = std::ldexp(mantissa(rng), (f16 ? -24 : -149) + spread(rng) / 2) *
              ((rng() & 1) ? -1.0f : 1.0f);
        }
      } else if (block_kind < 14) {  // amax at or one step around 448 * 2^e
        const int e = f16 ? e0 - 9 : e0 - 8;
        float amax = std::ldexp(448.0f, e);
        const int step = lane(rng) % 3;
        if (step == 1) amax = std::nextafter(amax, inf);
        if (step == 2) amax = std::nextafter(amax, 0.0f);
        values[lane(rng)] = (rng() & 1) ? -amax : amax;
      } else if (specials && block_kind < 16) {
        values[lane(rng)] = std::numeric_limits<float>::quiet_NaN();
      } else if (specials && block_kind < 18) {
        values[lane(rng)] = (rng() & 1) ? -inf : inf;
      }
      for (int i = 0; i < 32; ++i) {
        x.store(static_cast<std::size_t>(r * row_stride + b * 32 + i), values[i]);
      }
    }
  }
}

}  // namespace mxlinear::test
