// The linear API over the registry: it describes the call, the registry picks the kernel and
// config, the kernel's plan says what the call needs, and the linear provides it. No kernel is
// known here by name.
#include "mxlinear/linear.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "host/cuda_check.hpp"
#include "host/log.hpp"
#include "host/quantize_pass.hpp"
#include "host/registry/registry.hpp"
#include "host/validate.hpp"

namespace mxlinear {
namespace {

constexpr std::size_t kWorkspaceAlign = 256;

std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

// The largest power of two (up to 256) dividing every address and row stride the kernel reads.
int alignment_of(std::initializer_list<const TensorView*> views) {
  std::uintptr_t bits = 256;
  for (const TensorView* v : views) {
    bits |= reinterpret_cast<std::uintptr_t>(v->data);
    if (v->rows() > 1) {
      bits |= static_cast<std::uintptr_t>(v->row_stride()) * element_size(v->dtype);
    }
  }
  return static_cast<int>(bits & (~bits + 1));
}

// The current CUDA device, described and checked once per device.
struct CurrentDevice {
  int ordinal = -1;
  DeviceDescription description;
  Verdict usable;  // whether linear() may run on it (Registry::check_device)
};

const CurrentDevice& current_device() {
  static std::mutex mutex;
  static std::map<int, CurrentDevice> devices;
  int ordinal = -1;
  (void)cudaGetDevice(&ordinal);
  const std::lock_guard<std::mutex> lock(mutex);
  auto [it, added] = devices.try_emplace(ordinal);
  if (added) {
    const DeviceDescription description = DeviceDescription::current();
    it->second =
        CurrentDevice{ordinal, description, Registry::global().check_device(description, ordinal)};
  }
  return it->second;
}

// Selections are made once per (device, layer) and cached, so a call costs a map lookup.
struct SelectionKey {
  int device;
  std::int64_t n, k;
  DType out;
  int bias;
  int alignment;
  int scale_alignment;
  ActivationOperand operand;
  int x_alignment;
  bool batch_invariant;
  auto tie() const {
    return std::tie(device, n, k, out, bias, alignment, scale_alignment, operand, x_alignment,
                    batch_invariant);
  }
  bool operator<(const SelectionKey& o) const { return tie() < o.tie(); }
};

const LayerSelection& selection_for(const LayerDescription& layer, const CurrentDevice& device) {
  static std::mutex mutex;
  static std::map<SelectionKey, LayerSelection> cache;
  const SelectionKey key{device.ordinal,
                         layer.n,
                         layer.k,
                         layer.out_dtype,
                         layer.bias_dtype ? static_cast<int>(*layer.bias_dtype) : -1,
                         layer.alignment,
                         layer.scale_alignment,
                         layer.operand,
                         layer.x_alignment,
                         layer.batch_invariant};
  const std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  LayerSelection s = Registry::global().select(layer, device.description);
  for (const std::string& w : s.warnings) detail::log(detail::LogLevel::kWarn, w);
  if (s.kernel && is_cpu_reference(*s.kernel) && device.description.is_gpu) {
    detail::log(detail::LogLevel::kWarn,
                fmt::format("layer {} x {} runs on the CPU reference kernel (slow, synchronizes "
                            "the stream): {}",
                            layer.n, layer.k,
                            s.rejected.empty()
                                ? ""
                                : s.rejected.front().kernel + ": " + s.rejected.front().reason));
  } else if (s.kernel) {
    detail::log(detail::LogLevel::kInfo, selection_log_line(layer.n, layer.k, layer.out_dtype,
                                                            device.description, s.kernel->name()));
  }
  return cache.emplace(key, std::move(s)).first->second;
}

// What the registry selects on: the call's layer, in the batch-invariant mode or not.
LayerDescription describe(const KernelCall& call, bool batch_invariant) {
  LayerDescription layer;
  layer.batch_invariant = batch_invariant;
  layer.n = call.shape.n;
  layer.k = call.shape.k;
  layer.out_dtype = call.out.dtype;
  if (call.bias) layer.bias_dtype = call.bias->dtype;
  layer.operand = call.operand;
  layer.alignment = alignment_of({&call.x.data, &call.weight.data});
  layer.scale_alignment = alignment_of({&call.x.scales, &call.weight.scales});
  if (call.operand != ActivationOperand::kMx)
    layer.x_alignment = alignment_of({&call.x_unquantized});
  return layer;
}

// The kernel and config the registry hands this call to. Fails where linear() may not use the
// device, or no kernel can run the layer.
Dispatch dispatch_call(std::string_view op, const KernelCall& call, const CurrentDevice& device,
                       bool batch_invariant) {
  const Registry& registry = Registry::global();
  if (!device.usable.ok()) detail::fail(ErrorCode::kUnsupported, op, "x", device.usable.reason);
  const LayerDescription layer = describe(call, batch_invariant);
  const LayerSelection& selection = selection_for(layer, device);
  if (!selection.kernel) {
    std::string reasons;
    for (const Rejection& r : selection.rejected) {
      reasons += fmt::format("{}{}: {}", reasons.empty() ? "" : "; ", r.kernel, r.reason);
    }
    detail::fail(ErrorCode::kUnsupported, op, "weight",
                 fmt::format("is a {} x {} layer that no enabled kernel can run ({})", layer.n,
                             layer.k, reasons));
  }
  const Dispatch d = registry.dispatch(selection, device.description, call.shape.m);
  if (detail::log_enabled(detail::LogLevel::kDebug)) {
    detail::log(detail::LogLevel::kDebug, dispatch_log_line(call.shape.m, layer.n, layer.k, d));
  }
  return d;
}

// The kernel and config given to linear_with, once the registry has checked that they can serve
// the call on this device.
Dispatch checked_forced(std::string_view op, const Dispatch& forced, const KernelCall& call,
                        const CurrentDevice& device, bool batch_invariant) {
  const CallVerdict v =
      Registry::global().runnable(*forced.kernel, forced.config, describe(call, batch_invariant),
                                  call.shape.m, device.description);
  if (!v.ok()) detail::fail(v.code, op, v.argument, v.reason);
  return forced;
}

// Whether the linear can provide an activation in `form` for `problem`.
bool providable(ActivationForm form, const Problem& problem) {
  if (problem.operand != ActivationOperand::kMx) {
    return form == ActivationForm::kAsIs ||
           (form == ActivationForm::kDequantized && problem.operand == ActivationOperand::kBf16);
  }
  if (problem.x_dtype == DType::kE4M3) return form == ActivationForm::kQuantized;
  return form != ActivationForm::kAsIs &&
         (form != ActivationForm::kUnquantized || problem.x_self_quantizable);
}

// The plan of the dispatched kernel for this call; a plan the linear cannot provide is a bug.
CallPlan plan_of(std::string_view op, const Dispatch& d, const Problem& problem) {
  const CallPlan plan = d.kernel->plan(problem, d.config);
  if (!providable(plan.activation, problem) ||
      plan.zero_words.offset + 4 * plan.zero_words.count > plan.scratch_bytes) {
    detail::fail(ErrorCode::kInternal, op, "kernel",
                 fmt::format("is '{}/{}', whose plan the linear cannot provide", d.kernel->name(),
                             d.config));
  }
  return plan;
}

void run_dispatched(std::string_view op, const Dispatch& d, const KernelCall& call,
                    std::size_t scratch) {
  if (scratch <= call.workspace.bytes) {
    d.kernel->run(call, d.config);
    return;
  }
  // Only the pre-quantized entry point called without a workspace, or a kernel outside the
  // registry, gets here: the 16-bit entry point checked its plan against the workspace before
  // anything ran.
  KernelCall with_scratch = call;
  detail::check_cuda(cudaMallocAsync(&with_scratch.workspace.data, scratch, call.stream),
                     fmt::format("{}: kernel scratch", op));
  with_scratch.workspace.bytes = scratch;
  try {
    d.kernel->run(with_scratch, d.config);
  } catch (...) {
    (void)cudaFreeAsync(with_scratch.workspace.data, call.stream);
    throw;
  }
  detail::check_cuda(cudaFreeAsync(with_scratch.workspace.data, call.stream),
                     fmt::format("{}: kernel scratch free", op));
}

// A linear() workspace: [e4m3 activation | its scales | kernel scratch], each 256-byte aligned.
// The scratch is the most any registered kernel plans for such a call on the device.
struct WorkspaceLayout {
  std::size_t data, scales, scratch;
  std::size_t total() const { return data + scales + scratch; }
};

WorkspaceLayout workspace_layout(std::int64_t rows, std::int64_t k,
                                 const DeviceDescription& device) {
  const auto elements = static_cast<std::size_t>(rows * k);
  return {round_up(elements, kWorkspaceAlign), round_up(elements / kBlockSize, kWorkspaceAlign),
          round_up(Registry::global().max_scratch_bytes(rows, k, device), kWorkspaceAlign)};
}

// Whether the caller gave a workspace; an empty one means allocate on demand.
bool given(const Workspace& workspace) { return workspace.data != nullptr || workspace.bytes != 0; }

// A workspace the caller gave must be large and aligned enough.
void check_workspace(std::string_view op, const Workspace& workspace, const LinearShape& shape,
                     std::size_t needed) {
  if (workspace.data == nullptr || workspace.bytes < needed) {
    detail::fail(ErrorCode::kInvalidArgument, op, "workspace",
                 fmt::format("has {} bytes at {}; expected at least {} bytes for M = {}, "
                             "K = {} (linear_workspace_bytes)",
                             workspace.bytes, workspace.data, needed, shape.m, shape.k));
  }
  if (reinterpret_cast<std::uintptr_t>(workspace.data) % kWorkspaceAlign != 0) {
    detail::fail(ErrorCode::kInvalidArgument, op, "workspace",
                 fmt::format("has address {}; expected a multiple of {} bytes", workspace.data,
                             kWorkspaceAlign));
  }
}

// The operand of a call in the mode `options` choose (else MXLINEAR_ACTIVATION's) on x.
ActivationOperand operand_of(std::string_view op, const TensorView& x,
                             const LinearOptions& options) {
  const ActivationMode mode =
      options.activation.value_or(Registry::global().environment().activation);
  const std::optional<ActivationOperand> operand = activation_operand(mode, x.dtype);
  if (!operand) {
    detail::fail(ErrorCode::kInvalidArgument, op, "x",
                 fmt::format("has dtype {}; the activation mode 'bf16' (W8A16) multiplies a bf16 "
                             "or fp16 activation as it is",
                             to_string(x.dtype)));
  }
  return *operand;
}

// Whether a call runs in the batch-invariant mode: `options`', else MXLINEAR_BATCH_INVARIANT's.
bool batch_invariant_of(const LinearOptions& options) {
  return options.batch_invariant.value_or(Registry::global().environment().batch_invariant);
}

// The bf16/fp16 entry point with the kernel either dispatched (forced == nullptr) or given.
void linear_from_16bit(std::string_view op, const TensorView& x, const MxWeight& weight,
                       const std::optional<TensorView>& bias, const TensorView& out,
                       cudaStream_t stream, const Workspace& workspace, const Dispatch* forced,
                       const LinearOptions& options) {
  const LinearShape shape =
      detail::check_linear(op, x, nullptr, weight, bias, out, Location::kDevice);
  const ActivationOperand operand = operand_of(op, x, options);
  if (shape.m == 0) return;
  const CurrentDevice& device = current_device();
  const WorkspaceLayout layout = workspace_layout(shape.m, shape.k, device.description);
  if (given(workspace)) check_workspace(op, workspace, shape, layout.total());
  // The quantized activation's views, placed in the workspace below. Until then their data are
  // null, which aligns like the workspace's 256-byte aligned parts for the selection.
  TensorView q =
      TensorView::contiguous(nullptr, {shape.m, shape.k}, DType::kE4M3, Location::kDevice);
  TensorView s = TensorView::contiguous(nullptr, {shape.m, shape.k / kBlockSize}, DType::kE8M0,
                                        Location::kDevice);
  KernelCall call{QuantizedActivation{q, s, x.dtype}, weight, bias, out, shape, stream, {}};
  call.sms = device.description.sms;
  call.operand = operand;
  if (operand != ActivationOperand::kMx) call.x_unquantized = x;
  const bool invariant = batch_invariant_of(options);
  const Dispatch d = forced ? checked_forced(op, *forced, call, device, invariant)
                            : dispatch_call(op, call, device, invariant);
  Problem problem = make_problem(shape, x, out.dtype, device.description.sms);
  problem.operand = operand;
  const CallPlan plan = plan_of(op, d, problem);
  if (plan.scratch_bytes > layout.scratch && plan.activation == ActivationForm::kDequantized) {
    detail::fail(ErrorCode::kInternal, op, "workspace",
                 fmt::format("has {} bytes of kernel scratch; {}/{} plans {}", layout.scratch,
                             d.kernel->name(), d.config, plan.scratch_bytes));
  }
  const bool allocate = !given(workspace);
  void* buffer = workspace.data;
  if (allocate) {
    detail::check_cuda(cudaMallocAsync(&buffer, layout.total(), stream),
                       fmt::format("{}: workspace", op));
  }
  auto* bytes = static_cast<std::uint8_t*>(buffer);
  q.data = bytes;
  s.data = bytes + layout.data;
  call.x = QuantizedActivation{q, s, x.dtype};
  call.workspace = Workspace{bytes + layout.data + layout.scales, layout.scratch};
  call.activation = plan.activation;
  try {
    switch (plan.activation) {
      case ActivationForm::kUnquantized:
        call.x_unquantized = x;  // the kernel quantizes it: no pass of the linear's
        break;
      case ActivationForm::kAsIs:
        call.x_unquantized = x;  // multiplied as it is: no pass
        break;
      case ActivationForm::kDequantized:
        // The kernel reads only the bf16 activation, which the quantization pass writes in
        // place of the e4m3 one (W8A16: copies as it is): one pass and one launch fewer than
        // the kernel's own pre-pass.
        detail::launch_quantize_pass(
            op, x, q, s, ScaleRule::kRceil, stream,
            {call.workspace.data, true, plan.zero_words, operand != ActivationOperand::kMx});
        break;
      case ActivationForm::kQuantized:
        detail::launch_quantize_pass(op, x, q, s, ScaleRule::kRceil, stream);
        break;
    }
    run_dispatched(op, d, call, plan.scratch_bytes);
  } catch (...) {
    if (allocate) (void)cudaFreeAsync(buffer, stream);
    throw;
  }
  if (allocate) {
    detail::check_cuda(cudaFreeAsync(buffer, stream), fmt::format("{}: workspace free", op));
  }
}

}  // namespace

std::size_t linear_workspace_bytes(std::int64_t rows, std::int64_t k,
                                   const DeviceDescription& device) {
  constexpr std::string_view op = "linear_workspace_bytes";
  if (rows < 0 || rows > detail::kMaxExtent) {
    detail::fail(
        ErrorCode::kInvalidArgument, op, "rows",
        fmt::format("is {}; expected 0..{} (M, the activation's rows)", rows, detail::kMaxExtent));
  }
  if (k < kBlockSize || k % kBlockSize != 0 || k > detail::kMaxExtent) {
    detail::fail(ErrorCode::kInvalidArgument, op, "k",
                 fmt::format("is {}; expected a positive multiple of {} up to {}", k, kBlockSize,
                             detail::kMaxExtent));
  }
  if (rows > detail::kMaxElements / k) {  // as check_view bounds an activation's elements
    detail::fail(ErrorCode::kInvalidArgument, op, "rows",
                 fmt::format("is {} at K = {}; expected rows x K at most 2^48", rows, k));
  }
  return workspace_layout(rows, k, device).total();
}

std::size_t linear_workspace_bytes(std::int64_t rows, std::int64_t k) {
  return linear_workspace_bytes(rows, k, current_device().description);
}

void linear(const TensorView& x, const MxWeight& weight, const std::optional<TensorView>& bias,
            const TensorView& out, cudaStream_t stream, const Workspace& workspace,
            const LinearOptions& options) {
  linear_from_16bit("linear", x, weight, bias, out, stream, workspace, nullptr, options);
}

void linear_with(const Kernel& kernel, const std::string& config, const TensorView& x,
                 const MxWeight& weight, const std::optional<TensorView>& bias,
                 const TensorView& out, cudaStream_t stream, const Workspace& workspace,
                 const LinearOptions& options) {
  const Dispatch d{&kernel, config, "given"};
  linear_from_16bit("linear_with", x, weight, bias, out, stream, workspace, &d, options);
}

void linear(const QuantizedActivation& x, const MxWeight& weight,
            const std::optional<TensorView>& bias, const TensorView& out, cudaStream_t stream,
            const Workspace& workspace, const LinearOptions& options) {
  constexpr std::string_view kOp = "linear";
  const LinearShape shape =
      detail::check_linear(kOp, x.data, &x.scales, weight, bias, out, Location::kDevice);
  if (options.activation && *options.activation != ActivationMode::kW8A8) {
    detail::fail(ErrorCode::kInvalidArgument, kOp, "options.activation",
                 fmt::format("is '{}'; an activation already quantized to MXFP8 is multiplied "
                             "as W8A8 ('mx')",
                             activation_mode_name(*options.activation)));
  }
  const CurrentDevice& device = current_device();
  if (given(workspace)) {
    check_workspace(kOp, workspace, shape,
                    workspace_layout(shape.m, shape.k, device.description).total());
  }
  if (shape.m == 0) return;
  KernelCall call{x, weight, bias, out, shape, stream, workspace};
  call.sms = device.description.sms;
  const Dispatch d = dispatch_call(kOp, call, device, batch_invariant_of(options));
  const CallPlan plan =
      plan_of(kOp, d, make_problem(shape, x.data, out.dtype, device.description.sms));
  run_dispatched(kOp, d, call, plan.scratch_bytes);
}

bool gpu_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();  // clear the sticky "no device" status for later calls
    return false;
  }
  int device = 0;
  int major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return false;
  }
  return major == 9;
}

}  // namespace mxlinear
