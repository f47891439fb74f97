#include "mxlinear/diagnostics.hpp"

#include <fmt/format.h>

#include <string>

#include "device/timeline.hpp"
#include "host/cuda_check.hpp"
#include "host/validate.hpp"

namespace mxlinear {

static_assert(kTimelineStamps == device::timeline::kStamps);
static_assert(std::size(kTimelinePhases) == device::timeline::kStored + 1);

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
                 fmt::format("is '{}', expected 'decode', 'gemv' or 'prefill'", kernel));
  }
  detail::check_cuda(e, "set_kernel_timeline");
}

}  // namespace mxlinear
