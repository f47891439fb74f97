// The torch custom ops mxlinear::quantize and mxlinear::linear over the mxlinear library: the CPU
// kernels are the library's reference (quantize_rows, reference_linear), the CUDA kernels its GPU
// entry points on torch's current stream. Every argument is checked here, before the library is
// called, so a bad call names the torch argument; mxlinear::Error is turned into ValueError (bad
// input) or RuntimeError (anything else).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <Python.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

#include "mxlinear/mxlinear.hpp"

namespace {

constexpr std::int64_t kBlock = 32;

std::string dtype_name(at::ScalarType t) { return std::string(c10::toString(t)); }

mxlinear::DType to_mx_dtype(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return mxlinear::DType::kBF16;
    case at::kHalf:
      return mxlinear::DType::kF16;
    case at::kFloat:
      return mxlinear::DType::kF32;
    case at::kFloat8_e4m3fn:
      return mxlinear::DType::kE4M3;
    case at::kByte:
    case at::kFloat8_e8m0fnu:
      return mxlinear::DType::kE8M0;
    default:
      TORCH_CHECK(false, "mxlinear: dtype ", dtype_name(t), " has no mxlinear equivalent");
  }
}

// A contiguous 2-D view [rows, cols] of t's storage (t must be contiguous).
mxlinear::TensorView view2d(const at::Tensor& t, std::int64_t rows, std::int64_t cols) {
  const auto location = t.is_cuda() ? mxlinear::Location::kDevice : mxlinear::Location::kHost;
  return mxlinear::TensorView::matrix(t.data_ptr(), rows, cols, cols, to_mx_dtype(t.scalar_type()),
                                      location);
}

mxlinear::ScaleRule parse_rule(const std::string& rule) {
  if (rule == "rceil") return mxlinear::ScaleRule::kRceil;
  if (rule == "floor") return mxlinear::ScaleRule::kFloor;
  TORCH_CHECK_VALUE(false, "mxlinear.quantize: argument 'rule' is '", rule,
                    "'; expected 'rceil' or 'floor'");
}

bool is_activation_dtype(at::ScalarType t) {
  return t == at::kBFloat16 || t == at::kHalf || t == at::kFloat;
}

void check_activation(const char* op, const at::Tensor& x) {
  TORCH_CHECK_VALUE(is_activation_dtype(x.scalar_type()), op, ": argument 'x' has dtype ",
                    dtype_name(x.scalar_type()), "; expected bfloat16, float16 or float32");
  TORCH_CHECK_VALUE(x.dim() >= 1, op, ": argument 'x' is a 0-d tensor; expected [..., K]");
  const std::int64_t k = x.size(-1);
  TORCH_CHECK_VALUE(k > 0 && k % kBlock == 0, op, ": argument 'x' has K = ", k, " (shape ",
                    x.sizes(), "); expected a positive multiple of 32");
}

// Runs f, turning mxlinear::Error into the matching torch exception.
template <typename F>
auto translate_errors(const char* op, F&& f) {
  try {
    return f();
  } catch (const mxlinear::Error& e) {
    TORCH_CHECK_VALUE(e.code() != mxlinear::ErrorCode::kInvalidArgument, op, ": ", e.what());
    TORCH_CHECK(false, op, ": ", e.what(), " (", mxlinear::to_string(e.code()), ")");
  }
}

// One implementation serves both dispatch keys: the dispatcher picks CUDA when any tensor
// argument is on a GPU, and the device checks below reject a mix.
std::tuple<at::Tensor, at::Tensor> quantize_impl(const at::Tensor& x_in, c10::string_view rule_s) {
  constexpr const char* op = "mxlinear.quantize";
  check_activation(op, x_in);
  const auto rule = parse_rule(std::string(rule_s.data(), rule_s.size()));
  const at::Tensor x = x_in.contiguous();
  const std::int64_t k = x.size(-1);
  const std::int64_t rows = k == 0 ? 0 : x.numel() / k;
  auto data = at::empty(x.sizes(), x.options().dtype(at::kFloat8_e4m3fn));
  auto scale_sizes = x.sizes().vec();
  scale_sizes.back() = k / kBlock;
  auto scales = at::empty(scale_sizes, x.options().dtype(at::kByte));
  if (rows == 0) return {data, scales};
  const auto xv = view2d(x, rows, k);
  const auto dv = view2d(data, rows, k);
  const auto sv = view2d(scales, rows, k / kBlock);
  translate_errors(op, [&] {
    if (x.is_cuda()) {
      const c10::cuda::CUDAGuard guard(x.device());
      mxlinear::quantize(xv, dv, sv, at::cuda::getCurrentCUDAStream().stream(), rule);
    } else {
      mxlinear::quantize_rows(xv, dv, sv, rule);
    }
    return 0;
  });
  return {data, scales};
}

at::Tensor linear_impl(const at::Tensor& x_in, const at::Tensor& weight_in,
                       const at::Tensor& weight_scale_in, const std::optional<at::Tensor>& bias_in,
                       std::optional<at::ScalarType> out_dtype_in) {
  constexpr const char* op = "mxlinear.linear";
  check_activation(op, x_in);
  const std::int64_t k = x_in.size(-1);
  TORCH_CHECK_VALUE(weight_in.scalar_type() == at::kFloat8_e4m3fn, op,
                    ": argument 'weight' has dtype ", dtype_name(weight_in.scalar_type()),
                    "; expected float8_e4m3fn");
  TORCH_CHECK_VALUE(weight_in.dim() == 2 && weight_in.size(1) == k, op,
                    ": argument 'weight' has shape ", weight_in.sizes(), "; expected [N, ", k,
                    "] (N, K of x)");
  const std::int64_t n = weight_in.size(0);
  TORCH_CHECK_VALUE(n >= 1, op, ": argument 'weight' has N = 0; expected N >= 1");
  const auto st = weight_scale_in.scalar_type();
  TORCH_CHECK_VALUE(st == at::kByte || st == at::kFloat8_e8m0fnu, op,
                    ": argument 'weight_scale' has dtype ", dtype_name(st),
                    "; expected uint8 or float8_e8m0fnu");
  TORCH_CHECK_VALUE(weight_scale_in.dim() == 2 && weight_scale_in.size(0) == n &&
                        weight_scale_in.size(1) == k / kBlock,
                    op, ": argument 'weight_scale' has shape ", weight_scale_in.sizes(),
                    "; expected [", n, ", ", k / kBlock, "] (N, K/32)");
  const auto device = x_in.device();
  TORCH_CHECK_VALUE(weight_in.device() == device, op, ": argument 'weight' is on ",
                    weight_in.device(), "; expected x's device ", device);
  TORCH_CHECK_VALUE(weight_scale_in.device() == device, op, ": argument 'weight_scale' is on ",
                    weight_scale_in.device(), "; expected x's device ", device);
  std::optional<at::Tensor> bias;
  if (bias_in.has_value()) {
    const auto& b = *bias_in;
    TORCH_CHECK_VALUE(is_activation_dtype(b.scalar_type()), op, ": argument 'bias' has dtype ",
                      dtype_name(b.scalar_type()), "; expected bfloat16, float16 or float32");
    TORCH_CHECK_VALUE(b.dim() == 1 && b.size(0) == n, op, ": argument 'bias' has shape ", b.sizes(),
                      "; expected [", n, "] (N)");
    TORCH_CHECK_VALUE(b.device() == device, op, ": argument 'bias' is on ", b.device(),
                      "; expected x's device ", device);
    // The library takes a bf16 or fp32 bias; fp16 widens to fp32 exactly.
    bias = (b.scalar_type() == at::kHalf ? b.to(at::kFloat) : b).contiguous();
  }
  const auto out_dtype = out_dtype_in.value_or(x_in.scalar_type());
  TORCH_CHECK_VALUE(is_activation_dtype(out_dtype), op, ": argument 'out_dtype' is ",
                    dtype_name(out_dtype), "; expected bfloat16, float16 or float32");

  const at::Tensor x = x_in.contiguous();
  const at::Tensor weight = weight_in.contiguous();
  const at::Tensor weight_scale = weight_scale_in.contiguous();
  auto out_sizes = x.sizes().vec();
  out_sizes.back() = n;
  auto out = at::empty(out_sizes, x.options().dtype(out_dtype));
  const std::int64_t rows = x.numel() / k;
  if (rows == 0) return out;

  const mxlinear::MxWeight w{view2d(weight, n, k), view2d(weight_scale, n, k / kBlock)};
  std::optional<mxlinear::TensorView> bv;
  if (bias)
    bv = mxlinear::TensorView::contiguous(
        bias->data_ptr(), {n}, to_mx_dtype(bias->scalar_type()),
        bias->is_cuda() ? mxlinear::Location::kDevice : mxlinear::Location::kHost);
  const auto xv = view2d(x, rows, k);
  const auto ov = view2d(out, rows, n);
  translate_errors(op, [&] {
    if (x.is_cuda()) {
      const c10::cuda::CUDAGuard guard(device);
      // The workspace comes from torch's caching allocator on the current stream: no
      // synchronization, and safe under CUDA-graph capture.
      const auto bytes = mxlinear::linear_workspace_bytes(rows, k);
      auto workspace = at::empty({static_cast<std::int64_t>(bytes)}, x.options().dtype(at::kByte));
      mxlinear::linear(xv, w, bv, ov, at::cuda::getCurrentCUDAStream().stream(),
                       mxlinear::Workspace{workspace.data_ptr(), bytes});
    } else {
      mxlinear::reference_linear(xv, w, bv, ov);
    }
    return 0;
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(mxlinear, m) {
  m.def("quantize(Tensor x, str rule=\"rceil\") -> (Tensor, Tensor)");
  m.def(
      "linear(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias=None, "
      "ScalarType? out_dtype=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(mxlinear, CPU, m) {
  m.impl("quantize", &quantize_impl);
  m.impl("linear", &linear_impl);
}

TORCH_LIBRARY_IMPL(mxlinear, CUDA, m) {
  m.impl("quantize", &quantize_impl);
  m.impl("linear", &linear_impl);
}

// Importing mxlinear._C registers the ops above (static initializers); the module itself only
// carries the library's version.
static PyModuleDef mxlinear_module = {
    PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr, nullptr, nullptr, nullptr, nullptr};

PyMODINIT_FUNC PyInit__C() {
  PyObject* module = PyModule_Create(&mxlinear_module);
  if (module == nullptr) return nullptr;
  const std::string version(mxlinear::version());
  if (PyModule_AddStringConstant(module, "__version__", version.c_str()) != 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
