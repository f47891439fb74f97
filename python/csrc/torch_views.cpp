#include "torch_views.hpp"

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/ops.h>

#include <stdexcept>

#include "environment.hpp"

namespace mxlinear_torch {

std::string shape_string(const Tensor& t) {
  std::string out = "[";
  for (std::int64_t d = 0; d < t.dim(); ++d) out += (d ? ", " : "") + std::to_string(t.size(d));
  return out + "]";
}

std::string device_string(const Tensor& t) {
  if (t.is_cpu()) return "cpu";
  return concat(t.is_cuda() ? "cuda:" : "device:", t.get_device_index());
}

bool same_device(const Tensor& a, const Tensor& b) {
  return a.is_cuda() == b.is_cuda() && a.is_cpu() == b.is_cpu() &&
         a.get_device_index() == b.get_device_index();
}

bool is_activation_dtype(ScalarType t) {
  return t == ScalarType::BFloat16 || t == ScalarType::Half || t == ScalarType::Float;
}

void fail(const std::string& message) { throw std::runtime_error(message); }

mxlinear::DType to_mx_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::BFloat16:
      return mxlinear::DType::kBF16;
    case ScalarType::Half:
      return mxlinear::DType::kF16;
    case ScalarType::Float:
      return mxlinear::DType::kF32;
    case ScalarType::Float8_e4m3fn:
      return mxlinear::DType::kE4M3;
    case ScalarType::Byte:
    case ScalarType::Float8_e8m0fnu:
      return mxlinear::DType::kE8M0;
    default:
      fail(concat("mxlinear: dtype ", torch::headeronly::toString(t),
                  " has no mxlinear equivalent"));
  }
}

namespace {
// torch's dtype code for the C shim, for the dtypes the ops allocate.
std::int32_t shim_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::BFloat16:
      return aoti_torch_dtype_bfloat16();
    case ScalarType::Half:
      return aoti_torch_dtype_float16();
    case ScalarType::Float:
      return aoti_torch_dtype_float32();
    case ScalarType::Float8_e4m3fn:
      return aoti_torch_dtype_float8_e4m3fn();
    case ScalarType::Byte:
      return aoti_torch_dtype_uint8();
    default:
      fail(concat("mxlinear: cannot allocate dtype ", torch::headeronly::toString(t)));
  }
}
}  // namespace

Tensor empty_on_device_of(const Tensor& like, const std::vector<std::int64_t>& sizes,
                          ScalarType dtype) {
  std::vector<std::int64_t> strides(sizes.size());
  std::int64_t stride = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= sizes[d] > 0 ? sizes[d] : 1;
  }
  std::int32_t device_type = 0;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(like.get(), &device_type));
  AtenTensorHandle handle = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(static_cast<std::int64_t>(sizes.size()),
                                                  sizes.data(), strides.data(), shim_dtype(dtype),
                                                  device_type, like.get_device_index(), &handle));
  return Tensor(handle);
}

Tensor as_contiguous(const Tensor& t) {
  return t.is_contiguous() ? t : torch::stable::contiguous(t);
}

namespace {
mxlinear::Location location_of(const Tensor& t) {
  return t.is_cuda() ? mxlinear::Location::kDevice : mxlinear::Location::kHost;
}
}  // namespace

mxlinear::TensorView view2d(const Tensor& t, std::int64_t rows, std::int64_t cols) {
  return mxlinear::TensorView::matrix(t.data_ptr(), rows, cols, cols, to_mx_dtype(t.scalar_type()),
                                      location_of(t));
}

mxlinear::TensorView view1d(const Tensor& t, std::int64_t n) {
  return mxlinear::TensorView::contiguous(t.data_ptr(), {n}, to_mx_dtype(t.scalar_type()),
                                          location_of(t));
}

mxlinear::ScaleRule rule_from_index(std::int64_t index) {
  if (index == 0) return mxlinear::ScaleRule::kRceil;
  if (index == 1) return mxlinear::ScaleRule::kFloor;
  fail(concat("mxlinear.quantize: argument 'rule' has index ", index,
              "; expected 0 (rceil) or 1 (floor)"));
}

mxlinear::ActivationMode activation_from_index(const char* op, std::int64_t index) {
  if (index == -1) return default_activation_mode();
  if (index == 0) return mxlinear::ActivationMode::kW8A8;
  if (index == 1) return mxlinear::ActivationMode::kW8A16;
  fail(concat(op, ": argument 'activation' has index ", index,
              "; expected -1 (MXLINEAR_ACTIVATION's default), 0 (mx, W8A8) or 1 (bf16, W8A16)"));
}

std::optional<bool> batch_invariant_from_index(const char* op, std::int64_t index) {
  if (index == -1) return std::nullopt;
  if (index == 0) return false;
  if (index == 1) return true;
  fail(concat(op, ": argument 'batch_invariant' has index ", index,
              "; expected -1 (MXLINEAR_BATCH_INVARIANT's default), 0 (off) or 1 (on)"));
}

void check_activation_mode(const char* op, const Tensor& x, mxlinear::ActivationMode mode) {
  const ScalarType t = x.scalar_type();
  const bool sixteen_bit = t == ScalarType::BFloat16 || t == ScalarType::Half;
  MXLINEAR_TORCH_CHECK(mode != mxlinear::ActivationMode::kW8A16 || sixteen_bit, op,
                       ": argument 'x' has dtype ", torch::headeronly::toString(t),
                       "; the activation mode 'bf16' (W8A16) multiplies a BFloat16 or Half x as "
                       "it is");
}

std::int64_t check_last_dim(const char* op, const char* name, const Tensor& t) {
  MXLINEAR_TORCH_CHECK(t.dim() >= 1, op, ": argument '", name,
                       "' is a 0-d tensor; expected [..., K]");
  const std::int64_t k = t.size(-1);
  MXLINEAR_TORCH_CHECK(k > 0 && k % kBlock == 0, op, ": argument '", name, "' has K = ", k,
                       " (shape ", shape_string(t), "); expected a positive multiple of 32");
  MXLINEAR_TORCH_CHECK(t.is_cpu() || t.is_cuda(), op, ": argument '", name, "' is on ",
                       device_string(t), "; expected a CPU or CUDA tensor");
  return k;
}

std::int64_t check_activation(const char* op, const Tensor& x) {
  MXLINEAR_TORCH_CHECK(is_activation_dtype(x.scalar_type()), op, ": argument 'x' has dtype ",
                       torch::headeronly::toString(x.scalar_type()),
                       "; expected BFloat16, Half or Float");
  return check_last_dim(op, "x", x);
}

std::int64_t check_weight(const char* op, const Tensor& x, const Tensor& weight,
                          const Tensor& weight_scale, std::int64_t k) {
  MXLINEAR_TORCH_CHECK(
      weight.scalar_type() == ScalarType::Float8_e4m3fn, op, ": argument 'weight' has dtype ",
      torch::headeronly::toString(weight.scalar_type()), "; expected Float8_e4m3fn");
  MXLINEAR_TORCH_CHECK(weight.dim() == 2 && weight.size(1) == k, op,
                       ": argument 'weight' has shape ", shape_string(weight), "; expected [N, ", k,
                       "] (N, K of x)");
  const std::int64_t n = weight.size(0);
  MXLINEAR_TORCH_CHECK(n >= 1, op, ": argument 'weight' has N = 0; expected N >= 1");
  const auto st = weight_scale.scalar_type();
  MXLINEAR_TORCH_CHECK(st == ScalarType::Byte || st == ScalarType::Float8_e8m0fnu, op,
                       ": argument 'weight_scale' has dtype ", torch::headeronly::toString(st),
                       "; expected Byte (uint8) or Float8_e8m0fnu");
  MXLINEAR_TORCH_CHECK(
      weight_scale.dim() == 2 && weight_scale.size(0) == n && weight_scale.size(1) == k / kBlock,
      op, ": argument 'weight_scale' has shape ", shape_string(weight_scale), "; expected [", n,
      ", ", k / kBlock, "] (N, K/32)");
  MXLINEAR_TORCH_CHECK(same_device(weight, x), op, ": argument 'weight' is on ",
                       device_string(weight), "; expected x's device ", device_string(x));
  MXLINEAR_TORCH_CHECK(same_device(weight_scale, x), op, ": argument 'weight_scale' is on ",
                       device_string(weight_scale), "; expected x's device ", device_string(x));
  return n;
}

}  // namespace mxlinear_torch
