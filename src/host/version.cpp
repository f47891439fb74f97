#include "mxlinear/version.hpp"

#ifndef MXLINEAR_BUILD_INFO
#error "the build defines MXLINEAR_BUILD_INFO"
#endif

namespace mxlinear {

std::string_view version() { return MXLINEAR_VERSION_STRING; }

std::string_view build_info() { return MXLINEAR_BUILD_INFO; }

}  // namespace mxlinear
