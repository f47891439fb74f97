#include "host/numeric.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

namespace mxlinear::detail {

float load_as_float(const void* base, DType dtype, std::int64_t index) {
  switch (dtype) {
    case DType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
    case DType::kF16:
      return __half2float(static_cast<const __half*>(base)[index]);
    case DType::kF32:
      return static_cast<const float*>(base)[index];
    default:
      return std::nanf("");
  }
}

double round_to_format(double x, int p, int emin, double max_finite) {
  if (!std::isfinite(x) || x == 0.0) return x;
  const int e = std::max(std::ilogb(x), emin);
  const int ulp_exponent = e - (p - 1);
  const double r = std::ldexp(std::nearbyint(std::ldexp(x, -ulp_exponent)), ulp_exponent);
  if (std::fabs(r) > max_finite) return std::copysign(HUGE_VAL, x);
  return r;
}

void store_rounded(void* base, DType dtype, std::int64_t index, double x) {
  switch (dtype) {
    case DType::kBF16: {
      const double r = round_to_format(x, 8, -126, 0x1.FEp127);
      static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(static_cast<float>(r));
      return;
    }
    case DType::kF16: {
      const double r = round_to_format(x, 11, -14, 65504.0);
      static_cast<__half*>(base)[index] = __float2half_rn(static_cast<float>(r));
      return;
    }
    case DType::kF32:
      static_cast<float*>(base)[index] = static_cast<float>(x);
      return;
    default:
      return;
  }
}

}  // namespace mxlinear::detail
