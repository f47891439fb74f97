#include "host/diagnostics.hpp"

#include <fmt/format.h>

#include <limits>
#include <string>

#include "device/common/timeline.hpp"
#include "device/kernels/prefill/activation_bf16.hpp"
#include "host/cuda_check.hpp"
#include "host/log.hpp"
#include "host/validate.hpp"

namespace mxlinear {

static_assert(kTimelineStamps == device::timeline::kStamps);
static_assert(std::size(kTimelinePhases) == device::timeline::kStored + 1);
static_assert(kTimelineSmWord == device::timeline::kSmWord &&
              kTimelineSmWord >= static_cast<int>(std::size(kTimelinePhases)));

bool timeline_compiled() {
#if defined(MXLINEAR_TIMELINE)
  return true;
#else
  return false;
#endif
}

void set_kernel_timeline(std::string_view kernel, std::uint32_t* buffer,
                         std::uint64_t capacity_ctas) {
  if (!timeline_compiled()) {
    detail::fail(ErrorCode::kUnsupported, "set_kernel_timeline", "kernel",
                 "cannot be timed: this library was built without -DMXLINEAR_TIMELINE=ON");
  }
  cudaError_t e = cudaSuccess;
  if (kernel == "decode") {
    e = device::timeline::set_decode_buffer(buffer, buffer ? capacity_ctas : 0);
  } else if (kernel == "gemv") {
    e = device::timeline::set_gemv_buffer(buffer, buffer ? capacity_ctas : 0);
  } else if (kernel == "prefill") {
    e = device::timeline::set_prefill_buffer(buffer, buffer ? capacity_ctas : 0);
  } else {
    detail::fail(ErrorCode::kInvalidArgument, "set_kernel_timeline", "kernel",
                 fmt::format("is '{}', expected 'decode', 'gemv' or 'prefill'",
                             detail::for_display(kernel)));
  }
  detail::check_cuda(e, "set_kernel_timeline");
}

void run_prefill_activation_prepass(const QuantizedActivation& x, void* out, cudaStream_t stream) {
  constexpr std::string_view kOp = "run_prefill_activation_prepass";
  detail::check_mx_pair(kOp, "x", x.data, x.scales, Location::kDevice);
  const auto q = reinterpret_cast<std::uintptr_t>(x.data.data);
  const std::int64_t ld_q = x.data.row_stride();
  if (q % 8 != 0 || (x.data.rows() > 1 && ld_q % 8 != 0)) {
    detail::fail(ErrorCode::kInvalidArgument, kOp, "x",
                 fmt::format("has e4m3 rows at {:#x}, {} bytes apart; expected 8-byte aligned rows",
                             q, ld_q));
  }
  if (x.data.rows() > std::numeric_limits<int>::max()) {
    detail::fail(ErrorCode::kUnsupported, kOp, "x",
                 fmt::format("has {} rows; expected at most {}", x.data.rows(),
                             std::numeric_limits<int>::max()));
  }
  if (out == nullptr || reinterpret_cast<std::uintptr_t>(out) % 16 != 0) {
    detail::fail(ErrorCode::kInvalidArgument, kOp, "out",
                 fmt::format("is {}; expected device memory 16-byte aligned", out));
  }
  device::ActivationBf16Params p;
  p.q = static_cast<const std::uint8_t*>(x.data.data);
  p.scales = static_cast<const std::uint8_t*>(x.scales.data);
  p.ld_q = ld_q;
  p.ld_scales = x.scales.row_stride();
  p.out = out;
  p.ld_out = x.data.cols();
  p.m = static_cast<int>(x.data.rows());
  p.k = static_cast<int>(x.data.cols());
  detail::check_cuda(device::launch_activation_bf16(p, stream),
                     fmt::format("{}: launching the pre-pass", kOp));
}

}  // namespace mxlinear
