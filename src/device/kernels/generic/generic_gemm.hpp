// Host-side entry to the generic GEMM: its compiled configs and a launcher.
#pragma once

#include <cuda_runtime_api.h>

#include <span>

#include "device/common/gemm_params.hpp"

namespace mxlinear::device {

struct GenericConfigInfo {
  int bm, bn;   // activation rows (tokens) and weight rows per CTA
  int wm, wn;   // the same per warp tile
  int warps_k;  // warps sharing each warp tile's K
  int threads, stages, smem_bytes;
};

// The compiled configs, in the order their index names them.
std::span<const GenericConfigInfo> generic_gemm_configs();

// Whether p's scale rows allow the cp.async scale path (4-byte aligned bases and strides).
bool scales_allow_cp_async(const GemmParams& p);

// Launches config `config` (an index into generic_gemm_configs()) for p.m > 0. Returns the launch
// error, if any; sets the kernel's shared-memory limit on first use per device.
cudaError_t launch_generic_gemm(const GemmParams& p, int config, cudaStream_t stream);

}  // namespace mxlinear::device
