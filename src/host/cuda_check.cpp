#include "host/cuda_check.hpp"

#include <fmt/format.h>

#include "mxlinear/error.hpp"

namespace mxlinear::detail {

void check_cuda(cudaError_t status, std::string_view what) {
  if (status == cudaSuccess) return;
  throw Error(
      ErrorCode::kCudaError, "",
      fmt::format("{}: {} ({})", what, cudaGetErrorName(status), cudaGetErrorString(status)));
}

}  // namespace mxlinear::detail
