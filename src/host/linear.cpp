#include "mxlinear/linear.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include <map>
#include <mutex>
#include <tuple>

#include "device/kernels/prefill/prefill_gemm.hpp"
#include "device/kernels/quantize/quantize.hpp"
#include "host/cuda_check.hpp"
#include "host/log.hpp"
#include "host/validate.hpp"
#include "mxlinear/registry.hpp"

namespace mxlinear {
namespace {

constexpr std::size_t kWorkspaceAlign = 256;

std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

// cp.async moves 16-byte chunks: e4m3 rows must start on 16-byte boundaries.
void require_aligned_rows(std::string_view op, std::string_view name, const TensorView& v) {
  const auto address = reinterpret_cast<std::uintptr_t>(v.data);
  const std::int64_t stride_bytes =
      v.row_stride() * static_cast<std::int64_t>(element_size(v.dtype));
  if (address % 16 != 0 || (v.rows() > 1 && stride_bytes % 16 != 0)) {
    detail::fail(ErrorCode::kInvalidArgument, op, name,
                 fmt::format("has address {:#x} and row stride {} bytes; expected both to be "
                             "multiples of 16 bytes",
                             address, stride_bytes));
  }
}

device::InType in_type(DType d) {
  return d == DType::kBF16 ? device::InType::kBF16
                           : (d == DType::kF16 ? device::InType::kF16 : device::InType::kF32);
}

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

// Selections are made once per (device, layer) and cached, so a call costs a map lookup.
struct SelectionKey {
  int device;
  std::int64_t n, k;
  DType out;
  int bias;
  int alignment;
  int scale_alignment;
  auto tie() const { return std::tie(device, n, k, out, bias, alignment, scale_alignment); }
  bool operator<(const SelectionKey& o) const { return tie() < o.tie(); }
};

struct CachedSelection {
  DeviceDescription device;
  LayerSelection selection;
};

const CachedSelection& selection_for(const LayerDescription& layer) {
  static std::mutex mutex;
  static std::map<SelectionKey, CachedSelection> cache;
  static std::map<int, DeviceDescription> devices;
  int device = -1;
  (void)cudaGetDevice(&device);
  const SelectionKey key{device,
                         layer.n,
                         layer.k,
                         layer.out_dtype,
                         layer.bias_dtype ? static_cast<int>(*layer.bias_dtype) : -1,
                         layer.alignment,
                         layer.scale_alignment};
  const std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  auto [dev, added] = devices.try_emplace(device);
  if (added) dev->second = DeviceDescription::current();
  CachedSelection entry{dev->second, Registry::global().select(layer, dev->second)};
  const LayerSelection& s = entry.selection;
  for (const std::string& w : s.warnings) detail::log(detail::LogLevel::kWarn, w);
  if (s.kernel && s.kernel->name() == "reference" && entry.device.is_gpu) {
    detail::log(detail::LogLevel::kWarn,
                fmt::format("layer {} x {} runs on the CPU reference kernel (slow, synchronizes "
                            "the stream): {}",
                            layer.n, layer.k,
                            s.rejected.empty()
                                ? ""
                                : s.rejected.front().kernel + ": " + s.rejected.front().reason));
  } else if (s.kernel) {
    detail::log(detail::LogLevel::kInfo, fmt::format("layer {} x {} ({} out) on {}: {}", layer.n,
                                                     layer.k, to_string(layer.out_dtype),
                                                     entry.device.to_string(), s.kernel->name()));
  }
  return cache.emplace(key, std::move(entry)).first->second;
}

// What the registry selects on: the call's layer.
LayerDescription describe(const KernelCall& call) {
  LayerDescription layer;
  layer.n = call.shape.n;
  layer.k = call.shape.k;
  layer.out_dtype = call.out.dtype;
  if (call.bias) layer.bias_dtype = call.bias->dtype;
  layer.alignment = alignment_of({&call.x.data, &call.weight.data});
  layer.scale_alignment = alignment_of({&call.x.scales, &call.weight.scales});
  return layer;
}

// The kernel and config the registry hands this call to (fails if no kernel can run it).
Dispatch dispatch_call(std::string_view op, const KernelCall& call) {
  const LayerDescription layer = describe(call);
  const CachedSelection& cached = selection_for(layer);
  if (!cached.selection.kernel) {
    std::string reasons;
    for (const Rejection& r : cached.selection.rejected) {
      reasons += fmt::format("{}{}: {}", reasons.empty() ? "" : "; ", r.kernel, r.reason);
    }
    detail::fail(ErrorCode::kUnsupported, op, "weight",
                 fmt::format("is a {} x {} layer that no enabled kernel can run ({})", layer.n,
                             layer.k, reasons));
  }
  const Dispatch d = Registry::global().dispatch(cached.selection, cached.device, call.shape.m);
  if (detail::log_enabled(detail::LogLevel::kDebug)) {
    detail::log(detail::LogLevel::kDebug,
                fmt::format("{} x {} x {}: {}/{} ({})", call.shape.m, layer.n, layer.k,
                            d.kernel->name(), d.config, d.why));
  }
  return d;
}

void run_dispatched(std::string_view op, const Dispatch& d, const KernelCall& call) {
  const std::size_t scratch = d.kernel->workspace_bytes(call.shape, d.config);
  if (scratch <= call.workspace.bytes) {
    d.kernel->run(call, d.config);
    return;
  }
  // Only the pre-quantized entry point called without a workspace gets here; the bf16 entry
  // point's workspace always covers the kernel's scratch (linear_workspace_bytes).
  if (call.x_dequantized_in_workspace) {
    detail::fail(ErrorCode::kInternal, op, "workspace",
                 fmt::format("has {} bytes of kernel scratch; {} needs {}", call.workspace.bytes,
                             d.kernel->name(), scratch));
  }
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

// Quantizes x into data and scales; with `dequantized` (bf16 [M, K], contiguous) it also writes
// the activation as the prefill kernel's pre-pass would, and then only that if the kernel reads
// nothing else (`dequantized_only`).
void launch_quantize(std::string_view op, const TensorView& x, const TensorView& data,
                     const TensorView& scales, ScaleRule rule, cudaStream_t stream,
                     void* dequantized = nullptr, bool dequantized_only = false,
                     device::ZeroedWords zero_for_next = {}) {
  device::QuantizeParams p;
  p.x = x.data;
  p.q = dequantized_only ? nullptr : static_cast<std::uint8_t*>(data.data);
  p.scales = dequantized_only ? nullptr : static_cast<std::uint8_t*>(scales.data);
  p.dequantized = dequantized;
  p.ld_x = x.row_stride();
  p.ld_q = data.row_stride();
  p.ld_s = scales.row_stride();
  p.ld_dq = x.cols();
  p.m = static_cast<int>(x.rows());
  p.k = static_cast<int>(x.cols());
  p.in_type = in_type(x.dtype);
  p.rule = rule;
  p.zero_for_next = zero_for_next;
  detail::check_cuda(device::launch_quantize(p, stream),
                     fmt::format("{}: launching activation quantization", op));
}

// A linear() workspace: [e4m3 activation | its scales | kernel scratch], each 256-byte aligned.
struct WorkspaceLayout {
  std::size_t data, scales, scratch;
};

WorkspaceLayout workspace_layout(std::int64_t rows, std::int64_t k) {
  const auto elements = static_cast<std::size_t>(rows * k);
  // Scratch: the prefill kernel's bf16 activation, and from the rows its stream-K configs take
  // their partial tiles and flags.
  const std::size_t stream_k =
      rows >= device::kPrefillStreamKMinRows ? device::prefill_stream_k_bytes() : 0;
  return {round_up(elements, kWorkspaceAlign), round_up(elements / kBlockSize, kWorkspaceAlign),
          round_up(elements * 2, kWorkspaceAlign) + stream_k};
}

// A caller's workspace must be empty (allocate on demand) or large and aligned enough.
void check_workspace(std::string_view op, const Workspace& workspace, const LinearShape& shape) {
  if (workspace.data == nullptr && workspace.bytes == 0) return;
  const std::size_t needed = linear_workspace_bytes(shape.m, shape.k);
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

}  // namespace

std::size_t linear_workspace_bytes(std::int64_t rows, std::int64_t k) {
  const WorkspaceLayout l = workspace_layout(rows, k);
  return l.data + l.scales + l.scratch;
}

namespace {

// The bf16/fp16 entry point with the kernel either dispatched (forced == nullptr) or given.
void linear_from_16bit(std::string_view op, const TensorView& x, const MxWeight& weight,
                       const std::optional<TensorView>& bias, const TensorView& out,
                       cudaStream_t stream, const Workspace& workspace, const Dispatch* forced) {
  const LinearShape shape =
      detail::check_linear(op, x, nullptr, weight, bias, out, Location::kDevice);
  if (shape.m == 0) return;
  check_workspace(op, workspace, shape);
  const std::size_t needed = linear_workspace_bytes(shape.m, shape.k);
  const bool allocate = workspace.data == nullptr && workspace.bytes == 0;
  void* buffer = workspace.data;
  if (allocate) {
    detail::check_cuda(cudaMallocAsync(&buffer, needed, stream), fmt::format("{}: workspace", op));
  }
  auto* bytes = static_cast<std::uint8_t*>(buffer);
  const WorkspaceLayout layout = workspace_layout(shape.m, shape.k);
  const TensorView q =
      TensorView::contiguous(bytes, {shape.m, shape.k}, DType::kE4M3, Location::kDevice);
  const TensorView s = TensorView::contiguous(bytes + layout.data, {shape.m, shape.k / kBlockSize},
                                              DType::kE8M0, Location::kDevice);
  const Workspace scratch{bytes + layout.data + layout.scales, layout.scratch};
  try {
    KernelCall call{QuantizedActivation{q, s, x.dtype}, weight, bias, out, shape, stream, scratch};
    Dispatch d;
    if (forced != nullptr) {
      d = *forced;
      if (const Verdict v = d.kernel->can_implement(describe(call)); !v.ok()) {
        detail::fail(ErrorCode::kUnsupported, op, "kernel",
                     fmt::format("is '{}', which cannot run this {} x {} layer: {}",
                                 d.kernel->name(), shape.n, shape.k, v.reason));
      }
      if (const std::vector<std::string> configs = d.kernel->configs();
          std::find(configs.begin(), configs.end(), d.config) == configs.end()) {
        detail::fail(ErrorCode::kInvalidArgument, op, "config",
                     fmt::format("is '{}'; expected one of {}'s: {}", d.config, d.kernel->name(),
                                 fmt::join(configs, ", ")));
      }
      if (const Verdict v = d.kernel->can_run(shape.m, shape.k, d.config); !v.ok()) {
        detail::fail(ErrorCode::kUnsupported, op, "config",
                     fmt::format("is '{}/{}', which cannot run M = {}, K = {}: {}",
                                 d.kernel->name(), d.config, shape.m, shape.k, v.reason));
      }
      const DeviceDescription device = DeviceDescription::current();
      if (const Verdict v = d.kernel->is_supported(device); !v.ok()) {
        detail::fail(ErrorCode::kUnsupported, op, "kernel",
                     fmt::format("is '{}', which does not run on {}: {}", d.kernel->name(),
                                 device.to_string(), v.reason));
      }
    } else {
      d = dispatch_call(op, call);
    }
    if (d.kernel->quantizes_activation(d.config, x)) {
      call.x_unquantized = x;  // the kernel quantizes it: no separate pass
    } else {
      // A kernel that reads the activation dequantized gets it from the quantization pass
      // itself (the workspace's scratch holds M * K bf16 values): one pass and one launch fewer.
      call.x_dequantized_in_workspace = d.kernel->takes_dequantized_activation(d.config);
      device::ZeroedWords zero;
      if (call.x_dequantized_in_workspace) {
        const ScratchWords words = d.kernel->scratch_words_to_zero(shape, d.config);
        zero = {reinterpret_cast<std::uint32_t*>(static_cast<std::uint8_t*>(scratch.data) +
                                                 words.offset),
                static_cast<int>(words.count)};
      }
      launch_quantize(op, x, q, s, ScaleRule::kRceil, stream,
                      call.x_dequantized_in_workspace ? scratch.data : nullptr,
                      call.x_dequantized_in_workspace, zero);
    }
    run_dispatched(op, d, call);
  } catch (...) {
    if (allocate) (void)cudaFreeAsync(buffer, stream);
    throw;
  }
  if (allocate) {
    detail::check_cuda(cudaFreeAsync(buffer, stream), fmt::format("{}: workspace free", op));
  }
}

}  // namespace

void linear(const TensorView& x, const MxWeight& weight, const std::optional<TensorView>& bias,
            const TensorView& out, cudaStream_t stream, const Workspace& workspace) {
  linear_from_16bit("linear", x, weight, bias, out, stream, workspace, nullptr);
}

void linear_with(const Kernel& kernel, const std::string& config, const TensorView& x,
                 const MxWeight& weight, const std::optional<TensorView>& bias,
                 const TensorView& out, cudaStream_t stream, const Workspace& workspace) {
  const Dispatch d{&kernel, config, "given"};
  linear_from_16bit("linear_with", x, weight, bias, out, stream, workspace, &d);
}

void linear(const QuantizedActivation& x, const MxWeight& weight,
            const std::optional<TensorView>& bias, const TensorView& out, cudaStream_t stream,
            const Workspace& workspace) {
  constexpr std::string_view kOp = "linear";
  const LinearShape shape =
      detail::check_linear(kOp, x.data, &x.scales, weight, bias, out, Location::kDevice);
  check_workspace(kOp, workspace, shape);
  if (shape.m == 0) return;
  const KernelCall call{x, weight, bias, out, shape, stream, workspace};
  run_dispatched(kOp, dispatch_call(kOp, call), call);
}

void quantize(const TensorView& x, const TensorView& data, const TensorView& scales,
              cudaStream_t stream, ScaleRule rule) {
  constexpr std::string_view kOp = "quantize";
  detail::check_quantize(kOp, x, data, scales, Location::kDevice);
  require_aligned_rows(kOp, "out.data", data);
  if (x.rows() == 0) return;
  launch_quantize(kOp, x, data, scales, rule, stream);
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
