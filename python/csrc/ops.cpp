// The torch custom ops mxlinear::_quantize, mxlinear::linear and mxlinear::linear_quantized over
// the mxlinear library, registered through torch's stable ABI. CPU tensors run the library's
// reference (quantize_rows, reference_linear, reference_linear_w8a16); CUDA tensors its GPU entry
// points on torch's current stream, with the workspace from torch's caching allocator, so a call
// never synchronizes the host and can be captured in a CUDA graph. Every argument is checked
// before the library is called, so a bad call names the torch argument.
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <chrono>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "torch_views.hpp"

namespace mxlinear_torch {
namespace {

// Runs f, prefixing a library error with the op's name.
template <typename F>
void call_library(const char* op, F&& f) {
  try {
    f();
  } catch (const mxlinear::Error& e) {
    fail(concat(op, ": ", e.what(), " (", mxlinear::to_string(e.code()), ")"));
  }
}

cudaStream_t current_stream(const Tensor& t) {
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream));
  return static_cast<cudaStream_t>(stream);
}

std::vector<std::int64_t> sizes_with_last(const Tensor& t, std::int64_t last) {
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(t.dim()));
  for (std::int64_t d = 0; d < t.dim(); ++d) sizes[static_cast<std::size_t>(d)] = t.size(d);
  sizes.back() = last;
  return sizes;
}

// A device workspace of linear_workspace_bytes(rows, k) bytes from torch's caching allocator on
// t's device. It is returned to the allocator when the tensor dies, and the allocator reuses it
// only for work ordered after this stream's kernels.
Tensor workspace_for(const Tensor& t, std::int64_t rows, std::int64_t k, std::size_t* bytes) {
  *bytes = mxlinear::linear_workspace_bytes(rows, k);
  return empty_on_device_of(t, {static_cast<std::int64_t>(*bytes)}, ScalarType::Byte);
}

// The bias as the library takes it: bf16 or fp32, contiguous (fp16 widens to fp32 exactly).
std::optional<Tensor> check_bias(const char* op, const std::optional<Tensor>& bias, const Tensor& x,
                                 std::int64_t n) {
  if (!bias.has_value()) return std::nullopt;
  const Tensor& b = *bias;
  MXLINEAR_TORCH_CHECK(is_activation_dtype(b.scalar_type()), op, ": argument 'bias' has dtype ",
                       torch::headeronly::toString(b.scalar_type()),
                       "; expected BFloat16, Half or Float");
  MXLINEAR_TORCH_CHECK(b.dim() == 1 && b.size(0) == n, op, ": argument 'bias' has shape ",
                       shape_string(b), "; expected [", n, "] (N)");
  MXLINEAR_TORCH_CHECK(same_device(b, x), op, ": argument 'bias' is on ", device_string(b),
                       "; expected x's device ", device_string(x));
  if (b.scalar_type() == ScalarType::Half) return torch::stable::to(b, ScalarType::Float);
  return as_contiguous(b);
}

ScalarType check_out_dtype(const char* op, std::optional<ScalarType> out_dtype,
                           ScalarType fallback) {
  const ScalarType t = out_dtype.value_or(fallback);
  MXLINEAR_TORCH_CHECK(is_activation_dtype(t), op, ": argument 'out_dtype' is ",
                       torch::headeronly::toString(t), "; expected BFloat16, Half or Float");
  return t;
}

// A layer's weight and bias as the library takes them: contiguous tensors (kept alive here) and
// the views over them.
struct LayerWeights {
  Tensor weight, weight_scale;
  std::optional<Tensor> bias;
  mxlinear::MxWeight views;
  std::optional<mxlinear::TensorView> bias_view;

  LayerWeights(const Tensor& weight_in, const Tensor& weight_scale_in, std::optional<Tensor> b,
               std::int64_t n, std::int64_t k)
      : weight(as_contiguous(weight_in)),
        weight_scale(as_contiguous(weight_scale_in)),
        bias(std::move(b)),
        views{view2d(weight, n, k), view2d(weight_scale, n, k / kBlock)} {
    if (bias) bias_view = view1d(*bias, n);
  }
};

// One linear call on `activation` (a TensorView or a QuantizedActivation of `rows` x `k`) over
// the device of `like`: the GPU entry point with a workspace from torch's allocator, or the CPU
// reference. options.activation applies to a 16-bit activation; a quantized one is W8A8 by
// nature. options.batch_invariant matters on the GPU alone: the reference sums each output in
// float64 and rounds it once, so a row's bits never depend on the batch there.
template <typename Activation>
void run_linear(const char* op, const Tensor& like, const Activation& activation,
                const LayerWeights& layer, const mxlinear::TensorView& out, std::int64_t rows,
                std::int64_t k, const mxlinear::LinearOptions& options) {
  constexpr bool quantized = std::is_same_v<Activation, mxlinear::QuantizedActivation>;
  const mxlinear::MxWeight& w = layer.views;
  const std::optional<mxlinear::TensorView>& bias = layer.bias_view;
  call_library(op, [&] {
    if (like.is_cuda()) {
      const torch::stable::accelerator::DeviceGuard guard(like.get_device_index());
      std::size_t bytes = 0;
      const Tensor workspace = workspace_for(like, rows, k, &bytes);
      const mxlinear::Workspace ws{workspace.data_ptr(), bytes};
      mxlinear::linear(activation, w, bias, out, current_stream(like), ws, options);
    } else if constexpr (quantized) {
      mxlinear::reference_linear(activation, w, bias, out);
    } else if (options.activation == mxlinear::ActivationMode::kW8A16) {
      mxlinear::reference_linear_w8a16(activation, w, bias, out);
    } else {
      mxlinear::reference_linear(activation, w, bias, out);
    }
  });
}

// The rule arrives as an index (0 rceil, 1 floor): the public op mxlinear::quantize (str rule) is
// defined in Python over this one, because a str argument crossing the stable ABI is leaked by
// torch's unboxing and freed twice when the kernel throws.
std::tuple<Tensor, Tensor> quantize_op(Tensor x_in, std::int64_t rule_index) {
  constexpr const char* op = "mxlinear.quantize";
  const std::int64_t k = check_activation(op, x_in);
  const auto rule = rule_from_index(rule_index);
  const Tensor x = as_contiguous(x_in);
  const std::int64_t rows = x.numel() / k;
  Tensor data = empty_on_device_of(x, sizes_with_last(x, k), ScalarType::Float8_e4m3fn);
  Tensor scales = empty_on_device_of(x, sizes_with_last(x, k / kBlock), ScalarType::Byte);
  if (rows == 0) return {data, scales};
  const auto xv = view2d(x, rows, k);
  const auto dv = view2d(data, rows, k);
  const auto sv = view2d(scales, rows, k / kBlock);
  call_library(op, [&] {
    if (x.is_cuda()) {
      const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
      mxlinear::quantize(xv, dv, sv, current_stream(x), rule);
    } else {
      mxlinear::quantize_rows(xv, dv, sv, rule);
    }
  });
  return {data, scales};
}

// The mode arrives as an index (-1 MXLINEAR_ACTIVATION's default, 0 mx, 1 bf16), for the reason
// quantize_op's rule does: the public function mxlinear.linear (Python) maps the name. The
// batch-invariant switch arrives in the same form (-1 MXLINEAR_BATCH_INVARIANT's default, 0 off,
// 1 on), which mxlinear.linear maps from None, False or True.
Tensor linear_op(Tensor x_in, Tensor weight_in, Tensor weight_scale_in,
                 std::optional<Tensor> bias_in, std::optional<ScalarType> out_dtype_in,
                 std::int64_t activation_index, std::int64_t batch_invariant_index) {
  constexpr const char* op = "mxlinear.linear";
  const std::int64_t k = check_activation(op, x_in);
  const mxlinear::ActivationMode mode = activation_from_index(op, activation_index);
  check_activation_mode(op, x_in, mode);
  const std::optional<bool> batch_invariant = batch_invariant_from_index(op, batch_invariant_index);
  const std::int64_t n = check_weight(op, x_in, weight_in, weight_scale_in, k);
  const auto bias = check_bias(op, bias_in, x_in, n);
  const ScalarType out_dtype = check_out_dtype(op, out_dtype_in, x_in.scalar_type());

  const Tensor x = as_contiguous(x_in);
  Tensor out = empty_on_device_of(x, sizes_with_last(x, n), out_dtype);
  const std::int64_t rows = x.numel() / k;
  if (rows == 0) return out;

  const LayerWeights layer(weight_in, weight_scale_in, bias, n, k);
  run_linear(op, x, view2d(x, rows, k), layer, view2d(out, rows, n), rows, k,
             mxlinear::LinearOptions{.activation = mode, .batch_invariant = batch_invariant});
  return out;
}

// The batch-invariant switch arrives as linear_op's does.
Tensor linear_quantized_op(Tensor x_data_in, Tensor x_scales_in, Tensor weight_in,
                           Tensor weight_scale_in, std::optional<Tensor> bias_in,
                           std::optional<ScalarType> out_dtype_in,
                           std::int64_t batch_invariant_index) {
  constexpr const char* op = "mxlinear.linear_quantized";
  const std::optional<bool> batch_invariant = batch_invariant_from_index(op, batch_invariant_index);
  MXLINEAR_TORCH_CHECK(
      x_data_in.scalar_type() == ScalarType::Float8_e4m3fn, op, ": argument 'x_data' has dtype ",
      torch::headeronly::toString(x_data_in.scalar_type()), "; expected Float8_e4m3fn");
  const std::int64_t k = check_last_dim(op, "x_data", x_data_in);
  const auto xst = x_scales_in.scalar_type();
  MXLINEAR_TORCH_CHECK(xst == ScalarType::Byte || xst == ScalarType::Float8_e8m0fnu, op,
                       ": argument 'x_scales' has dtype ", torch::headeronly::toString(xst),
                       "; expected Byte (uint8) or Float8_e8m0fnu");
  bool scales_match = x_scales_in.dim() == x_data_in.dim();
  for (std::int64_t d = 0; scales_match && d + 1 < x_data_in.dim(); ++d)
    scales_match = x_scales_in.size(d) == x_data_in.size(d);
  MXLINEAR_TORCH_CHECK(scales_match && x_scales_in.size(-1) == k / kBlock, op,
                       ": argument 'x_scales' has shape ", shape_string(x_scales_in),
                       "; expected x_data's shape with K/32 = ", k / kBlock, " last (x_data is ",
                       shape_string(x_data_in), ")");
  MXLINEAR_TORCH_CHECK(same_device(x_scales_in, x_data_in), op, ": argument 'x_scales' is on ",
                       device_string(x_scales_in), "; expected x_data's device ",
                       device_string(x_data_in));
  const std::int64_t n = check_weight(op, x_data_in, weight_in, weight_scale_in, k);
  const auto bias = check_bias(op, bias_in, x_data_in, n);
  const ScalarType out_dtype = check_out_dtype(op, out_dtype_in, ScalarType::BFloat16);

  const Tensor x_data = as_contiguous(x_data_in);
  const Tensor x_scales = as_contiguous(x_scales_in);
  Tensor out = empty_on_device_of(x_data, sizes_with_last(x_data, n), out_dtype);
  const std::int64_t rows = x_data.numel() / k;
  if (rows == 0) return out;

  const LayerWeights layer(weight_in, weight_scale_in, bias, n, k);
  const mxlinear::QuantizedActivation xq{
      view2d(x_data, rows, k), view2d(x_scales, rows, k / kBlock), to_mx_dtype(out_dtype)};
  run_linear(
      op, x_data, xq, layer, view2d(out, rows, n), rows, k,
      mxlinear::LinearOptions{.activation = std::nullopt, .batch_invariant = batch_invariant});
  return out;
}

// For the benchmark: host seconds per call of `iters` back-to-back calls of the library's own
// linear() on these tensors (no torch dispatch, one workspace), on the current stream, in the
// activation mode and batch-invariant switch of those indices (as linear_op takes them).
// Captured in a CUDA graph it records exactly the kernels those library calls launch.
double library_call_seconds_op(Tensor x, Tensor weight, Tensor weight_scale, Tensor out,
                               std::int64_t iters, std::int64_t activation_index,
                               std::int64_t batch_invariant_index) {
  constexpr const char* op = "mxlinear._library_call_seconds";
  const std::int64_t k = check_activation(op, x);
  const mxlinear::ActivationMode mode = activation_from_index(op, activation_index);
  const std::optional<bool> batch_invariant = batch_invariant_from_index(op, batch_invariant_index);
  check_activation_mode(op, x, mode);
  const std::int64_t n = check_weight(op, x, weight, weight_scale, k);
  MXLINEAR_TORCH_CHECK(x.is_cuda(), op, ": argument 'x' is on ", device_string(x),
                       "; expected a CUDA tensor");
  MXLINEAR_TORCH_CHECK(iters >= 1, op, ": argument 'iters' is ", iters, "; expected >= 1");
  const std::int64_t rows = x.numel() / k;
  MXLINEAR_TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() &&
                           weight_scale.is_contiguous() && out.is_contiguous(),
                       op, ": arguments must be contiguous");
  MXLINEAR_TORCH_CHECK(
      same_device(out, x) && out.numel() == rows * n && is_activation_dtype(out.scalar_type()), op,
      ": argument 'out' has shape ", shape_string(out), " on ", device_string(out), "; expected ",
      rows * n, " float elements on x's device");
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  std::size_t bytes = 0;
  const Tensor workspace = workspace_for(x, rows, k, &bytes);
  const LayerWeights layer(weight, weight_scale, std::nullopt, n, k);
  const mxlinear::MxWeight& w = layer.views;
  const auto xv = view2d(x, rows, k);
  const auto ov = view2d(out, rows, n);
  const cudaStream_t stream = current_stream(x);
  const mxlinear::Workspace ws{workspace.data_ptr(), bytes};
  const mxlinear::LinearOptions options{.activation = mode, .batch_invariant = batch_invariant};
  double seconds = 0;
  call_library(op, [&] {
    const auto start = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < iters; ++i)
      mxlinear::linear(xv, w, std::nullopt, ov, stream, ws, options);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  return seconds / static_cast<double>(iters);
}

}  // namespace
}  // namespace mxlinear_torch

STABLE_TORCH_LIBRARY(mxlinear, m) {
  m.def("_quantize(Tensor x, int rule) -> (Tensor, Tensor)");
  m.def(
      "linear(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias=None, "
      "ScalarType? out_dtype=None, int activation=-1, int batch_invariant=-1) -> Tensor");
  m.def(
      "linear_quantized(Tensor x_data, Tensor x_scales, Tensor weight, Tensor weight_scale, "
      "Tensor? bias=None, ScalarType? out_dtype=None, int batch_invariant=-1) -> Tensor");
  m.def(
      "_library_call_seconds(Tensor x, Tensor weight, Tensor weight_scale, Tensor(a!) out, "
      "int iters, int activation=-1, int batch_invariant=-1) -> float");
}

// One implementation serves both dispatch keys: the dispatcher picks CUDA when any tensor
// argument is on a GPU, and the device checks reject a mix.
STABLE_TORCH_LIBRARY_IMPL(mxlinear, CPU, m) {
  m.impl("_quantize", TORCH_BOX(&mxlinear_torch::quantize_op));
  m.impl("linear", TORCH_BOX(&mxlinear_torch::linear_op));
  m.impl("linear_quantized", TORCH_BOX(&mxlinear_torch::linear_quantized_op));
}

STABLE_TORCH_LIBRARY_IMPL(mxlinear, CUDA, m) {
  m.impl("_quantize", TORCH_BOX(&mxlinear_torch::quantize_op));
  m.impl("linear", TORCH_BOX(&mxlinear_torch::linear_op));
  m.impl("linear_quantized", TORCH_BOX(&mxlinear_torch::linear_quantized_op));
  m.impl("_library_call_seconds", TORCH_BOX(&mxlinear_torch::library_call_seconds_op));
}
