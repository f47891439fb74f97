// The library's version. The macros are the headers' version, fixed when the code that includes
// them is compiled; version() is the version of the library linked in.
#pragma once

#include <string_view>

#include "mxlinear/version_macros.hpp"  // MXLINEAR_VERSION_MAJOR, _MINOR, _PATCH, _STRING

namespace mxlinear {

// "MAJOR.MINOR.PATCH", e.g. "0.1.0".
std::string_view version();

// The CUDA toolkit the library was built with and its device code's target, e.g.
// "CUDA 13.0, sm_90a".
std::string_view build_info();

}  // namespace mxlinear
