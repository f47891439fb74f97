// Host-side entry to the MX GEMV (mma.sync fed through registers or a per-warp cp.async ring,
// 8 or 16 tokens and 8, 16, 32 or 48 weight rows per CTA): its compiled instances and a launcher.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <string_view>

#include "device/common/gemm_params.hpp"
#include "device/common/sm90.hpp"

namespace mxlinear::device {

struct GemvInstanceInfo {
  int tokens;     // activation rows per CTA
  int warps;      // K ranges per row tile
  int stages;     // slots of the per-warp shared-memory weight ring; 0: weights through registers
  int splits;     // K ranges per cluster of CTAs (1: no cluster)
  int rows;       // weight rows per CTA: tile_rows per row tile
  int tile_rows;  // weight rows per row tile: 16, or 8 (k parts, the weights as the mma's B)
  bool k_parts;   // the batch-invariant mode's K parts and order (gemv_gemm.cuh); no fp16 x
  // k parts, W8A8: given a 16-bit x, each CTA quantizes it into the scaled domain itself (the
  // others, given one, quantize it into the scaled form; the linear gives them e4m3 and scales)
  bool quantizes_unscaled;
};

std::span<const GemvInstanceInfo> gemv_gemm_instances();

// Shared memory of one CTA of `instance` at M x K: its weight ring, its min(M, tokens) staged
// activation rows (W8A8: e4m3 rows and their scales; W8A16, x_as_is: bf16/fp16 rows of twice the
// bytes, no scales) and the warps' partial tiles; 0 for an unknown instance. The caller refuses
// configs above kSm90MaxSmemPerCta (W8A16 reaches it at a smaller K).
int gemv_gemm_smem_bytes(int instance, std::int64_t m, int k, bool x_as_is);
// The same for W8A8.
int gemv_gemm_smem_bytes(int instance, std::int64_t m, int k);

// Empty when p suits the GEMV (16-byte aligned weight rows; 4-byte aligned e4m3 activation
// rows, or 16-byte aligned rows of the bf16/fp16 activation it quantizes itself), else what is
// wrong. Shared memory is checked by the caller (gemv_gemm_smem_bytes).
std::string_view gemv_gemm_unsupported(const GemmParams& p);

// out = deq(a) deq(w)^T (+ bias) for p.m > 0, launched as a programmatic dependent of the
// previous kernel on the stream; with p.x_as_is (W8A16), out = x deq(w)^T (+ bias) with the bf16
// or fp16 x (p.x_is_f16) as it is, by the instance's W8A16 variant (every instance has one;
// cudaErrorInvalidValue without p.x, and for fp16 x on a k-parts instance). Returns the launch
// error, if any.
cudaError_t launch_gemv_gemm(const GemmParams& p, int instance, cudaStream_t stream);

}  // namespace mxlinear::device
