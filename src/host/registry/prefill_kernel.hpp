// The Hopper prefill kernel's registry entry.
#pragma once

#include <memory>

#include "device/kernels/prefill/prefill_gemm.hpp"
#include "host/registry/kernel.hpp"

namespace mxlinear {

// as_is: the W8A16 kernel "prefill_a16" (a bf16 x as it is); else the W8A8 "prefill".
std::shared_ptr<const Kernel> make_prefill_kernel(bool as_is = false);

}  // namespace mxlinear
