// The CUDA-core GEMV's registry entry.
#pragma once

#include <memory>

#include "host/registry/kernel.hpp"

namespace mxlinear {

std::shared_ptr<const Kernel> make_gemv_kernel();

}  // namespace mxlinear
