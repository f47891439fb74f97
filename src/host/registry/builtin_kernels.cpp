// The kernels every device list ends with: the generic GPU kernel and the CPU reference.
// The Hopper tuned kernels, which go ahead of them, live in decode_kernel.cpp,
// prefill_kernel.cpp and gemv_kernel.cpp.
#include <fmt/format.h>

#include <vector>

#include "device/kernels/generic/generic_gemm.hpp"
#include "host/cuda_check.hpp"
#include "host/registry/configured_kernel.hpp"
#include "host/registry/decode_kernel.hpp"
#include "host/registry/gemv_kernel.hpp"
#include "host/registry/generic_config.hpp"
#include "host/registry/kernel_params.hpp"
#include "host/registry/prefill_kernel.hpp"
#include "host/registry/registry.hpp"
#include "host/validate.hpp"
#include "mxlinear/reference.hpp"

namespace mxlinear {
namespace {

using detail::GenericConfig;

const detail::ConfigTable<GenericConfig>& compiled_configs() {
  static const auto table =
      detail::ConfigTable<GenericConfig>::of_each(device::generic_gemm_configs());
  return table;
}

// `as_is`: the W8A16 kernel "generic_a16", which multiplies a bf16 or fp16 x of any alignment as
// it is; otherwise the W8A8 kernel "generic".
class GenericKernel final : public detail::ConfiguredKernel<GenericConfig> {
 public:
  explicit GenericKernel(bool as_is)
      : ConfiguredKernel(as_is ? "generic_a16" : "generic", compiled_configs(),
                         as_is ? ActivationMode::kW8A16 : ActivationMode::kW8A8) {}

  Verdict can_implement(const LayerDescription& layer) const override {
    if (const Verdict v = needs_mode_operand(layer); !v.ok()) return v;
    return detail::needs_16_byte_rows(layer);
  }

  std::string default_config(std::int64_t m) const override {
    // Measured on the H200: the 16-token tile with 4 K warps is fastest up to M = 32, the
    // 64 x 64 tile up to 256, the 128 x 128 tile beyond.
    const auto instances = device::generic_gemm_configs();
    return GenericConfig::of(instances[m <= 32 ? 0 : (m <= 256 ? 1 : 2)]).name();
  }

  // One warp per K range sums its MX blocks in order; with K warps, their ranges meet at the end,
  // an order that depends on how many there are. The configs with one K warp share one order.
  bool keeps_k_order(std::string_view config, std::int64_t) const override {
    const auto c = compiled_configs().find(config);
    return c.instance >= 0 && c.kwarps == 1;
  }

  // The e4m3 activation (W8A8) or the caller's x (W8A16); no scratch.
  CallPlan plan(const Problem& problem, std::string_view) const override {
    CallPlan p;
    if (as_is() && problem.operand != ActivationOperand::kMx) p.activation = ActivationForm::kAsIs;
    return p;
  }
  std::size_t max_scratch_bytes(std::int64_t, std::int64_t,
                                const DeviceDescription&) const override {
    return 0;
  }

  void run(const KernelCall& call, const std::string& config) const override {
    const auto c = known(config);
    require_token_tiles(call.shape, c.tokens, config);
    require_mode_activation(call);
    device::GemmParams p = detail::gemm_params(call);
    p.scales_via_cp_async = device::scales_allow_cp_async(p);
    require_launched(device::launch_generic_gemm(p, c.instance, call.stream), config);
  }
};

// Host copy of a view's rows, compacted to row-major.
std::vector<std::uint8_t> to_host(const TensorView& v, cudaStream_t stream) {
  const std::size_t elem = element_size(v.dtype);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(v.rows() * v.cols()) * elem);
  TensorView dst =
      TensorView::contiguous(bytes.data(), {v.rows(), v.cols()}, v.dtype, Location::kHost);
  detail::copy_rows(v, dst, stream);
  return bytes;
}

class ReferenceKernel final : public Kernel {
 public:
  std::string_view name() const override { return "reference"; }
  std::vector<std::string> configs() const override { return {"fp64"}; }
  Verdict is_supported(const DeviceDescription&) const override { return {}; }
  Verdict can_implement(const LayerDescription&) const override { return {}; }
  std::string default_config(std::int64_t) const override { return "fp64"; }
  // Each output is one fp64 sum over K in order, rounded once.
  bool keeps_k_order(std::string_view, std::int64_t) const override { return true; }
  void prepare_weights(const MxWeight& in, const MxWeight& out,
                       cudaStream_t stream) const override {
    detail::copy_weight(in, out, stream);
  }
  bool prepared_weights_cacheable() const override { return true; }
  // W8A8: the e4m3 activation; W8A16: the caller's x.
  CallPlan plan(const Problem& problem, std::string_view) const override {
    CallPlan p;
    if (problem.operand != ActivationOperand::kMx) p.activation = ActivationForm::kAsIs;
    return p;
  }
  std::size_t max_scratch_bytes(std::int64_t, std::int64_t,
                                const DeviceDescription&) const override {
    return 0;
  }

  // The kernel of last resort: on host views it computes in place; on device views it copies
  // through the host and synchronizes the stream (slow, and not graph-capturable).
  void run(const KernelCall& call, const std::string&) const override {
    const bool as_is = call.operand != ActivationOperand::kMx;
    if (call.out.location == Location::kHost) {
      if (as_is) {
        reference_linear_w8a16(call.x_unquantized, call.weight, call.bias, call.out);
      } else {
        reference_linear(call.x, call.weight, call.bias, call.out);
      }
      return;
    }
    const LinearShape& s = call.shape;
    std::vector<std::uint8_t> xd, xs;
    if (as_is) {
      xd = to_host(call.x_unquantized, call.stream);
    } else {
      xd = to_host(call.x.data, call.stream);
      xs = to_host(call.x.scales, call.stream);
    }
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
    const MxWeight weight{host(wd, s.n, s.k, DType::kE4M3),
                          host(ws, s.n, s.k / kBlockSize, DType::kE8M0)};
    if (as_is) {
      reference_linear_w8a16(host(xd, s.m, s.k, call.x_unquantized.dtype), weight, host_bias,
                             host(out, s.m, s.n, call.out.dtype));
    } else {
      reference_linear(
          QuantizedActivation{host(xd, s.m, s.k, DType::kE4M3),
                              host(xs, s.m, s.k / kBlockSize, DType::kE8M0), call.x.original_dtype},
          weight, host_bias, host(out, s.m, s.n, call.out.dtype));
    }
    TensorView dst = call.out;
    dst.rank = 2;
    dst.shape = {s.m, s.n, 0};
    dst.strides = {call.out.row_stride(), 1, 0};
    detail::copy_rows(host(out, s.m, s.n, call.out.dtype), dst, call.stream);
    detail::check_cuda(cudaStreamSynchronize(call.stream), "reference kernel: sync");
  }
};

}  // namespace

std::vector<std::shared_ptr<const Kernel>> builtin_kernels() {
  // W8A8's kernels, then W8A16's: a layer's operand leaves one set or the other.
  return {make_decode_kernel(),
          make_prefill_kernel(),
          make_gemv_kernel(),
          std::make_shared<GenericKernel>(/*as_is=*/false),
          make_prefill_kernel(/*as_is=*/true),
          make_gemv_kernel(/*as_is=*/true),
          std::make_shared<GenericKernel>(/*as_is=*/true),
          std::make_shared<ReferenceKernel>()};
}

}  // namespace mxlinear
