// The kernels every device list ends with: the generic GPU kernel and the CPU reference.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "device/generic_gemm.hpp"
#include "host/cuda_check.hpp"
#include "host/validate.hpp"
#include "mxlinear/reference.hpp"
#include "mxlinear/registry.hpp"

namespace mxlinear {
namespace {

constexpr std::int64_t kMaxGridY = 65535;

// Copies a (possibly strided) 2-D byte matrix between any two locations on the stream.
void copy_rows(const TensorView& from, const TensorView& to, cudaStream_t stream) {
  const std::size_t elem = element_size(from.dtype);
  detail::check_cuda(
      cudaMemcpy2DAsync(to.data, static_cast<std::size_t>(to.row_stride()) * elem, from.data,
                        static_cast<std::size_t>(from.row_stride()) * elem,
                        static_cast<std::size_t>(from.cols()) * elem,
                        static_cast<std::size_t>(from.rows()), cudaMemcpyDefault, stream),
      "prepare_weights: copy");
}

void copy_weight(const MxWeight& in, const MxWeight& out, cudaStream_t stream) {
  detail::check_mx_pair("prepare_weights", "in", in.data, in.scales, in.data.location);
  detail::check_mx_pair("prepare_weights", "out", out.data, out.scales, out.data.location);
  if (in.data.rows() != out.data.rows() || in.data.cols() != out.data.cols()) {
    detail::fail(ErrorCode::kInvalidArgument, "prepare_weights", "out.data",
                 fmt::format("has shape {}; expected the shape of in.data {}",
                             out.data.shape_string(), in.data.shape_string()));
  }
  copy_rows(in.data, out.data, stream);
  copy_rows(in.scales, out.scales, stream);
}

device::OutType out_type(DType d) {
  return d == DType::kBF16 ? device::OutType::kBF16
                           : (d == DType::kF16 ? device::OutType::kF16 : device::OutType::kF32);
}

class GenericKernel final : public Kernel {
 public:
  std::string_view name() const override { return "generic"; }

  std::vector<std::string> configs() const override {
    std::vector<std::string> names;
    for (const auto& c : device::generic_gemm_configs()) names.emplace_back(c.name);
    return names;
  }

  Verdict is_supported(const DeviceDescription& device) const override {
    if (!device.is_gpu) return {"needs a GPU; this machine has none"};
    if (device.arch != "sm_90a") {
      return {fmt::format("needs an sm_90a (Hopper) GPU; this is {}", device.arch)};
    }
    return {};
  }

  Verdict can_implement(const LayerDescription& layer) const override {
    if (layer.alignment < 16) {
      return {fmt::format("needs 16-byte aligned e4m3 rows; the layer's are {}-byte aligned",
                          layer.alignment)};
    }
    return {};
  }

  std::string default_config(std::int64_t m) const override {
    // Measured on the H200 (docs/PERF.md): the 16-row tile with 4 K warps is fastest up to
    // M = 32, the 64x64 tile up to 256, the 128x128 tile beyond.
    const auto configs = device::generic_gemm_configs();
    return std::string(configs[m <= 32 ? 0 : (m <= 256 ? 1 : 2)].name);
  }

  void prepare_weights(const MxWeight& in, const MxWeight& out,
                       cudaStream_t stream) const override {
    copy_weight(in, out, stream);  // the checkpoint layout is this kernel's layout
  }
  bool prepared_weights_cacheable() const override { return true; }

  void run(const KernelCall& call, const std::string& config) const override {
    const auto configs = device::generic_gemm_configs();
    const auto it = std::find_if(configs.begin(), configs.end(),
                                 [&](const auto& c) { return c.name == config; });
    if (it == configs.end()) {
      detail::fail(
          ErrorCode::kInvalidArgument, "generic kernel", "config",
          fmt::format("is '{}'; expected one of: {}", config, fmt::join(this->configs(), ", ")));
    }
    const LinearShape& shape = call.shape;
    if ((shape.m + it->bm - 1) / it->bm > kMaxGridY) {
      detail::fail(ErrorCode::kUnsupported, "linear", "x",
                   fmt::format("has {} rows; expected at most {} for generic config {}", shape.m,
                               kMaxGridY * it->bm, it->name));
    }
    device::GemmParams p;
    p.a = static_cast<const std::uint8_t*>(call.x.data.data);
    p.a_scales = static_cast<const std::uint8_t*>(call.x.scales.data);
    p.w = static_cast<const std::uint8_t*>(call.weight.data.data);
    p.w_scales = static_cast<const std::uint8_t*>(call.weight.scales.data);
    p.ld_a = call.x.data.row_stride();
    p.ld_a_scales = call.x.scales.row_stride();
    p.ld_w = call.weight.data.row_stride();
    p.ld_w_scales = call.weight.scales.row_stride();
    p.out = call.out.data;
    p.ld_out = call.out.row_stride();
    p.m = static_cast<int>(shape.m);
    p.n = static_cast<int>(shape.n);
    p.k = static_cast<int>(shape.k);
    p.out_type = out_type(call.out.dtype);
    if (call.bias) {
      p.bias = call.bias->data;
      p.bias_type =
          call.bias->dtype == DType::kF32 ? device::BiasType::kF32 : device::BiasType::kBF16;
    }
    p.scales_via_cp_async = device::scales_allow_cp_async(p);
    detail::check_cuda(
        device::launch_generic_gemm(p, static_cast<int>(it - configs.begin()), call.stream),
        fmt::format("linear: launching generic GEMM {}", it->name));
  }
};

// Host copy of a view's rows, compacted to row-major.
std::vector<std::uint8_t> to_host(const TensorView& v, cudaStream_t stream) {
  const std::size_t elem = element_size(v.dtype);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(v.rows() * v.cols()) * elem);
  TensorView dst =
      TensorView::contiguous(bytes.data(), {v.rows(), v.cols()}, v.dtype, Location::kHost);
  copy_rows(v, dst, stream);
  return bytes;
}

class ReferenceKernel final : public Kernel {
 public:
  std::string_view name() const override { return "reference"; }
  std::vector<std::string> configs() const override { return {"fp64"}; }
  Verdict is_supported(const DeviceDescription&) const override { return {}; }
  Verdict can_implement(const LayerDescription&) const override { return {}; }
  std::string default_config(std::int64_t) const override { return "fp64"; }
  void prepare_weights(const MxWeight& in, const MxWeight& out,
                       cudaStream_t stream) const override {
    copy_weight(in, out, stream);
  }
  bool prepared_weights_cacheable() const override { return true; }

  // The kernel of last resort: on host views it computes in place; on device views it copies
  // through the host and synchronizes the stream (slow, and not graph-capturable).
  void run(const KernelCall& call, const std::string&) const override {
    if (call.out.location == Location::kHost) {
      reference_linear(call.x, call.weight, call.bias, call.out);
      return;
    }
    const LinearShape& s = call.shape;
    auto xd = to_host(call.x.data, call.stream);
    auto xs = to_host(call.x.scales, call.stream);
    auto wd = to_host(call.weight.data, call.stream);
    auto ws = to_host(call.weight.scales, call.stream);
    std::vector<std::uint8_t> bias;
    if (call.bias) bias = to_host(*call.bias, call.stream);
    detail::check_cuda(cudaStreamSynchronize(call.stream), "reference kernel: sync");
    std::vector<std::uint8_t> out(static_cast<std::size_t>(s.m * s.n) *
                                  element_size(call.out.dtype));
    const auto host = [](std::vector<std::uint8_t>& b, std::int64_t r, std::int64_t c, DType d) {
      return TensorView::contiguous(b.data(), {r, c}, d, Location::kHost);
    };
    std::optional<TensorView> host_bias;
    if (call.bias) {
      host_bias = TensorView::contiguous(bias.data(), {s.n}, call.bias->dtype, Location::kHost);
    }
    reference_linear(
        QuantizedActivation{host(xd, s.m, s.k, DType::kE4M3),
                            host(xs, s.m, s.k / kBlockSize, DType::kE8M0), call.x.original_dtype},
        MxWeight{host(wd, s.n, s.k, DType::kE4M3), host(ws, s.n, s.k / kBlockSize, DType::kE8M0)},
        host_bias, host(out, s.m, s.n, call.out.dtype));
    TensorView dst = call.out;
    dst.rank = 2;
    dst.shape = {s.m, s.n, 0};
    dst.strides = {call.out.row_stride(), 1, 0};
    copy_rows(host(out, s.m, s.n, call.out.dtype), dst, call.stream);
    detail::check_cuda(cudaStreamSynchronize(call.stream), "reference kernel: sync");
  }
};

}  // namespace

std::vector<std::shared_ptr<const Kernel>> builtin_kernels() {
  return {std::make_shared<GenericKernel>(), std::make_shared<ReferenceKernel>()};
}

}  // namespace mxlinear
