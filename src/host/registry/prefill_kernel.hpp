// The Hopper prefill kernel's registry entry.
#pragma once

#include <memory>

#include "device/kernels/prefill/prefill_gemm.hpp"
#include "host/registry/kernel.hpp"

namespace mxlinear {

std::shared_ptr<const Kernel> make_prefill_kernel();

}  // namespace mxlinear
