// quantize() on the GPU, and the pass the linear's 16-bit entry point runs.
#include <fmt/format.h>

#include <cstdint>

#include "device/kernels/quantize/quantize.hpp"
#include "host/cuda_check.hpp"
#include "host/quantize_pass.hpp"
#include "host/validate.hpp"
#include "mxlinear/linear.hpp"

namespace mxlinear {
namespace detail {
namespace {

device::InType in_type(DType d) {
  return d == DType::kBF16 ? device::InType::kBF16
                           : (d == DType::kF16 ? device::InType::kF16 : device::InType::kF32);
}

// cp.async moves 16-byte chunks: e4m3 rows must start on 16-byte boundaries.
void require_aligned_rows(std::string_view op, std::string_view name, const TensorView& v) {
  const auto address = reinterpret_cast<std::uintptr_t>(v.data);
  const std::int64_t stride_bytes =
      v.row_stride() * static_cast<std::int64_t>(element_size(v.dtype));
  if (address % 16 != 0 || (v.rows() > 1 && stride_bytes % 16 != 0)) {
    fail(ErrorCode::kInvalidArgument, op, name,
         fmt::format("has address {:#x} and row stride {} bytes; expected both to be "
                     "multiples of 16 bytes",
                     address, stride_bytes));
  }
}

}  // namespace

void launch_quantize_pass(std::string_view op, const TensorView& x, const TensorView& data,
                          const TensorView& scales, ScaleRule rule, cudaStream_t stream,
                          const DequantizedOutput& dequantized) {
  device::QuantizeParams p;
  p.x = x.data;
  p.q = dequantized.only ? nullptr : static_cast<std::uint8_t*>(data.data);
  p.scales = dequantized.only ? nullptr : static_cast<std::uint8_t*>(scales.data);
  p.dequantized = dequantized.scratch;
  p.ld_x = x.row_stride();
  p.ld_q = data.row_stride();
  p.ld_s = scales.row_stride();
  p.ld_dq = x.cols();
  p.m = static_cast<int>(x.rows());
  p.k = static_cast<int>(x.cols());
  p.in_type = in_type(x.dtype);
  p.rule = rule;
  p.as_is = dequantized.as_is;
  if (dequantized.scratch != nullptr && dequantized.zero.count > 0) {
    p.zero_for_next = {
        reinterpret_cast<std::uint32_t*>(static_cast<std::uint8_t*>(dequantized.scratch) +
                                         dequantized.zero.offset),
        static_cast<int>(dequantized.zero.count)};
  }
  check_cuda(device::launch_quantize(p, stream),
             fmt::format("{}: launching activation quantization", op));
}

}  // namespace detail

void quantize(const TensorView& x, const TensorView& data, const TensorView& scales,
              cudaStream_t stream, ScaleRule rule) {
  constexpr std::string_view kOp = "quantize";
  detail::check_quantize(kOp, x, data, scales, Location::kDevice);
  detail::require_aligned_rows(kOp, "out.data", data);
  if (x.rows() == 0) return;
  detail::launch_quantize_pass(kOp, x, data, scales, rule, stream);
}

}  // namespace mxlinear
