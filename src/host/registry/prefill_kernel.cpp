// The Hopper prefill kernel in the registry: a tuned kernel (it claims only the (N, K) its
// tuned rows name) for large M. Each call runs the bf16 activation pre-pass into the call's
// scratch, then the GEMM. Config names: "w128_t128_st4" = 128 weight rows x 128 tokens per
// CTA, a 4-stage ring.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "device/activation_bf16.hpp"
#include "device/prefill_gemm.hpp"
#include "host/cuda_check.hpp"
#include "host/registry/kernel_params.hpp"
#include "host/registry/prefill_kernel.hpp"
#include "host/validate.hpp"

namespace mxlinear {
namespace {

constexpr std::int64_t kMaxGridY = 65535;
constexpr std::int64_t kTokensPerCta = 128;
constexpr std::size_t kScratchAlign = 256;

std::string config_name(const device::PrefillInstanceInfo& i) {
  return fmt::format("w128_t128_st{}", i.stages);
}

int find_instance(const std::string& config) {
  const auto instances = device::prefill_gemm_instances();
  for (std::size_t i = 0; i < instances.size(); ++i) {
    if (config == config_name(instances[i])) return static_cast<int>(i);
  }
  return -1;
}

class PrefillKernel final : public Kernel {
 public:
  std::string_view name() const override { return "prefill"; }

  std::vector<std::string> configs() const override {
    std::vector<std::string> names;
    for (const auto& i : device::prefill_gemm_instances()) names.push_back(config_name(i));
    return names;
  }

  Verdict is_supported(const DeviceDescription& device) const override {
    return detail::needs_sm90a(device);
  }

  Verdict can_implement(const LayerDescription& layer) const override {
    if (layer.k % 128 != 0) return {fmt::format("needs K % 128 == 0; K is {}", layer.k)};
    if (layer.alignment < 16) {
      return {fmt::format("needs 16-byte aligned e4m3 rows; the layer's are {}-byte aligned",
                          layer.alignment)};
    }
    for (std::size_t i = 0; i < device::prefill_gemm_instances().size(); ++i) {
      if (device::prefill_gemm_smem_bytes(static_cast<int>(i), static_cast<int>(layer.k)) <=
          kSmemLimit) {
        return {};
      }
    }
    return {fmt::format("K = {} needs more shared memory for its weight scales than a CTA has",
                        layer.k)};
  }

  bool needs_tuned_rows() const override { return true; }
  bool worth_sweeping(std::int64_t m) const override { return m >= 256; }

  std::string default_config(std::int64_t) const override {
    return config_name(device::prefill_gemm_instances()[0]);
  }

  void prepare_weights(const MxWeight& in, const MxWeight& out,
                       cudaStream_t stream) const override {
    detail::copy_weight(in, out, stream);  // TMA reads the checkpoint layout as it is
  }
  bool prepared_weights_cacheable() const override { return true; }

  std::size_t workspace_bytes(const LinearShape& shape, const std::string&) const override {
    const auto bytes = static_cast<std::size_t>(shape.m * shape.k) * 2;  // bf16 activation
    return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
  }

  void run(const KernelCall& call, const std::string& config) const override {
    const int instance = find_instance(config);
    if (instance < 0) {
      detail::fail(
          ErrorCode::kInvalidArgument, "prefill kernel", "config",
          fmt::format("is '{}'; expected one of: {}", config, fmt::join(this->configs(), ", ")));
    }
    const LinearShape& shape = call.shape;
    if (const int smem = device::prefill_gemm_smem_bytes(instance, static_cast<int>(shape.k));
        smem > kSmemLimit) {
      detail::fail(ErrorCode::kUnsupported, "prefill kernel", "config",
                   fmt::format("is '{}'; K = {} needs {} bytes of shared memory per CTA, more "
                               "than {}",
                               config, shape.k, smem, kSmemLimit));
    }
    if ((shape.m + kTokensPerCta - 1) / kTokensPerCta > kMaxGridY) {
      detail::fail(ErrorCode::kUnsupported, "linear", "x",
                   fmt::format("has {} rows; expected at most {} for the prefill kernel", shape.m,
                               kMaxGridY * kTokensPerCta));
    }
    if (call.workspace.bytes < workspace_bytes(shape, config) || call.workspace.data == nullptr) {
      detail::fail(ErrorCode::kInternal, "prefill kernel", "workspace",
                   fmt::format("has {} bytes; the call needs {} (linear() provides them)",
                               call.workspace.bytes, workspace_bytes(shape, config)));
    }
    const device::GemmParams p = detail::gemm_params(call);
    if (const std::string_view why = device::prefill_gemm_unsupported(p); !why.empty()) {
      detail::fail(ErrorCode::kUnsupported, "prefill kernel", "layer",
                   fmt::format("is {} x {} x {}; {}", shape.m, shape.n, shape.k, why));
    }
    device::ActivationBf16Params a;
    a.q = p.a;
    a.scales = p.a_scales;
    a.ld_q = p.ld_a;
    a.ld_scales = p.ld_a_scales;
    a.out = call.workspace.data;
    a.ld_out = shape.k;
    a.m = p.m;
    a.k = p.k;
    detail::check_cuda(device::launch_activation_bf16(a, call.stream),
                       "linear: launching the prefill activation pre-pass");
    detail::check_cuda(
        device::launch_prefill_gemm(p, call.workspace.data, shape.k, instance, call.stream),
        fmt::format("linear: launching prefill GEMM {}", config));
  }

 private:
  static constexpr int kSmemLimit = 227 * 1024;
};

}  // namespace

std::shared_ptr<const Kernel> make_prefill_kernel() { return std::make_shared<PrefillKernel>(); }

}  // namespace mxlinear
