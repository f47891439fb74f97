// The Hopper decode kernel in the registry: ahead of the generic kernel, and claiming only the
// (N, K) its tuned rows name. Its configs are every compiled instance with K split 1, 2, 4 or 8
// ways (decode_config.hpp).
#include "host/registry/decode_kernel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "device/kernels/decode/decode_gemm.hpp"
#include "host/registry/configured_kernel.hpp"
#include "host/registry/decode_config.hpp"
#include "host/registry/kernel_params.hpp"
#include "host/validate.hpp"

namespace mxlinear {
namespace {

constexpr int kSplitChoices[] = {1, 2, 4, 8};

const detail::ConfigTable<detail::DecodeConfig>& compiled_configs() {
  static const auto table = detail::ConfigTable<detail::DecodeConfig>::with_splits(
      device::decode_gemm_instances(), kSplitChoices, [](int, int) { return true; });
  return table;
}

class DecodeKernel final : public detail::ConfiguredKernel<detail::DecodeConfig> {
 public:
  DecodeKernel() : ConfiguredKernel("decode", compiled_configs()) {}

  Verdict can_implement(const LayerDescription& layer) const override {
    if (Verdict v = detail::needs_operand(layer, {ActivationOperand::kMx}); !v.ok()) return v;
    return detail::needs_whole_blocks_in_16_byte_rows(layer);
  }

  bool needs_tuned_rows() const override { return true; }
  bool worth_sweeping(std::int64_t m, std::string_view) const override { return m <= 256; }

  std::string default_config(std::int64_t m) const override {
    const std::size_t i = m <= 8 ? 0 : (m <= 32 ? 1 : 2);
    return detail::DecodeConfig::of(device::decode_gemm_instances()[i], 4).name();
  }

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
    const auto parsed = compiled_configs().find(config);
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
    // than the quantize launch it saves: 36 us against 22 us at 1 x 6144 x 6144, w64_t8_st4_split4
    // (3 against 4 CTAs per SM, ncu).
    return twin_smem <= device::kSm90MaxSmemPerCta &&
           device::decode_ctas_per_sm(twin_smem) >= device::decode_ctas_per_sm(plain_smem);
  }

  Verdict can_run(std::int64_t, std::int64_t k, std::string_view config) const override {
    return config_verdict(k, config, /*quantizing=*/false);
  }

  // 64 weight rows a CTA, the tokens on wgmma's N side; as many CTAs an SM as its shared memory
  // holds (the plain instance: the twin where it quantizes is priced by its activation pass).
  std::optional<detail::WorkShape> work_shape(const LinearShape& shape,
                                              std::string_view config) const override {
    const auto c = compiled_configs().find(config);
    if (c.instance < 0) return std::nullopt;
    const int groups = c.alternating ? 2 : 1;
    return detail::WorkShape{
        .engine = detail::WorkShape::Engine::kWgmmaPromoted,
        .rows = c.rows,
        .tokens = c.tokens,
        .splits = c.splits,
        .ctas_per_sm = std::max(1, device::decode_ctas_per_sm(device::decode_gemm_smem_bytes(
                                       c.instance, static_cast<int>(shape.k), c.splits))),
        .consumer_groups = groups,
        .consumer_warps = 4 * groups};
  }

  void run(const KernelCall& call, const std::string& config) const override {
    const auto c = known(config);
    const LinearShape& shape = call.shape;
    const bool quantizing = call.activation == ActivationForm::kUnquantized;
    if (quantizing &&
        device::decode_gemm_instances()[c.instance].quantizing_fixed_smem_bytes == 0) {
      detail::fail(ErrorCode::kInvalidArgument, "decode kernel", "config",
                   fmt::format("is '{}', which does not quantize its activation; the call passed "
                               "an unquantized one",
                               config));
    }
    require(config_verdict(shape.k, config, quantizing));
    require_token_tiles(shape, c.tokens, config);
    const device::GemmParams p = detail::gemm_params(call);
    require_layer(device::decode_gemm_unsupported(p), shape);
    require_launched(device::launch_decode_gemm(p, c.instance, c.splits, call.stream), config);
  }

 private:
  // can_run's checks, for the instance that quantizes its activation or the plain one.
  Verdict config_verdict(std::int64_t k, std::string_view config, bool quantizing) const {
    const auto c = compiled_configs().find(config);
    if (c.instance < 0) return not_a_config(config);
    if (const Verdict v = splits_fit(config, c.splits, k); !v.ok()) return v;
    return smem_fits(
        config,
        device::decode_gemm_smem_bytes(c.instance, static_cast<int>(k), c.splits, quantizing),
        "K = {} with {} K splits", k, c.splits);
  }
};

}  // namespace

std::shared_ptr<const Kernel> make_decode_kernel() { return std::make_shared<DecodeKernel>(); }

}  // namespace mxlinear
