// Host-side entry to the Hopper prefill GEMM: its compiled instances and a launcher. The
// activation operand is the bf16 pre-pass output (activation_bf16.hpp), not p.a.
#pragma once

#include <cuda_runtime_api.h>

#include <span>
#include <string_view>

#include "device/gemm_params.hpp"

namespace mxlinear::device {

struct PrefillInstanceInfo {
  int stages;
  int fixed_smem_bytes;
};

std::span<const PrefillInstanceInfo> prefill_gemm_instances();

// Shared memory of one CTA of `instance` at K (the ring plus every weight scale byte of K).
int prefill_gemm_smem_bytes(int instance, int k);

// Empty when p suits the prefill kernel (K % 128 == 0, 16-byte aligned weight rows, the
// driver's TMA encoder), else what is wrong. The activation operand is checked by the launcher.
std::string_view prefill_gemm_unsupported(const GemmParams& p);

// out = deq(a) deq(w)^T (+ bias) for p.m > 0, with a_bf16 = the permuted bf16 activation
// [p.m, p.k] (row stride ld_a_bf16 elements, 16-byte aligned rows), launched as a
// programmatic dependent of the pre-pass. Returns the launch error, if any.
cudaError_t launch_prefill_gemm(const GemmParams& p, const void* a_bf16, std::int64_t ld_a_bf16,
                                int instance, cudaStream_t stream);

}  // namespace mxlinear::device
