// The public format functions: the host/device definitions of device/common/mx_format.hpp.
#include "mxlinear/format.hpp"

#include "device/common/mx_format.hpp"

namespace mxlinear {

float e4m3_to_float(std::uint8_t q) { return device::e4m3_to_float(q); }
std::uint8_t float_to_e4m3(float x) { return device::float_to_e4m3(x); }
bool e4m3_is_nan(std::uint8_t q) { return device::e4m3_is_nan(q); }
float e8m0_to_float(std::uint8_t b) { return device::e8m0_to_float(b); }
float e8m0_inverse_to_float(std::uint8_t b) { return device::e8m0_inverse_to_float(b); }
std::uint8_t e8m0_scale_for_amax(float amax, ScaleRule rule) {
  return device::e8m0_scale_for_amax(amax, rule);
}

}  // namespace mxlinear
