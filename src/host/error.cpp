#include "mxlinear/error.hpp"

namespace mxlinear {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kCudaError:
      return "CUDA error";
    case ErrorCode::kInternal:
      return "internal error";
  }
  return "unknown error";
}

Error::Error(ErrorCode code, std::string argument, const std::string& message)
    : std::runtime_error(message), code_(code), argument_(std::move(argument)) {}

}  // namespace mxlinear
