#include "support/mx_oracle.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

namespace mxlinear::test {

double e4m3_value(std::uint8_t code) {
  const bool negative = (code & 0x80) != 0;
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 0x7;
  double magnitude;
  if (exponent == 15 && mantissa == 7) {
    magnitude = std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), -9);  // m * 2^-9
  } else {
    magnitude = std::ldexp(1.0 + mantissa / 8.0, exponent - 7);  // 1.m * 2^(e - 7)
  }
  return negative ? -magnitude : magnitude;
}

std::uint8_t e4m3_nearest(double x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<std::uint8_t>(sign | 0x7F);
  const double a = std::fabs(x);
  int best = 0;
  double best_distance = a;
  for (int c = 1; c <= 0x7E; ++c) {
    const double distance = std::fabs(a - e4m3_value(static_cast<std::uint8_t>(c)));
    // Codes ascend with value, so a tie is between c - 1 and c: keep whichever is even.
    if (distance < best_distance || (distance == best_distance && c % 2 == 0)) {
      best = c;
      best_distance = distance;
    }
  }
  return static_cast<std::uint8_t>(sign | best);
}

double e8m0_value(std::uint8_t b) {
  if (b == 255) return std::numeric_limits<double>::quiet_NaN();
  return std::ldexp(1.0, static_cast<int>(b) - 127);
}

std::uint8_t scale_for_amax(float amax, ScaleRule rule) {
  if (!(amax >= FLT_MIN)) amax = FLT_MIN;
  int exponent = 0;
  int log2_value = 0;
  if (rule == ScaleRule::kRceil) {
    const float t = amax / 448.0f;                    // the one fp32 division the contract names
    const float fraction = std::frexp(t, &exponent);  // t = fraction * 2^exponent, [0.5, 1)
    log2_value = fraction == 0.5f ? exponent - 1 : exponent;  // ceil(log2(t))
  } else {
    std::frexp(amax, &exponent);
    log2_value = exponent - 1 - 8;  // floor(log2(amax)) - 8
  }
  const int b = log2_value + 127;
  return static_cast<std::uint8_t>(b < 0 ? 0 : (b > 254 ? 254 : b));
}

QuantizedBlock quantize_block(const float* values, ScaleRule rule) {
  QuantizedBlock block;
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) {
    if (!std::isfinite(values[i])) {
      block.scale = 0xFF;
      block.q.fill(0x7F);
      return block;
    }
    amax = std::max(amax, std::fabs(values[i]));
  }
  block.scale = scale_for_amax(amax, rule);
  const double factor = std::ldexp(1.0, 127 - static_cast<int>(block.scale));
  for (int i = 0; i < 32; ++i) {
    // The exact product, rounded to fp32 as an fp32 multiply would, then to E4M3.
    const float scaled = static_cast<float>(static_cast<double>(values[i]) * factor);
    block.q[static_cast<std::size_t>(i)] = e4m3_nearest(scaled);
  }
  return block;
}

long double format_value(BinaryFormat format, std::uint32_t code) {
  const int total_bits = 1 + format.exponent_bits + format.mantissa_bits;
  const bool negative = ((code >> (total_bits - 1)) & 1u) != 0;
  const std::uint32_t exponent_mask = (1u << format.exponent_bits) - 1u;
  const std::uint32_t mantissa_mask = (1u << format.mantissa_bits) - 1u;
  const int exponent = static_cast<int>((code >> format.mantissa_bits) & exponent_mask);
  const std::uint32_t mantissa = code & mantissa_mask;
  const int bias = (1 << (format.exponent_bits - 1)) - 1;
  long double magnitude;
  if (exponent == static_cast<int>(exponent_mask)) {
    magnitude = mantissa == 0 ? std::numeric_limits<long double>::infinity()
                              : std::numeric_limits<long double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<long double>(mantissa), 1 - bias - format.mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<long double>((1u << format.mantissa_bits) | mantissa),
                           exponent - bias - format.mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

namespace {

// The magnitude a non-negative code stands for while rounding: its value, and 2^(emax + 1) for
// the Inf code (so ties at the top round to Inf, whose mantissa is even).
long double rounding_value(BinaryFormat format, std::uint32_t code, std::uint32_t inf_code) {
  if (code == inf_code) {
    const int bias = (1 << (format.exponent_bits - 1)) - 1;
    return std::ldexp(1.0L, bias + 1);
  }
  return format_value(format, code);
}

}  // namespace

std::uint32_t round_to_format(long double x, BinaryFormat format) {
  const int total_bits = 1 + format.exponent_bits + format.mantissa_bits;
  const std::uint32_t sign = std::signbit(x) ? (1u << (total_bits - 1)) : 0u;
  const std::uint32_t inf_code = ((1u << format.exponent_bits) - 1u) << format.mantissa_bits;
  if (std::isnan(x)) return inf_code | (1u << (format.mantissa_bits - 1));
  const long double a = std::fabs(x);
  if (a >= rounding_value(format, inf_code, inf_code)) return sign | inf_code;
  // Invariant: value(lo) <= a < value(hi).
  std::uint32_t lo = 0;
  std::uint32_t hi = inf_code;
  while (hi - lo > 1) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    if (rounding_value(format, mid, inf_code) <= a) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const long double low_value = rounding_value(format, lo, inf_code);
  const long double high_value = rounding_value(format, hi, inf_code);
  // Both neighbours have at most 24 significant bits, so their midpoint is exact in long double.
  const long double midpoint = (low_value + high_value) / 2;
  std::uint32_t code;
  if (a < midpoint) {
    code = lo;
  } else if (a > midpoint) {
    code = hi;
  } else {
    code = (lo % 2 == 0) ? lo : hi;
  }
  return sign | code;
}

std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float bits_float(std::uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

std::uint16_t to_bf16_bits(float x) {
  const __nv_bfloat16 h = __float2bfloat16_rn(x);
  std::uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

std::uint16_t to_f16_bits(float x) {
  const __half h = __float2half_rn(x);
  std::uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

float bf16_bits_to_float(std::uint16_t bits) {
  return static_cast<float>(format_value(kBF16Format, bits));
}

float f16_bits_to_float(std::uint16_t bits) {
  return static_cast<float>(format_value(kF16Format, bits));
}

namespace {

// The W8A16 sums of term(x, deq(w)) over k, for every [m, n].
template <class Term>
std::vector<double> w8a16_sums(const W8A16Operands& op, Term term) {
  const auto k = static_cast<std::size_t>(op.k);
  std::vector<double> x(static_cast<std::size_t>(op.m) * k);
  for (std::int64_t r = 0; r < op.m; ++r) {
    for (std::size_t c = 0; c < k; ++c) {
      x[static_cast<std::size_t>(r) * k + c] = static_cast<double>(
          format_value(op.x_format, op.x[r * op.ld_x + static_cast<std::int64_t>(c)]));
    }
  }
  std::vector<double> w(static_cast<std::size_t>(op.n) * k);
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = e4m3_value(op.w[i]) * e8m0_value(op.w_scales[i / 32]);
  }
  std::vector<double> out(static_cast<std::size_t>(op.m * op.n));
  for (std::size_t r = 0; r < static_cast<std::size_t>(op.m); ++r) {
    for (std::size_t c = 0; c < static_cast<std::size_t>(op.n); ++c) {
      const double* xr = &x[r * k];
      const double* wc = &w[c * k];
      double sum = 0;
      for (std::size_t i = 0; i < k; ++i) sum += term(xr[i], wc[i]);
      out[r * static_cast<std::size_t>(op.n) + c] = sum;
    }
  }
  return out;
}

}  // namespace

std::vector<double> w8a16_reference(const W8A16Operands& op, const std::vector<double>& bias) {
  std::vector<double> out = w8a16_sums(op, [](double x, double w) { return x * w; });
  if (!bias.empty()) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += bias[i % bias.size()];
  }
  return out;
}

std::vector<double> w8a16_abs_product_sums(const W8A16Operands& op) {
  return w8a16_sums(op, [](double x, double w) { return std::fabs(x * w); });
}

}  // namespace mxlinear::test
