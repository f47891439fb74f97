// Host-side entry to the MX GEMV (mma.sync fed through registers or a per-warp cp.async ring,
// 8 or 16 tokens and 16 or 48 weight rows per CTA): its compiled instances and a launcher.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <string_view>

#include "device/common/gemm_params.hpp"
#include "device/common/sm90.hpp"

namespace mxlinear::device {

struct GemvInstanceInfo {
  int tokens;  // activation rows per CTA
  int warps;   // K ranges per 16-row tile
  int stages;  // slots of the per-warp shared-memory weight ring; 0: weights through registers
  int splits;  // K ranges per cluster of CTAs (1: no cluster)
  int rows;    // weight rows per CTA: 16 per row tile
};

std::span<const GemvInstanceInfo> gemv_gemm_instances();

// Shared memory of one CTA of `instance` at M x K: its min(M, tokens) staged e4m3 rows and
// scale bytes, and the warps' partial tiles.
int gemv_gemm_smem_bytes(int instance, std::int64_t m, int k);

// Empty when p suits the GEMV (16-byte aligned weight rows; 4-byte aligned e4m3 activation
// rows, or 16-byte aligned rows of the bf16/fp16 activation it quantizes itself), else what is
// wrong. Shared memory is checked by the caller (gemv_gemm_smem_bytes).
std::string_view gemv_gemm_unsupported(const GemmParams& p);

// out = deq(a) deq(w)^T (+ bias) for p.m > 0, launched as a programmatic dependent of the
// previous kernel on the stream. Returns the launch error, if any.
cudaError_t launch_gemv_gemm(const GemmParams& p, int instance, cudaStream_t stream);

}  // namespace mxlinear::device
