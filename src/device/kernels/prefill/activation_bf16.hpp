// The prefill kernel's activation operand: an MX activation dequantized to bf16, exactly (down
// to bf16's subnormal grid), with K permuted inside every 32-element block the way the Hopper
// kernels read their weight fragments: element 8t + e (t = 0..3, e = 0..7) of a block goes to
// 16 * (e / 4) + 8 * ((e / 2) % 2) + 2t + e % 2.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "device/common/zeroed_words.hpp"

namespace mxlinear::device {

struct ActivationBf16Params {
  const std::uint8_t* q = nullptr;       // [M, K] e4m3, rows 8-byte aligned
  const std::uint8_t* scales = nullptr;  // [M, K/32] e8m0
  std::int64_t ld_q = 0, ld_scales = 0;  // bytes
  void* out = nullptr;        // [M, K] bf16, permuted, 16-byte aligned, row stride ld_out elements
  std::int64_t ld_out = 0;    // a multiple of 8
  int m = 0, k = 0;           // k % 32 == 0
  ZeroedWords zero_for_next;  // the prefill GEMM's stream-K flags, when it runs one
};

// The logical position of physical element e (0..31) of a block.
inline constexpr int permuted_position(int e) {
  const int t = e / 8, within = e % 8;
  return 16 * (within / 4) + 8 * ((within / 2) % 2) + 2 * t + within % 2;
}

// Whether a pass over an [m, k] activation stores each block's bytes by quads of lanes (whole
// 16-byte pieces) rather than in place; both write the same bytes.
bool activation_bf16_quad_stores(int m, int k);

cudaError_t launch_activation_bf16(const ActivationBf16Params& p, cudaStream_t stream);

}  // namespace mxlinear::device
