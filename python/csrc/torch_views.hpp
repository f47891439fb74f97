// Conversions between torch's stable-ABI tensors and mxlinear's TensorView, plus the argument
// checks the ops share. Everything here uses only torch's stable C ABI (torch/csrc/stable and
// torch/headeronly), so the extension loads under every torch release from the one it targets.
#pragma once

#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mxlinear/mxlinear.hpp"

namespace mxlinear_torch {

using torch::headeronly::ScalarType;
using Tensor = torch::stable::Tensor;

inline constexpr std::int64_t kBlock = 32;

// "[2, 3, 64]"
std::string shape_string(const Tensor& t);

// "cpu" or "cuda:1"
std::string device_string(const Tensor& t);

bool same_device(const Tensor& a, const Tensor& b);

bool is_activation_dtype(ScalarType t);

mxlinear::DType to_mx_dtype(ScalarType t);

// A new contiguous tensor of `sizes` and `dtype` on like's device. It goes straight to
// aoti_torch_empty_strided rather than through the dispatcher by op name, which costs a
// microsecond or more a call: the ops allocate their output and workspace on every call.
Tensor empty_on_device_of(const Tensor& like, const std::vector<std::int64_t>& sizes,
                          ScalarType dtype);

// t itself when contiguous (no dispatcher call), else a contiguous copy.
Tensor as_contiguous(const Tensor& t);

// A 2-D view [rows, cols] of a contiguous tensor's storage.
mxlinear::TensorView view2d(const Tensor& t, std::int64_t rows, std::int64_t cols);

// A 1-D view [n] of a contiguous tensor's storage.
mxlinear::TensorView view1d(const Tensor& t, std::int64_t n);

// The scale rules by index, as mxlinear::_quantize takes them: 0 "rceil", 1 "floor".
mxlinear::ScaleRule rule_from_index(std::int64_t index);

// The activation modes by index, as mxlinear::linear takes them: -1 the process default
// (MXLINEAR_ACTIVATION), 0 "mx" (W8A8), 1 "bf16" (W8A16). The op names the argument 'activation'.
mxlinear::ActivationMode activation_from_index(const char* op, std::int64_t index);

// The batch-invariant switch by index, as mxlinear::linear and mxlinear::linear_quantized take
// it: -1 nullopt (the library applies MXLINEAR_BATCH_INVARIANT), 0 off, 1 on. The op names the
// argument 'batch_invariant'.
std::optional<bool> batch_invariant_from_index(const char* op, std::int64_t index);

// Checks that x's dtype suits `mode`: W8A16 multiplies a bf16 or fp16 x as it is, so a float32 x
// is refused there, naming 'x'.
void check_activation_mode(const char* op, const Tensor& x, mxlinear::ActivationMode mode);

// Checks that t (the argument `name`) is [..., K] with K a positive multiple of 32, on the CPU or
// a CUDA device; returns K.
std::int64_t check_last_dim(const char* op, const char* name, const Tensor& t);

// Checks that x is a float activation [..., K] with K a positive multiple of 32; returns K.
std::int64_t check_activation(const char* op, const Tensor& x);

// Checks weight [N, K] e4m3 and weight_scale [N, K/32] uint8/e8m0 on x's device; returns N.
std::int64_t check_weight(const char* op, const Tensor& x, const Tensor& weight,
                          const Tensor& weight_scale, std::int64_t k);

// Appends text or an integer to a message. No iostreams: the extension may be linked with its own
// copy of libstdc++ (a static one, on some systems) whose iostreams locale is never set up, and
// inserting a number into a stream there crashes. (fmt is out too: torch's include directory
// carries an fmt that refuses stable-ABI builds.)
inline void append(std::string& out, const char* s) { out += s; }
inline void append(std::string& out, const std::string& s) { out += s; }
template <std::integral T>
void append(std::string& out, T value) {
  out += std::to_string(value);
}

// Its arguments as one string (the message of a failed check).
template <typename... Args>
std::string concat(const Args&... args) {
  std::string out;
  (append(out, args), ...);
  return out;
}

// The message of a failed check: "<op>: argument '<name>' ...". torch turns the exception
// into a Python RuntimeError.
[[noreturn]] void fail(const std::string& message);

#define MXLINEAR_TORCH_CHECK(cond, ...)                                         \
  do {                                                                          \
    if (!(cond)) ::mxlinear_torch::fail(::mxlinear_torch::concat(__VA_ARGS__)); \
  } while (false)

}  // namespace mxlinear_torch
