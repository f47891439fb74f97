// The Hopper prefill kernel's registry entry.
#pragma once

#include <memory>
#include <string>

#include "device/kernels/prefill/prefill_gemm.hpp"
#include "host/registry/kernel.hpp"

namespace mxlinear {

std::shared_ptr<const Kernel> make_prefill_kernel();

// The config name of `instance` with K split `splits` ways ("w128_t256_st4_k64_overlap_split2";
// prefill_kernel.cpp's header spells out each part).
std::string prefill_config_name(const device::PrefillInstanceInfo& instance, int splits);

}  // namespace mxlinear
