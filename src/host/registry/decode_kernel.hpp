// The Hopper decode kernel's registry entry.
#pragma once

#include <memory>

#include "host/registry/kernel.hpp"

namespace mxlinear {

std::shared_ptr<const Kernel> make_decode_kernel();

}  // namespace mxlinear
