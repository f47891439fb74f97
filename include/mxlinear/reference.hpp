// The CPU reference linear: the oracle every GPU kernel is tested against, and the kernel of last
// resort on a machine without a GPU. out = deq(A) * deq(W)^T (+ bias) (W8A8), or x * deq(W)^T
// (+ bias) (W8A16), accumulated in fp64 and rounded once to out's dtype. All views must be on the
// host.
#pragma once

#include <optional>

#include "mxlinear/format.hpp"
#include "mxlinear/linear_types.hpp"

namespace mxlinear {

// x: [..., K] bf16, fp16 or fp32, quantized here with `rule`. out: [..., N] bf16, fp16 or fp32.
// bias: [N] bf16 or fp32, optional.
void reference_linear(const TensorView& x, const MxWeight& weight,
                      const std::optional<TensorView>& bias, const TensorView& out,
                      ScaleRule rule = ScaleRule::kRceil);

// The same layer on an activation that is already quantized.
void reference_linear(const QuantizedActivation& x, const MxWeight& weight,
                      const std::optional<TensorView>& bias, const TensorView& out);

// The same, but the unrounded fp64 result into out_f64 (row-major [M, N]); what tests and
// `mxlinear check` measure errors against.
void reference_linear_f64(const QuantizedActivation& x, const MxWeight& weight,
                          const std::optional<TensorView>& bias, double* out_f64);

// W8A16: out = x * deq(W)^T (+ bias) with a bf16 or fp16 x as it is, accumulated in fp64 and
// rounded once to out's dtype.
void reference_linear_w8a16(const TensorView& x, const MxWeight& weight,
                            const std::optional<TensorView>& bias, const TensorView& out);

// The same, unrounded, into out_f64 (row-major [M, N]).
void reference_linear_w8a16_f64(const TensorView& x, const MxWeight& weight,
                                const std::optional<TensorView>& bias, double* out_f64);

}  // namespace mxlinear
