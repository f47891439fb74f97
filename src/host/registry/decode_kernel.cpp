// The Hopper decode kernel in the registry: ahead of the generic kernel, and claiming only the
// (N, K) its tuned rows name. Config names spell every axis: "t32_st6_split4" = 32 tokens per
// CTA (wgmma N), a 6-stage ring, K split over a 4-CTA cluster; "t8x2_st8_split4" has two
// consumer warpgroups taking alternate stages.
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "device/kernels/decode/decode_gemm.hpp"
#include "host/cuda_check.hpp"
#include "host/registry/decode_kernel.hpp"
#include "host/registry/kernel_params.hpp"
#include "host/registry/named_configs.hpp"
#include "host/validate.hpp"

namespace mxlinear {
namespace {

constexpr int kSplitChoices[] = {1, 2, 4, 8};
constexpr std::int64_t kMaxGridZ = 65535;

std::string config_name(const device::DecodeInstanceInfo& i, int splits) {
  return fmt::format("t{}{}_st{}_split{}", i.tokens,
                     i.consumer_groups > 1 ? fmt::format("x{}", i.consumer_groups) : std::string(),
                     i.stages, splits);
}

struct ParsedConfig {
  int instance = -1;
  int splits = 0;
};

const detail::NamedConfigs<ParsedConfig>& named_configs() {
  static const detail::NamedConfigs<ParsedConfig> all = [] {
    std::vector<std::pair<std::string, ParsedConfig>> named;
    const auto instances = device::decode_gemm_instances();
    for (std::size_t i = 0; i < instances.size(); ++i) {
      for (const int splits : kSplitChoices) {
        named.emplace_back(config_name(instances[i], splits),
                           ParsedConfig{static_cast<int>(i), splits});
      }
    }
    return detail::NamedConfigs<ParsedConfig>(std::move(named));
  }();
  return all;
}

ParsedConfig parse_config(std::string_view config) {
  const ParsedConfig* found = named_configs().find(config);
  return found != nullptr ? *found : ParsedConfig{};
}

class DecodeKernel final : public Kernel {
 public:
  std::string_view name() const override { return "decode"; }

  std::vector<std::string> configs() const override { return named_configs().names(); }

  Verdict is_supported(const DeviceDescription& device) const override {
    return detail::needs_sm90a(device);
  }

  Verdict can_implement(const LayerDescription& layer) const override {
    if (layer.k % 32 != 0) return {fmt::format("needs K % 32 == 0; K is {}", layer.k)};
    if (layer.alignment < 16) {
      return {fmt::format("needs 16-byte aligned e4m3 rows; the layer's are {}-byte aligned",
                          layer.alignment)};
    }
    return {};
  }

  bool needs_tuned_rows() const override { return true; }
  bool worth_sweeping(std::int64_t m, std::string_view) const override { return m <= 256; }

  std::string default_config(std::int64_t m) const override {
    const auto instances = device::decode_gemm_instances();
    const std::size_t i = m <= 8 ? 0 : (m <= 32 ? 1 : 2);
    return config_name(instances[i], 4);
  }

  void prepare_weights(const MxWeight& in, const MxWeight& out,
                       cudaStream_t stream) const override {
    detail::copy_weight(in, out, stream);  // TMA reads the checkpoint layout as it is
  }
  bool prepared_weights_cacheable() const override { return true; }

  // The 8-token instances have twins that quantize a bf16/fp16 activation themselves, which
  // saves the quantize kernel ahead of a few-token linear (1-3 us at M = 8 on the H200). No
  // scratch.
  CallPlan plan(const Problem& problem, std::string_view config) const override {
    CallPlan p;
    if (quantizes_activation(problem, config)) p.activation = ActivationForm::kUnquantized;
    return p;
  }
  std::size_t max_scratch_bytes(std::int64_t, std::int64_t,
                                const DeviceDescription&) const override {
    return 0;
  }

  static bool quantizes_activation(const Problem& problem, std::string_view config) {
    const ParsedConfig parsed = parse_config(config);
    // The twin holds a 16-bit activation ring, larger than the e4m3 one: where it would not fit
    // at this K, the call takes the quantize kernel and the plain instance instead.
    if (parsed.instance < 0 ||
        device::decode_gemm_instances()[parsed.instance].quantizing_fixed_smem_bytes == 0 ||
        !problem.x_self_quantizable) {
      return false;
    }
    const int k = static_cast<int>(problem.shape.k);
    const int twin_smem = device::decode_gemm_smem_bytes(parsed.instance, k, parsed.splits, true);
    const int plain_smem = device::decode_gemm_smem_bytes(parsed.instance, k, parsed.splits);
    // A twin that fits fewer CTAs per SM than the plain instance loses more to the extra wave
    // than the quantize launch it saves: 36 us against 22 us at 1 x 6144 x 6144, t8_st4_split4
    // (3 against 4 CTAs per SM, ncu).
    return twin_smem <= device::kSm90MaxSmemPerCta &&
           device::decode_ctas_per_sm(twin_smem) >= device::decode_ctas_per_sm(plain_smem);
  }

  Verdict can_run(std::int64_t, std::int64_t k, std::string_view config) const override {
    return config_verdict(k, config, /*quantizing=*/false);
  }

  void run(const KernelCall& call, const std::string& config) const override {
    const ParsedConfig parsed = parse_config(config);
    if (parsed.instance < 0) {
      detail::fail(
          ErrorCode::kInvalidArgument, "decode kernel", "config",
          fmt::format("is '{}'; expected one of: {}", config, fmt::join(this->configs(), ", ")));
    }
    const LinearShape& shape = call.shape;
    const bool quantizing = call.activation == ActivationForm::kUnquantized;
    if (quantizing &&
        device::decode_gemm_instances()[parsed.instance].quantizing_fixed_smem_bytes == 0) {
      detail::fail(ErrorCode::kInvalidArgument, "decode kernel", "config",
                   fmt::format("is '{}', which does not quantize its activation; the call passed "
                               "an unquantized one",
                               config));
    }
    if (const Verdict v = config_verdict(shape.k, config, quantizing); !v.ok()) {
      detail::fail(ErrorCode::kUnsupported, "decode kernel", "config", v.reason);
    }
    const int tokens = device::decode_gemm_instances()[parsed.instance].tokens;
    if ((shape.m + tokens - 1) / tokens > kMaxGridZ) {
      detail::fail(ErrorCode::kUnsupported, "linear", "x",
                   fmt::format("has {} rows; expected at most {} for decode config {}", shape.m,
                               kMaxGridZ * tokens, config));
    }
    const device::GemmParams p = detail::gemm_params(call);
    if (const std::string_view why = device::decode_gemm_unsupported(p); !why.empty()) {
      detail::fail(ErrorCode::kUnsupported, "decode kernel", "layer",
                   fmt::format("is {} x {} x {}; {}", shape.m, shape.n, shape.k, why));
    }
    detail::check_cuda(device::launch_decode_gemm(p, parsed.instance, parsed.splits, call.stream),
                       fmt::format("linear: launching decode GEMM {}", config));
  }

 private:
  // can_run's checks, for the instance that quantizes its activation or the plain one.
  static Verdict config_verdict(std::int64_t k, std::string_view config, bool quantizing) {
    const ParsedConfig parsed = parse_config(config);
    if (parsed.instance < 0) return {fmt::format("is '{}', not a decode config", config)};
    if (const std::int64_t chunks = (k + 127) / 128; parsed.splits > chunks) {
      return {fmt::format("is '{}', {} K splits; K = {} has only {} chunks of 128", config,
                          parsed.splits, k, chunks)};
    }
    if (const int smem = device::decode_gemm_smem_bytes(parsed.instance, static_cast<int>(k),
                                                        parsed.splits, quantizing);
        smem > device::kSm90MaxSmemPerCta) {
      return {
          fmt::format("is '{}'; K = {} needs {} bytes of shared memory per CTA with {} "
                      "splits, more than {}",
                      config, k, smem, parsed.splits, device::kSm90MaxSmemPerCta)};
    }
    return {};
  }
};

}  // namespace

std::shared_ptr<const Kernel> make_decode_kernel() { return std::make_shared<DecodeKernel>(); }

}  // namespace mxlinear
