// Host conversions between the dtypes a view can hold and fp32/fp64.
#pragma once

#include <cstdint>

#include "mxlinear/tensor.hpp"

namespace mxlinear::detail {

// Reads element `index` of a bf16, fp16 or fp32 array as fp32 (exact widening).
float load_as_float(const void* base, DType dtype, std::int64_t index);

// Rounds x once, to nearest even, to dtype (bf16, fp16 or fp32) and stores it. Rounding fp64
// straight to the narrow type avoids the double rounding of fp64 -> fp32 -> bf16.
void store_rounded(void* base, DType dtype, std::int64_t index, double x);

// x rounded to nearest even to the given binary format (p significant bits, min normal exponent
// emin, largest finite value max_finite); overflow gives +-inf, subnormals are kept.
double round_to_format(double x, int p, int emin, double max_finite);

}  // namespace mxlinear::detail
