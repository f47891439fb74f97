#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstddef>

#include "host/log.hpp"
#include "host/validate.hpp"
#include "mxlinear/selection.hpp"

namespace mxlinear {

DeviceDescription DeviceDescription::current() {
  DeviceDescription d;
  int count = 0;
  int device = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 ||
      cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return d;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return d;
  }
  d.name = prop.name;
  // Compute capability 9.0 runs sm_90a code (wgmma, setmaxnreg); that is the arch kernels need.
  d.arch = prop.major == 9 && prop.minor == 0 ? "sm_90a"
                                              : fmt::format("sm_{}{}", prop.major, prop.minor);
  d.sms = prop.multiProcessorCount;
  d.is_gpu = true;
  return d;
}

DeviceDescription DeviceDescription::parse(const std::string& spec) {
  if (spec == "cpu") return DeviceDescription{};
  const auto colon = spec.find(':');
  int sms = 0;
  // The arch is echoed in reports and messages: letters, digits and '_' only.
  const bool arch_ok =
      colon != std::string::npos && colon > 0 && colon <= 32 &&
      std::all_of(spec.begin(), spec.begin() + static_cast<std::ptrdiff_t>(colon), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_';
      });
  if (arch_ok) {
    const char* b = spec.data() + colon + 1;
    const char* e = spec.data() + spec.size();
    const auto [end, ec] = std::from_chars(b, e, sms);
    if (ec == std::errc() && end == e && sms > 0 && sms <= 4096) {
      DeviceDescription d;
      d.arch = spec.substr(0, colon);
      d.name = "described GPU";
      d.sms = sms;
      d.is_gpu = true;
      return d;
    }
  }
  detail::fail(ErrorCode::kInvalidArgument, "DeviceDescription::parse", "spec",
               fmt::format("is '{}'; expected 'cpu' or '<arch>:<sms>' such as 'sm_90a:132' (arch: "
                           "letters, digits and '_'; sms: 1 to 4096)",
                           detail::for_display(spec)));
}

std::string DeviceDescription::to_string() const {
  return is_gpu ? fmt::format("{} ({}, {} SMs)", name, arch, sms) : "cpu (no GPU)";
}

}  // namespace mxlinear
