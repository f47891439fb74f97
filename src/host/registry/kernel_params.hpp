// A validated call as the plain launch parameters the device kernels take.
#pragma once

#include "device/common/gemm_params.hpp"
#include "host/registry/kernel.hpp"

namespace mxlinear::detail {

device::GemmParams gemm_params(const KernelCall& call);

// The verdict of every sm_90a kernel: a GPU, of the Hopper architecture.
Verdict needs_sm90a(const DeviceDescription& device);

// Copies a (possibly strided) 2-D matrix between any two locations on the stream.
void copy_rows(const TensorView& from, const TensorView& to, cudaStream_t stream);

// Copies a weight in the checkpoint layout (the layout of kernels that need no other).
void copy_weight(const MxWeight& in, const MxWeight& out, cudaStream_t stream);

}  // namespace mxlinear::detail
