// The operands of an MXFP8 linear layer, as views over the caller's memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "mxlinear/tensor.hpp"

namespace mxlinear {

// Checkpoint layout: data [N, K] e4m3 and scales [N, K/32] e8m0, both row-major.
struct MxWeight {
  TensorView data;
  TensorView scales;
};

// An activation a producer already quantized (a fused norm or activation kernel):
// data [..., K] e4m3 (its shape is the activation's original shape), scales [rows, K/32] e8m0
// row-major, and the dtype the unquantized activation had, which the output takes by default.
struct QuantizedActivation {
  TensorView data;
  TensorView scales;
  DType original_dtype = DType::kBF16;
};

// What the linear multiplies the dequantized weights by (docs/MXFP8.md).
enum class ActivationMode : std::uint8_t {
  // W8A8, the checkpoint's own semantics: x quantized to MXFP8 (RCEIL) first. The default.
  kW8A8,
  // W8A16: a bf16 or fp16 x as it is, the semantics of weight-only MXFP8 kernels. More accurate,
  // and it skips the activation's quantization.
  kW8A16,
};

// The activation operand a kernel multiplies, as the registry selects on it: the MX activation
// (W8A8: quantized by the linear, by the kernel or by the caller), or a 16-bit one as it is
// (W8A16).
enum class ActivationOperand : std::uint8_t { kMx, kBf16, kF16 };

// "mx" and "bf16", as MXLINEAR_ACTIVATION, the CLI and the Python package spell the modes.
std::string_view activation_mode_name(ActivationMode mode);
// The mode a name spells; nullopt for any other string.
std::optional<ActivationMode> parse_activation_mode(std::string_view name);

// The operand a call in `mode` multiplies for an activation of `x_dtype` (bf16, fp16 or fp32 for
// the 16-bit entry point, e4m3 for the pre-quantized one): kMx in W8A8 and for e4m3; in W8A16,
// kBf16 or kF16, and nullopt for fp32 (W8A16 takes a 16-bit activation only).
std::optional<ActivationOperand> activation_operand(ActivationMode mode, DType x_dtype);

// The operand in words, as reports and errors give it: "W8A8 (x quantized to MXFP8)",
// "W8A16 (bf16 x as it is)" or "W8A16 (fp16 x as it is)".
std::string_view describe(ActivationOperand operand);

// Per-call choices of linear().
struct LinearOptions {
  // W8A8 or W8A16 (the 16-bit entry point; a pre-quantized activation is W8A8); nullopt:
  // MXLINEAR_ACTIVATION (mx or bf16), W8A8 where it is unset.
  std::optional<ActivationMode> activation = std::nullopt;
  // Batch-invariant mode (docs/MXFP8.md): each output row's bits depend on that row of x, the
  // weights and the mode alone, never on M or on the row's place in the batch. Only kernels and
  // configs that sum every output's K products in one order fixed by K serve the call. nullopt:
  // MXLINEAR_BATCH_INVARIANT (1 or 0), off where it is unset. (Default member initializers keep
  // LinearOptions{mode} and LinearOptions{.batch_invariant = true} free of missing-field
  // warnings.)
  std::optional<bool> batch_invariant = std::nullopt;
};

// Device scratch memory for one linear() call (the quantized activation, a kernel's scratch). An
// empty workspace (null, 0 bytes) makes the call allocate and free one with
// cudaMallocAsync/cudaFreeAsync on the stream.
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

// The shape of one linear call after validation: x [M, K] times W[N, K]^T.
struct LinearShape {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
};

}  // namespace mxlinear
