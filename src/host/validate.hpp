// Argument checks shared by every entry point, so each rule and its message exist once.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "mxlinear/error.hpp"
#include "mxlinear/format.hpp"
#include "mxlinear/linear_types.hpp"

namespace mxlinear::detail {

// The largest extent of a view and the most rows a call takes (the kernels index them as int).
inline constexpr std::int64_t kMaxExtent = std::numeric_limits<std::int32_t>::max();
// The most elements a view may hold or span: far beyond any device's memory, and small enough
// that row and span arithmetic stays within int64.
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 48;

// Throws Error with "op: argument 'name' <what>".
[[noreturn]] void fail(ErrorCode code, std::string_view op, std::string_view argument,
                       const std::string& what);

// dtype, location, rank, non-negative extents, non-null data for non-empty views, unit stride on
// the last dim, and leading dims that flatten into rows with row_stride >= cols.
void check_view(std::string_view op, std::string_view name, const TensorView& view, Location where,
                std::initializer_list<DType> allowed);

// Checks an MX pair: data [rows, K] e4m3 and scales [rows, K/32] e8m0 with K % 32 == 0, K > 0.
void check_mx_pair(std::string_view op, std::string_view name, const TensorView& data,
                   const TensorView& scales, Location where);

// Checks a quantization's operands: x [..., K] fp32, bf16 or fp16, and data/scales as an MX pair
// of x's shape.
void check_quantize(std::string_view op, const TensorView& x, const TensorView& data,
                    const TensorView& scales, Location where);

// Checks every operand of one linear call and returns its shape. x_scales is null for a bf16 or
// fp16 activation that the call quantizes itself.
LinearShape check_linear(std::string_view op, const TensorView& x, const TensorView* x_scales,
                         const MxWeight& weight, const std::optional<TensorView>& bias,
                         const TensorView& out, Location where);

}  // namespace mxlinear::detail
