// The Hopper prefill kernel in the registry: a tuned kernel (it claims only the (N, K) its
// tuned rows name) for large M. Each call runs the bf16 activation pre-pass into the call's
// scratch, then the GEMM. Its configs are every compiled instance with each K split whose
// output tile fits the instance's ring (prefill_config.hpp).
#include "host/registry/prefill_kernel.hpp"

#include <fmt/format.h>

#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "device/kernels/prefill/activation_bf16.hpp"
#include "device/kernels/prefill/prefill_gemm.hpp"
#include "host/cuda_check.hpp"
#include "host/registry/configured_kernel.hpp"
#include "host/registry/kernel_params.hpp"
#include "host/registry/prefill_config.hpp"
#include "host/validate.hpp"

namespace mxlinear {
namespace {

constexpr std::size_t kScratchAlign = 256;
// 3, 5 and 6 let more SMs stream where powers of two leave many idle (draft qkv at M = 32: 36 row
// tiles x 3 = 108 CTAs against 72). Not every such grid runs in one wave: a cluster's CTAs share
// a GPC, and 40 clusters of 3 did not; the sweep decides. 7 helps no seed shape.
constexpr int kSplitCounts[] = {1, 2, 3, 4, 5, 6, 8};
static_assert(kSplitCounts[std::size(kSplitCounts) - 1] == device::kPrefillMaxSplits);

// Every instance with each split count whose output tile fits its ring.
const detail::ConfigTable<detail::PrefillConfig>& compiled_configs() {
  static const auto table = detail::ConfigTable<detail::PrefillConfig>::with_splits(
      device::prefill_gemm_instances(), kSplitCounts, device::prefill_gemm_splits_fit);
  return table;
}

// A config name parsed, and the instance that runs it (instance < 0: the kernel has none).
using PrefillConfig = detail::Resolved<detail::PrefillConfig>;

PrefillConfig find_config(std::string_view config) { return compiled_configs().find(config); }

class PrefillKernel final : public detail::ConfiguredKernel<detail::PrefillConfig> {
 public:
  PrefillKernel() : ConfiguredKernel("prefill", compiled_configs()) {}

  Verdict can_implement(const LayerDescription& layer) const override {
    if (const Verdict v = detail::needs_whole_blocks(layer); !v.ok()) return v;
    if (const Verdict v = detail::needs_16_byte_rows(layer); !v.ok()) return v;
    for (std::size_t i = 0; i < device::prefill_gemm_instances().size(); ++i) {
      if (device::prefill_gemm_smem_bytes(static_cast<int>(i), static_cast<int>(layer.k), 1) <=
          device::kSm90MaxSmemPerCta) {
        return {};
      }
    }
    return {fmt::format("K = {} needs more shared memory for its weight scales than a CTA has",
                        layer.k)};
  }

  bool needs_tuned_rows() const override { return true; }
  // K splits where tokens are few; 128-row tiles from M = their token count up; 64-row tiles
  // (two CTAs fit an SM, so one's main loop hides the other's prologue and epilogue: small K)
  // from M = 8 up.
  bool worth_sweeping(std::int64_t m, std::string_view config) const override {
    const PrefillConfig c = find_config(config);
    if (c.instance < 0) return false;
    if (c.splits > 1) return m >= 8 && m <= 512;
    return m >= (c.rows < 128 ? 8 : c.tokens);
  }

  std::string default_config(std::int64_t) const override {
    return detail::PrefillConfig::of(device::prefill_gemm_instances()[0], 1).name();
  }

  // The bf16 activation, then for a stream-K config its partial tiles and flags.
  std::size_t workspace_bytes(const LinearShape& shape, const std::string& config) const override {
    return activation_bytes(shape) + (is_stream_k(config) ? device::prefill_stream_k_bytes() : 0);
  }

  // A stream-K config's flags, after its partial tiles: zero when it starts, which the pass that
  // writes its bf16 activation sees to (that pass runs before it on the stream in either case).
  ScratchWords scratch_words_to_zero(const LinearShape& shape,
                                     const std::string& config) const override {
    const PrefillConfig c = find_config(config);
    if (c.instance < 0 ||
        !device::prefill_gemm_instances()[static_cast<std::size_t>(c.instance)].stream_k) {
      return {};
    }
    const auto& i = device::prefill_gemm_instances()[static_cast<std::size_t>(c.instance)];
    return {activation_bytes(shape) +
                static_cast<std::size_t>(device::kPrefillMaxStreamKCtas) * i.rows * i.tokens * 4,
            static_cast<std::size_t>(device::kPrefillMaxStreamKCtas)};
  }

  bool takes_dequantized_activation(const std::string&) const override { return true; }

  Verdict can_run(std::int64_t m, std::int64_t k, std::string_view config) const override {
    const PrefillConfig c = find_config(config);
    if (c.instance < 0) return not_a_config(config);
    if (is_stream_k(config) && m < device::kPrefillStreamKMinRows) {
      return {fmt::format("is '{}'; stream-K configs run from M = {} (M is {})", config,
                          device::kPrefillStreamKMinRows, m)};
    }
    if (const Verdict v = splits_fit(config, c.splits, k); !v.ok()) return v;
    return smem_fits(config,
                     device::prefill_gemm_smem_bytes(c.instance, static_cast<int>(k), c.splits),
                     "K = {} with {} K splits", k, c.splits);
  }

  std::optional<LaunchFootprint> launch_footprint(const LinearShape& shape,
                                                  const std::string& config) const override {
    const PrefillConfig c = find_config(config);
    constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
    if (c.instance < 0 || shape.m < 1 || shape.m > kIntMax || shape.n < 1 || shape.n > kIntMax ||
        shape.k > kIntMax || !can_run(shape.m, shape.k, config).ok()) {
      return std::nullopt;
    }
    device::PrefillFootprint f;
    if (device::prefill_gemm_footprint(c.instance, static_cast<int>(shape.m),
                                       static_cast<int>(shape.n), static_cast<int>(shape.k),
                                       c.splits, &f) != cudaSuccess) {
      (void)cudaGetLastError();  // the query's error is not the stream's
      return std::nullopt;
    }
    return LaunchFootprint{f.ctas, f.resident_ctas};
  }

  void run(const KernelCall& call, const std::string& config) const override {
    const PrefillConfig c = known(config);
    const LinearShape& shape = call.shape;
    require(can_run(shape.m, shape.k, config));
    require_token_tiles(shape, c.tokens, config);
    if (call.workspace.bytes < workspace_bytes(shape, config) || call.workspace.data == nullptr) {
      detail::fail(ErrorCode::kInternal, "prefill kernel", "workspace",
                   fmt::format("has {} bytes; the call needs {} (linear() provides them)",
                               call.workspace.bytes, workspace_bytes(shape, config)));
    }
    device::GemmParams p = detail::gemm_params(call);
    const ScratchWords flags = scratch_words_to_zero(shape, config);
    if (flags.count > 0) {
      auto* scratch = static_cast<std::uint8_t*>(call.workspace.data);
      p.partials = reinterpret_cast<float*>(scratch + activation_bytes(shape));
      p.flags = reinterpret_cast<std::uint32_t*>(scratch + flags.offset);
    }
    require_layer(device::prefill_gemm_unsupported(p), shape);
    if (!call.x_dequantized_in_workspace) {
      device::ActivationBf16Params a;
      a.q = p.a;
      a.scales = p.a_scales;
      a.ld_q = p.ld_a;
      a.ld_scales = p.ld_a_scales;
      a.out = call.workspace.data;
      a.ld_out = shape.k;
      a.m = p.m;
      a.k = p.k;
      a.zero_for_next = {p.flags, static_cast<int>(flags.count)};
      detail::check_cuda(device::launch_activation_bf16(a, call.stream),
                         "linear: launching the prefill activation pre-pass");
    }
    require_launched(device::launch_prefill_gemm(p, call.workspace.data, shape.k, c.instance,
                                                 c.splits, call.stream),
                     config);
  }

 private:
  static std::size_t activation_bytes(const LinearShape& shape) {
    const auto bytes = static_cast<std::size_t>(shape.m * shape.k) * 2;
    return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
  }
  static bool is_stream_k(std::string_view config) {
    return find_config(config).walk == detail::PrefillConfig::Walk::kStreamK;
  }
};

}  // namespace

std::shared_ptr<const Kernel> make_prefill_kernel() { return std::make_shared<PrefillKernel>(); }

}  // namespace mxlinear
