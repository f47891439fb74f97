// The MX GEMV in the registry: a tuned kernel for the smallest M (it claims only the (N, K) its
// tuned rows name). Config names: "t8_w4" = 8 tokens and 16 weight rows per CTA, K split over 4
// warps, weights through registers; "t8_w8" the same over 8 warps; "t16_w8" 16 tokens over 8
// warps; "t8_w4_r8" = weights through a per-warp shared-memory ring of 8 slots; "_s2" = K split
// over a cluster of 2 CTAs; "_n48" = 48 weight rows (three 16-row tiles of 4 warps) per CTA;
// "_waited" / "_early" = the next kernel may start launching once the CTAs have waited on the
// previous kernel / at their entry (no suffix: once they have staged their activation).
#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "device/kernels/gemv/gemv_gemm.hpp"
#include "host/cuda_check.hpp"
#include "host/registry/gemv_kernel.hpp"
#include "host/registry/kernel_params.hpp"
#include "host/registry/named_configs.hpp"
#include "host/validate.hpp"

namespace mxlinear {
namespace {

constexpr std::int64_t kMaxGridZ = 65535;  // token tiles (grid.z)

constexpr device::NextLaunch kNextLaunches[] = {device::NextLaunch::kAfterActivation,
                                                device::NextLaunch::kAfterWait,
                                                device::NextLaunch::kAtEntry};

std::string config_name(const device::GemvInstanceInfo& i,
                        device::NextLaunch next = device::NextLaunch::kAfterActivation) {
  std::string name = i.stages == 0 ? fmt::format("t{}_w{}", i.tokens, i.warps)
                                   : fmt::format("t{}_w{}_r{}", i.tokens, i.warps, i.stages);
  if (i.splits > 1) name += fmt::format("_s{}", i.splits);
  if (i.rows > 16) name += fmt::format("_n{}", i.rows);
  if (next == device::NextLaunch::kAfterWait) name += "_waited";
  if (next == device::NextLaunch::kAtEntry) name += "_early";
  return name;
}

struct GemvConfig {
  int instance = -1;
  device::NextLaunch next_launch = device::NextLaunch::kAfterActivation;
};

// Config name -> (instance, next launch): every instance with each next-launch point, the
// instances' default point first.
const detail::NamedConfigs<GemvConfig>& named_configs() {
  static const detail::NamedConfigs<GemvConfig> all = [] {
    std::vector<std::pair<std::string, GemvConfig>> named;
    const auto instances = device::gemv_gemm_instances();
    for (const device::NextLaunch next : kNextLaunches) {
      for (std::size_t i = 0; i < instances.size(); ++i) {
        named.emplace_back(config_name(instances[i], next), GemvConfig{static_cast<int>(i), next});
      }
    }
    return detail::NamedConfigs<GemvConfig>(std::move(named));
  }();
  return all;
}

GemvConfig find_config(std::string_view config) {
  const GemvConfig* found = named_configs().find(config);
  return found != nullptr ? *found : GemvConfig{};
}

class GemvKernel final : public Kernel {
 public:
  std::string_view name() const override { return "gemv"; }

  std::vector<std::string> configs() const override { return named_configs().names(); }

  Verdict is_supported(const DeviceDescription& device) const override {
    return detail::needs_sm90a(device);
  }

  Verdict can_implement(const LayerDescription& layer) const override {
    if (layer.alignment < 16) {
      return {fmt::format("needs 16-byte aligned e4m3 rows; the layer's are {}-byte aligned",
                          layer.alignment)};
    }
    if (device::gemv_gemm_smem_bytes(0, 1, static_cast<int>(layer.k)) >
        device::kSm90MaxSmemPerCta) {
      return {fmt::format("K = {} does not fit one token's activation in shared memory", layer.k)};
    }
    return {};
  }

  bool needs_tuned_rows() const override { return true; }
  bool worth_sweeping(std::int64_t m, std::string_view) const override { return m <= 16; }

  std::string default_config(std::int64_t m) const override {
    const auto instances = device::gemv_gemm_instances();
    return config_name(instances[m <= 8 ? 1 : 2]);
  }

  void prepare_weights(const MxWeight& in, const MxWeight& out,
                       cudaStream_t stream) const override {
    detail::copy_weight(in, out, stream);  // streamed in the checkpoint layout
  }
  bool prepared_weights_cacheable() const override { return true; }

  // At a few tokens a separate quantize kernel costs a large share of the GEMV; each CTA
  // quantizes its tokens itself instead (16-byte aligned bf16/fp16 rows). No scratch.
  CallPlan plan(const Problem& problem, std::string_view) const override {
    CallPlan p;
    if (problem.x_self_quantizable) p.activation = ActivationForm::kUnquantized;
    return p;
  }
  std::size_t max_scratch_bytes(std::int64_t, std::int64_t,
                                const DeviceDescription&) const override {
    return 0;
  }

  Verdict can_run(std::int64_t m, std::int64_t k, std::string_view config) const override {
    const int instance = find_config(config).instance;
    if (instance < 0) return {fmt::format("is '{}', not a gemv config", config)};
    if (const int smem = device::gemv_gemm_smem_bytes(instance, m, static_cast<int>(k));
        smem > device::kSm90MaxSmemPerCta) {
      return {
          fmt::format("is '{}'; M = {}, K = {} needs {} bytes of shared memory per CTA, more "
                      "than {}",
                      config, m, k, smem, device::kSm90MaxSmemPerCta)};
    }
    return {};
  }

  void run(const KernelCall& call, const std::string& config) const override {
    const GemvConfig c = find_config(config);
    const int instance = c.instance;
    if (instance < 0) {
      detail::fail(
          ErrorCode::kInvalidArgument, "gemv kernel", "config",
          fmt::format("is '{}'; expected one of: {}", config, fmt::join(this->configs(), ", ")));
    }
    const LinearShape& shape = call.shape;
    if (const Verdict v = can_run(shape.m, shape.k, config); !v.ok()) {
      detail::fail(ErrorCode::kUnsupported, "gemv kernel", "config", v.reason);
    }
    const int tokens = device::gemv_gemm_instances()[static_cast<std::size_t>(instance)].tokens;
    if ((shape.m + tokens - 1) / tokens > kMaxGridZ) {
      detail::fail(ErrorCode::kUnsupported, "linear", "x",
                   fmt::format("has {} rows; expected at most {} for gemv config {}", shape.m,
                               kMaxGridZ * tokens, config));
    }
    device::GemmParams p = detail::gemm_params(call);
    p.next_launch = c.next_launch;
    if (const std::string_view why = device::gemv_gemm_unsupported(p); !why.empty()) {
      detail::fail(ErrorCode::kUnsupported, "gemv kernel", "layer",
                   fmt::format("is {} x {} x {}; {}", shape.m, shape.n, shape.k, why));
    }
    detail::check_cuda(device::launch_gemv_gemm(p, instance, call.stream),
                       fmt::format("linear: launching gemv {}", config));
  }
};

}  // namespace

std::shared_ptr<const Kernel> make_gemv_kernel() { return std::make_shared<GemvKernel>(); }

}  // namespace mxlinear
