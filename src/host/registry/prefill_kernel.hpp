// The Hopper prefill kernel's registry entry.
#pragma once

#include <memory>

#include "mxlinear/registry.hpp"

namespace mxlinear {

std::shared_ptr<const Kernel> make_prefill_kernel();

}  // namespace mxlinear
