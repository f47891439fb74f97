// Host-side entry to the generic GEMM: its compiled configs and a launcher.
#pragma once

#include <cuda_runtime_api.h>

#include <span>

#include "device/common/gemm_params.hpp"

namespace mxlinear::device {

// A config serves W8A8 and W8A16 (GemmParams::x_as_is) by two instances of one tile. The W8A16
// instance's activation rows hold 16-bit x, twice the bytes of e4m3, so it needs more shared
// memory; a config whose W8A16 instance would not fit in one CTA's 227 KiB runs it with fewer
// stages. None does now: per CTA, W8A8 / W8A16, 16 x 32 (8 stages) 51,968 / 67,072 bytes,
// 64 x 64 (4 stages) 69,632 / 100,352, 128 x 128 (4 stages) 139,264 / 200,704.
struct GenericConfigInfo {
  int bm, bn;   // activation rows (tokens) and weight rows per CTA
  int wm, wn;   // the same per warp tile
  int warps_k;  // warps sharing each warp tile's K
  int threads, stages, smem_bytes;
  int stages_as_is, smem_bytes_as_is;  // the W8A16 instance's
};

// The compiled configs, in the order their index names them.
std::span<const GenericConfigInfo> generic_gemm_configs();

// Dynamic shared memory per CTA of config `config`'s W8A8 instance, or of its W8A16 instance
// (x_as_is); 0 for an unknown config.
int generic_gemm_smem_bytes(int config, bool x_as_is);

// Whether p's scale rows allow the cp.async scale path (4-byte aligned bases and strides; the
// activation's are not read with x_as_is).
bool scales_allow_cp_async(const GemmParams& p);

// Launches config `config` (an index into generic_gemm_configs()) for p.m > 0: W8A8, or W8A16
// when p.x_as_is (p.x must be set; cudaErrorInvalidValue otherwise). Returns the launch error, if
// any; sets the kernel's shared-memory limit on first use per device.
cudaError_t launch_generic_gemm(const GemmParams& p, int config, cudaStream_t stream);

}  // namespace mxlinear::device
