// The CUDA-core GEMV's registry entry.
#pragma once

#include <memory>

#include "host/registry/kernel.hpp"

namespace mxlinear {

// as_is: the W8A16 kernel "gemv_a16" (a 16-bit x as it is); else the W8A8 "gemv".
std::shared_ptr<const Kernel> make_gemv_kernel(bool as_is = false);

}  // namespace mxlinear
