// The MXFP8 linear layer on the GPU.
//
// Both entry points take views over device memory and run asynchronously on `stream`. With a
// workspace supplied, a call never allocates, synchronizes or reads device memory from the host,
// so it can be captured into a CUDA graph. Bad input throws mxlinear::Error before anything is
// launched; out is written only by a successful launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>

#include "mxlinear/format.hpp"
#include "mxlinear/linear_types.hpp"

namespace mxlinear {

// Bytes of workspace linear() needs for an activation of `rows` rows of `k` features on the
// current device, on either entry point, in either mode, and whichever kernel serves the call: the
// quantized activation plus the most scratch any kernel plans for such a call there (a bf16 copy of
// the activation, 2 bytes per element, and from 256 rows fp32 partial tiles for each SM, about 16.5
// MiB on a 132-SM GPU whatever the shape). It depends on the device's SM count: a workspace sized
// for one device is refused on a device that needs more.
std::size_t linear_workspace_bytes(std::int64_t rows, std::int64_t k);

// W8A8: out = deq(quantize(x)) * deq(weight)^T (+ bias), x quantized with the default rule
// (RCEIL). W8A16 (options.activation, or MXLINEAR_ACTIVATION=bf16): out = x * deq(weight)^T
// (+ bias), x as it is. x: [..., K] bf16 or fp16 (or fp32, W8A8 only); weight: data [N, K] e4m3
// + scales [N, K/32] e8m0; bias: [N] bf16 or fp32; out: [..., N] bf16, fp16 or fp32 with the
// rows of x. The same call gives the same bits every run; with options.batch_invariant (or
// MXLINEAR_BATCH_INVARIANT=1) a row's bits also never depend on M or on the row's place in x.
// Throws Error(kUnsupported) on a GPU other than sm_90a (Hopper), unless
// MXLINEAR_BACKEND=reference asks for the CPU reference there (slow: it copies through the host
// and synchronizes the stream).
void linear(const TensorView& x, const MxWeight& weight, const std::optional<TensorView>& bias,
            const TensorView& out, cudaStream_t stream, const Workspace& workspace = {},
            const LinearOptions& options = {});

// The same layer on an activation a producer already quantized (W8A8; options.activation, if
// given, must be W8A8). Some kernels need scratch (a bf16 copy of the activation); an empty
// workspace makes the call allocate it on the stream when needed, a given one must have
// linear_workspace_bytes(M, K) bytes.
void linear(const QuantizedActivation& x, const MxWeight& weight,
            const std::optional<TensorView>& bias, const TensorView& out, cudaStream_t stream,
            const Workspace& workspace = {}, const LinearOptions& options = {});

// Quantizes x ([..., K] bf16, fp16 or fp32) on the GPU into data/scales, byte-identical to
// quantize_rows(). data rows must be 16-byte aligned (address and row stride).
void quantize(const TensorView& x, const TensorView& data, const TensorView& scales,
              cudaStream_t stream, ScaleRule rule = ScaleRule::kRceil);

// Whether a CUDA device of compute capability 9.0 is present and usable.
bool gpu_available();

}  // namespace mxlinear
