// Turns CUDA runtime failures into mxlinear::Error.
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

namespace mxlinear::detail {

// Throws Error(kCudaError) naming the operation and the CUDA error if status is not success.
void check_cuda(cudaError_t status, std::string_view what);

}  // namespace mxlinear::detail
