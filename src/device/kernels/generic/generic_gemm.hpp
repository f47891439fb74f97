// Host-side entry to the generic GEMM: its compiled configs and a launcher.
#pragma once

#include <cuda_runtime_api.h>

#include <span>
#include <string_view>

#include "device/common/gemm_params.hpp"

namespace mxlinear::device {

struct GenericConfigInfo {
  std::string_view name;  // every tile axis in the name: "bm128_bn128_wm64_wn32_s4"
  int bm, bn, threads, stages, smem_bytes;
};

// The compiled configs, in the order their index names them.
std::span<const GenericConfigInfo> generic_gemm_configs();

// Whether p's scale rows allow the cp.async scale path (4-byte aligned bases and strides).
bool scales_allow_cp_async(const GemmParams& p);

// Launches config `config` (an index into generic_gemm_configs()) for p.m > 0. Returns the launch
// error, if any; sets the kernel's shared-memory limit on first use per device.
cudaError_t launch_generic_gemm(const GemmParams& p, int config, cudaStream_t stream);

}  // namespace mxlinear::device
