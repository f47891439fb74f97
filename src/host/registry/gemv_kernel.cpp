// The MX GEMV in the registry: a tuned kernel for the smallest M (it claims only the (N, K) its
// tuned rows name). Its configs are every compiled instance with each point at which the next
// kernel may start launching (gemv_config.hpp).
#include "host/registry/gemv_kernel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "device/kernels/gemv/gemv_gemm.hpp"
#include "host/registry/configured_kernel.hpp"
#include "host/registry/gemv_config.hpp"
#include "host/registry/kernel_params.hpp"
#include "host/validate.hpp"

namespace mxlinear {
namespace {

using detail::GemvConfig;

// Every instance with each next-launch point, the instances' default point first.
const detail::ConfigTable<GemvConfig>& compiled_configs() {
  static const detail::ConfigTable<GemvConfig> table = [] {
    detail::ConfigTable<GemvConfig> t;
    const auto instances = device::gemv_gemm_instances();
    for (const device::NextLaunch next :
         {device::NextLaunch::kAfterActivation, device::NextLaunch::kAfterWait,
          device::NextLaunch::kAtEntry}) {
      for (std::size_t i = 0; i < instances.size(); ++i) {
        t.add(GemvConfig::of(instances[i], next), static_cast<int>(i));
      }
    }
    return t;
  }();
  return table;
}

// Where each CTA quantizes its own tokens, the SM does it once for each of its CTAs: the
// elements an SM quantizes are its share of the grid's CTAs (rounded up) times a CTA's tokens
// times K. The k-parts tiles that quantize into the scaled domain (GemvInstanceInfo::
// quantizes_unscaled: one K warp per row tile) quantize in each CTA up to
// kKPartsSelfQuantizedElementsPerSm and take the quantize kernel's output above it, as the others
// always do. Measured at M = 1 (each CTA quantizing against the quantize kernel first, on the 8-row
// tiles; each over its W8A16 staging): 6144 x 2048 on 1.5 CTAs an SM 1.2 us faster, 2560 x 6144
// on 2.4 level, 6144 x 6144 on 5.8 0.6 us slower, 10240 x 5120 on 9.7 2.0 us slower.
constexpr std::int64_t kKPartsSelfQuantizedElementsPerSm = 20480;

std::int64_t quantized_elements_per_sm(const Problem& problem, const GemvConfig& c) {
  const LinearShape& s = problem.shape;
  const std::int64_t ctas = detail::output_tiles(s, c.rows, c.tokens) * c.splits;
  const std::int64_t sms = std::max(1, problem.sms);
  return (ctas + sms - 1) / sms * std::min<std::int64_t>(s.m, c.tokens) * s.k;
}

// `as_is`: the W8A16 kernel "gemv_a16", which stages the caller's bf16 or fp16 x as it is
// (16-byte aligned rows); otherwise the W8A8 kernel "gemv", which quantizes it.
class GemvKernel final : public detail::ConfiguredKernel<GemvConfig> {
 public:
  explicit GemvKernel(bool as_is)
      : ConfiguredKernel(as_is ? "gemv_a16" : "gemv", compiled_configs(),
                         as_is ? ActivationMode::kW8A16 : ActivationMode::kW8A8) {}

  Verdict can_implement(const LayerDescription& layer) const override {
    if (const Verdict v = needs_mode_operand(layer); !v.ok()) return v;
    if (const Verdict v = detail::needs_16_byte_rows(layer); !v.ok()) return v;
    if (as_is()) {
      if (const Verdict v = detail::needs_16_byte_x_rows(layer); !v.ok()) return v;
    }
    if (device::gemv_gemm_smem_bytes(0, 1, static_cast<int>(layer.k), as_is()) >
        device::kSm90MaxSmemPerCta) {
      return {fmt::format("K = {} does not fit one token's activation in shared memory", layer.k)};
    }
    return {};
  }

  bool needs_tuned_rows() const override { return true; }
  // Up to 16 tokens; two token tiles only where one would not hold them all (at M <= 8 the
  // second only pads: measured 2.5x slower at M = 1).
  // W8A16 only up to 8 tokens: its 16-bit rows double the staged bytes, and at M = 16 it ran at
  // 0.50-0.68x of cuBLAS bf16 on 6 of the seed's 8 shapes where the prefill kernel ran 0.88-1.17x
  // (H200, same run).
  // The k-parts configs serve the batch-invariant mode only (their order costs idle warps).
  bool worth_sweeping(std::int64_t m, std::string_view config) const override {
    const auto c = find(config);
    if (c.k_parts || (as_is() && m > 8)) return false;
    return m <= 16 && (m > 8 || c.tokens <= 8);
  }

  // The k-parts configs sum K in the prefill kernel's order (gemv_gemm.cuh): they serve the
  // batch-invariant mode beside it, at the few tokens where a GEMV is faster.
  bool keeps_k_order(std::string_view config, std::int64_t) const override {
    const auto c = find(config);
    return c.instance >= 0 && c.k_parts;
  }
  std::string_view k_order_family() const override { return as_is() ? "prefill_a16" : "prefill"; }

  std::string default_config(std::int64_t m) const override {
    return GemvConfig::of(device::gemv_gemm_instances()[m <= 8 ? 1 : 2]).name();
  }

  // At a few tokens a separate quantize kernel costs a large share of the GEMV; each CTA
  // quantizes its tokens itself instead (16-byte aligned bf16/fp16 rows), or in W8A16 stages
  // them as they are. No scratch. The k-parts configs whose tile quantizes into the scaled
  // domain (one K warp per row tile) do so where an SM's CTAs quantize few elements
  // (quantized_elements_per_sm); the others take the quantize kernel's output.
  CallPlan plan(const Problem& problem, std::string_view config) const override {
    CallPlan p;
    if (as_is() && problem.operand != ActivationOperand::kMx) {
      p.activation = ActivationForm::kAsIs;
    } else if (problem.x_self_quantizable) {
      const auto c = find(config);
      if (!c.k_parts ||
          (device::gemv_gemm_instances()[static_cast<std::size_t>(c.instance)].quantizes_unscaled &&
           quantized_elements_per_sm(problem, c) <= kKPartsSelfQuantizedElementsPerSm)) {
        p.activation = ActivationForm::kUnquantized;
      }
    }
    return p;
  }
  std::size_t max_scratch_bytes(std::int64_t, std::int64_t,
                                const DeviceDescription&) const override {
    return 0;
  }

  Verdict can_run(std::int64_t m, std::int64_t k, std::string_view config) const override {
    const int instance = find(config).instance;
    if (instance < 0) return not_a_config(config);
    return smem_fits(config,
                     device::gemv_gemm_smem_bytes(instance, m, static_cast<int>(k), as_is()),
                     "M = {}, K = {}", m, k);
  }

  // 16-row tiles (k parts: 8-row) of 8 or 16 tokens, their K over the CTA's warps and over a
  // cluster; it reads the 16-bit activation and quantizes it itself. Its CTAs are small:
  // residency is bounded by the SM's threads and shared memory.
  std::optional<detail::WorkShape> work_shape(const LinearShape& shape,
                                              std::string_view config) const override {
    const auto c = find(config);
    if (c.instance < 0) return std::nullopt;
    const device::GemvInstanceInfo& info = device::gemv_gemm_instances()[c.instance];
    const int row_tiles = c.rows / info.tile_rows;
    const int warps = row_tiles * info.warps;
    // K parts: a warp takes whole parts, so only as many warps as parts work.
    const int working =
        row_tiles * (c.k_parts ? std::min(info.warps, batch_invariant_parts_of(shape.k).value_or(1))
                               : info.warps);
    const int smem =
        device::gemv_gemm_smem_bytes(c.instance, shape.m, static_cast<int>(shape.k), as_is());
    return detail::WorkShape{
        .engine = c.k_parts ? detail::WorkShape::Engine::kMmaChained
                            : detail::WorkShape::Engine::kMmaPromoted,
        .rows = c.rows,
        .tokens = c.tokens,
        .splits = c.splits,
        .ctas_per_sm = std::max(1, std::min(device::kSm90MaxThreadsPerSm / (warps * 32),
                                            device::ctas_per_sm_by_smem(smem))),
        .consumer_warps = working,
        .activation_bytes_per_element = 2,
        // Its CTAs quantize their tokens, or (k parts, in both modes) stage them as 16-bit rows:
        // a cost per token and CTA either way.
        .quantizes_tokens = !as_is() || c.k_parts,
        // The scaled domain's per-block cost grows with the token tiles (each moves its own
        // accumulators): priced at its rate with one.
        .unscaled_chain = c.k_parts && c.tokens == 8};
  }

  void run(const KernelCall& call, const std::string& config) const override {
    const auto c = known(config);
    const LinearShape& shape = call.shape;
    require(can_run(shape.m, shape.k, config));
    require_token_tiles(shape, c.tokens, config);
    require_mode_activation(call);
    if (c.k_parts && call.operand == ActivationOperand::kF16) {
      require(
          {fmt::format("config '{}' sums K in the prefill kernel's bf16 order; x is fp16, "
                       "expected bf16",
                       config)});
    }
    device::GemmParams p = detail::gemm_params(call);
    p.next_launch = c.next_launch;
    require_layer(device::gemv_gemm_unsupported(p), shape);
    require_launched(device::launch_gemv_gemm(p, c.instance, call.stream), config);
  }
};

}  // namespace

std::shared_ptr<const Kernel> make_gemv_kernel(bool as_is) {
  return std::make_shared<GemvKernel>(as_is);
}

}  // namespace mxlinear
