// The error model. Every public entry point reports bad input by throwing mxlinear::Error; none
// calls exit or abort, and none writes to the caller's output when it throws. The message names
// the argument, the value it had and what was expected, e.g.
//   "linear: argument 'weight.scales' has shape [256, 3]; expected [256, 4] (N, K/32)".
#pragma once

#include <stdexcept>
#include <string>

namespace mxlinear {

enum class ErrorCode {
  kInvalidArgument,  // a value, shape, dtype or stride the operation cannot take
  kUnsupported,      // valid input that this build or device cannot run (no GPU, wrong arch)
  kCudaError,        // the CUDA runtime reported a failure
  kInternal,         // a broken invariant inside the library: a bug to report
};

const char* to_string(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string argument, const std::string& message);
  ErrorCode code() const noexcept { return code_; }
  // The argument the error is about ("" where none applies, e.g. a CUDA failure).
  const std::string& argument() const noexcept { return argument_; }

 private:
  ErrorCode code_;
  std::string argument_;
};

}  // namespace mxlinear
