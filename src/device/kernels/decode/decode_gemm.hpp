// Host-side entry to the Hopper decode GEMM: its compiled configs and a launcher.
#pragma once

#include <cuda_runtime_api.h>

#include <span>
#include <string_view>

#include "device/common/gemm_params.hpp"
#include "device/common/sm90.hpp"

namespace mxlinear::device {

struct DecodeInstanceInfo {
  int tokens;           // activation rows per CTA (wgmma N)
  int stages;           // ring depth
  int consumer_groups;  // consumer warpgroups, taking alternate stages
  int fixed_smem_bytes;
  int scale_bytes_per_chunk;  // shared memory per 128-K chunk of the CTA's K range
  // Fixed shared memory of the instance's twin that quantizes a 16-bit activation itself
  // (GemmParams::x); 0 when it has none.
  int quantizing_fixed_smem_bytes;
};

// Shared memory of one CTA of `instance` (or, `quantizing`, of its twin that quantizes x itself)
// at K with `splits` K splits; at most 227 KiB launch.
int decode_gemm_smem_bytes(int instance, int k, int splits, bool quantizing = false);

// CTAs of `smem_bytes` each that one SM holds: the decode kernel's residency is bounded by
// shared memory, not registers.
constexpr int decode_ctas_per_sm(int smem_bytes) { return ctas_per_sm_by_smem(smem_bytes); }

// The compiled instances (template configurations), in the order their index names them.
std::span<const DecodeInstanceInfo> decode_gemm_instances();

// The largest split count (= thread-block cluster size) a launch may ask for.
inline constexpr int kDecodeMaxSplits = 8;

// Whether p suits the decode kernel: K % 32 == 0 (a last 128-K chunk may be partial), 16-byte
// aligned e4m3 rows, scale rows of any alignment; with p.x set (the instance's quantizing twin;
// decode_gemm_instances() says which have one), 16-byte aligned bf16/fp16 activation rows instead
// of the e4m3 activation. Returns an empty view when it does, else what is wrong.
std::string_view decode_gemm_unsupported(const GemmParams& p);

// Launches instance `instance` (its quantizing twin when p.x is set) with `splits` K splits
// (1..8, at most ceil(K / 128)) for p.m > 0, as a programmatic dependent launch. Returns the launch
// error, if any (cudaErrorInvalidValue for p.x on an instance without a twin).
cudaError_t launch_decode_gemm(const GemmParams& p, int instance, int splits, cudaStream_t stream);

}  // namespace mxlinear::device
