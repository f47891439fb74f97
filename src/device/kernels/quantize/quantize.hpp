// Host-side entry to the activation quantization kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "device/common/zeroed_words.hpp"
#include "mxlinear/format.hpp"

namespace mxlinear::device {

enum class InType : std::uint8_t { kBF16, kF16, kF32 };

// x [M, K] (row stride ld_x elements) -> data [M, K] e4m3 (row stride ld_q) and scales
// [M, K/32] e8m0 (row stride ld_s), byte-identical to the CPU reference. With `dequantized`
// set, the same pass also writes what the prefill kernel's activation pre-pass would make of
// them (activation_bf16.hpp: exact bf16, K permuted inside blocks; row stride ld_dq elements,
// 16-byte aligned rows), saving that pass and its launch. With `dequantized` set, q and scales
// may both be null: then only the bf16 values are written (the prefill kernel reads nothing
// else), a third fewer bytes written.
struct QuantizeParams {
  const void* x = nullptr;
  std::uint8_t* q = nullptr;
  std::uint8_t* scales = nullptr;
  void* dequantized = nullptr;
  std::int64_t ld_x = 0, ld_q = 0, ld_s = 0, ld_dq = 0;
  int m = 0, k = 0;
  InType in_type = InType::kBF16;
  ScaleRule rule = ScaleRule::kRceil;
  ZeroedWords zero_for_next;  // with `dequantized`: the prefill GEMM's stream-K flags
  // W8A16: a bf16 x is written into the `dequantized` layout as it is, not quantized (q and
  // scales null, in_type kBF16).
  bool as_is = false;
};

cudaError_t launch_quantize(const QuantizeParams& p, cudaStream_t stream);

}  // namespace mxlinear::device
