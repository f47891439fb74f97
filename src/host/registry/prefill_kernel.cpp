// The Hopper prefill kernel in the registry: a tuned kernel (it claims only the (N, K) its
// tuned rows name) for large M. Each call runs the bf16 activation pre-pass into the call's
// scratch, then the GEMM. Its configs are every compiled instance with each K split whose
// output tile fits the instance's ring (prefill_config.hpp).
#include "host/registry/prefill_kernel.hpp"

#include <fmt/format.h>

#include <algorithm>
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

// Whether a config keeps its finished K parts' sum in the workspace (k-parts tiles wider than
// 128 x 128).
bool keeps_part_sums_in_memory(int instance) {
  return instance >= 0 &&
         device::prefill_gemm_instances()[static_cast<std::size_t>(instance)].part_sums_in_memory;
}

// The share of the bf16 rate each tile's main loop reaches, whatever its ring, stage size or
// walk: the cost model's curve over the tile's time against the curve's estimate, geomean over
// its unsplit configs in 60 H200 sweep figures (bench/models/untuned-shapes.csv and the
// benchmark's four layers, M = 16 to 4096, every config timed). The curve, a function of the
// tile's tokens and warpgroups alone, overrated the narrow tiles 1.2-1.6x (64 x 32 on alternate
// stages 0.34 against 0.51, 128 x 64 0.49 against 0.67) and underrated the widest. Derived from
// either half of those shapes, the table brought the batch-invariant mode's choice on the other
// half closer to the fastest config (docs/PERFORMANCE.md, "The batch-invariant mode"). 0: not
// measured.
double measured_share(const detail::PrefillConfig& c) {
  struct Share {
    int rows, tokens;
    bool alternating;
    double share;
  };
  static constexpr Share kShares[] = {
      {64, 32, false, 0.24},   {64, 64, false, 0.38},   {64, 128, false, 0.50},
      {64, 32, true, 0.34},    {64, 64, true, 0.52},    {128, 64, false, 0.49},
      {128, 128, false, 0.73}, {128, 160, false, 0.78}, {128, 192, false, 0.84},
      {128, 256, false, 0.94}, {192, 128, false, 0.78}};
  for (const Share& s : kShares) {
    if (s.rows == c.rows && s.tokens == c.tokens && s.alternating == c.alternating) {
      return s.share;
    }
  }
  return 0;
}

// `as_is`: the W8A16 kernel "prefill_a16", whose bf16 activation is the caller's bf16 x as it is
// (the linear's pass only lays it out); otherwise the W8A8 kernel "prefill".
class PrefillKernel final : public detail::ConfiguredKernel<detail::PrefillConfig> {
 public:
  explicit PrefillKernel(bool as_is)
      : ConfiguredKernel(as_is ? "prefill_a16" : "prefill", compiled_configs(),
                         as_is ? ActivationMode::kW8A16 : ActivationMode::kW8A8) {}

  Verdict can_implement(const LayerDescription& layer) const override {
    if (const Verdict v = detail::needs_operand(
            layer, {as_is() ? ActivationOperand::kBf16 : ActivationOperand::kMx});
        !v.ok()) {
      return v;
    }
    // Any K: a CTA keeps at most two windows of its weight scales in shared memory.
    return detail::needs_whole_blocks_in_16_byte_rows(layer);
  }

  bool needs_tuned_rows() const override { return true; }
  // K splits where tokens are few; 128-row tiles from M = their token count up; 64-row tiles
  // (two CTAs fit an SM, so one's main loop hides the other's prologue and epilogue: small K)
  // from M = 8 up.
  // The k-parts tiles serve the batch-invariant mode only (their part changes cost time).
  bool worth_sweeping(std::int64_t m, std::string_view config) const override {
    const auto c = compiled_configs().find(config);
    if (c.instance < 0 || c.k_parts) return false;
    if (c.splits > 1) return m >= 8 && m <= 512;
    return m >= (c.rows < 128 ? 8 : c.tokens);
  }

  std::string default_config(std::int64_t) const override {
    return detail::PrefillConfig::of(device::prefill_gemm_instances()[0], 1).name();
  }

  // The order: batch_invariant_parts(K) parts of K, each a chain of wgmma 16 K at a time into
  // an fp32 accumulator from zero, whatever the tile, stage depth or walk, their sums added in
  // part order. One part: every unsplit config. More: a split over exactly that many CTAs, or a
  // k-parts tile. Alternating warpgroups, stream-K and other splits add sums of K ranges that
  // the config chooses.
  bool keeps_k_order(std::string_view config, std::int64_t k) const override {
    const auto c = compiled_configs().find(config);
    const std::optional<int> parts = batch_invariant_parts_of(k);
    if (c.instance < 0 || c.alternating || c.walk == detail::PrefillConfig::Walk::kStreamK ||
        !parts) {
      return false;
    }
    return *parts == 1 ? c.splits == 1 : (c.k_parts || c.splits == *parts);
  }

  // Every config reads the activation as bf16 from the start of its scratch: the linear's
  // activation pass writes it there for an activation it quantizes or takes as it is, run()
  // otherwise.
  CallPlan plan(const Problem& problem, std::string_view config) const override {
    const ScratchLayout l = scratch_layout(problem.shape, config, problem.sms);
    CallPlan p;
    p.activation =
        problem.x_dtype == DType::kE4M3 ? ActivationForm::kQuantized : ActivationForm::kDequantized;
    p.scratch_bytes = l.bytes;
    p.zero_words = l.zeroed();
    return p;
  }

  // The bf16 activation; from the rows where split, stream-K and wide k-parts configs run, their
  // partial tiles and flags, part sums or split tiles for every SM.
  std::size_t max_scratch_bytes(std::int64_t rows, std::int64_t k,
                                const DeviceDescription& on) const override {
    std::size_t beyond = 0;
    if (rows >= device::kPrefillSplitInMemoryMinRows) {
      beyond = device::prefill_split_tile_bytes(on.sms);
    }
    if (rows >= device::kPrefillStreamKMinRows) {
      beyond = std::max(
          {beyond, device::prefill_stream_k_bytes(on.sms), device::prefill_part_sum_bytes(on.sms)});
    }
    return activation_bytes({rows, 0, k}) + beyond;
  }

  Verdict can_run(std::int64_t m, std::int64_t k, std::string_view config) const override {
    const auto c = compiled_configs().find(config);
    if (c.instance < 0) return not_a_config(config);
    if (c.walk == detail::PrefillConfig::Walk::kStreamK && m < device::kPrefillStreamKMinRows) {
      return {fmt::format("is '{}'; stream-K configs run from M = {} (M is {})", config,
                          device::kPrefillStreamKMinRows, m)};
    }
    if (keeps_part_sums_in_memory(c.instance) && m < device::kPrefillStreamKMinRows) {
      return {
          fmt::format("is '{}'; k-parts configs of tiles over 128 x 128 run from M = {} (M is {})",
                      config, device::kPrefillStreamKMinRows, m)};
    }
    if (const Verdict v = splits_fit(config, c.splits, k); !v.ok()) return v;
    return smem_fits(config,
                     device::prefill_gemm_smem_bytes(c.instance, static_cast<int>(k), c.splits),
                     "K = {} with {} K splits", k, c.splits);
  }

  std::optional<LaunchFootprint> launch_footprint(const LinearShape& shape,
                                                  const std::string& config) const override {
    const auto c = compiled_configs().find(config);
    constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
    if (c.instance < 0 || shape.m < 1 || shape.m > kIntMax || shape.n < 1 || shape.n > kIntMax ||
        shape.k > kIntMax || !can_run(shape.m, shape.k, config).ok()) {
      return std::nullopt;
    }
    device::PrefillFootprint f;
    const bool in_memory = split_area(shape, c, current_sms()).bytes > 0;
    if (device::prefill_gemm_footprint(c.instance, static_cast<int>(shape.m),
                                       static_cast<int>(shape.n), static_cast<int>(shape.k),
                                       c.splits, in_memory, &f) != cudaSuccess) {
      (void)cudaGetLastError();  // the query's error is not the stream's
      return std::nullopt;
    }
    return LaunchFootprint{f.ctas, f.resident_ctas};
  }

  // Its tile, split and walk; one CTA an SM for tiles of 128 rows or more and k-parts tiles of
  // 128 tokens (their accumulators fill the registers), else as many as shared memory holds, up
  // to two.
  std::optional<detail::WorkShape> work_shape(const LinearShape& shape,
                                              std::string_view config) const override {
    return work_of(shape, compiled_configs().find(config));
  }
  static std::optional<detail::WorkShape> work_of(
      const LinearShape& shape, const detail::Resolved<detail::PrefillConfig>& c) {
    if (c.instance < 0) return std::nullopt;
    using Walk = detail::PrefillConfig::Walk;
    const int by_smem = device::ctas_per_sm_by_smem(
        device::prefill_gemm_smem_bytes(c.instance, static_cast<int>(shape.k), c.splits));
    return detail::WorkShape{
        .engine = detail::WorkShape::Engine::kWgmmaFolded,
        .walk = c.walk == Walk::kTiles
                    ? detail::WorkShape::Walk::kTiles
                    : (c.walk == Walk::kPersistent ? detail::WorkShape::Walk::kPersistent
                                                   : detail::WorkShape::Walk::kStreamK),
        .rows = c.rows,
        .tokens = c.tokens,
        .splits = c.splits,
        .splits_can_meet_in_memory = can_meet_in_memory(shape, c),
        .ctas_per_sm =
            std::max(1, std::min(by_smem, c.rows >= 128 || (c.k_parts && c.tokens >= 128) ? 1 : 2)),
        // Alternating warpgroups share one 64-row tile's stages: two consumers of its work.
        .consumer_groups = c.alternating ? 2 : c.rows / 64,
        .activation_bytes_per_element = 2,  // the bf16 pre-pass output
        .k_parts = c.k_parts ? batch_invariant_parts_of(shape.k).value_or(1) : 1,
        .measured_share = measured_share(c)};
  }

  void run(const KernelCall& call, const std::string& config) const override {
    const auto c = known(config);
    const LinearShape& shape = call.shape;
    require(can_run(shape.m, shape.k, config));
    require_token_tiles(shape, c.tokens, config);
    const ScratchLayout layout =
        scratch_layout(shape, config, call.sms > 0 ? call.sms : current_sms());
    if (call.workspace.bytes < layout.bytes || call.workspace.data == nullptr) {
      detail::fail(ErrorCode::kInternal, "prefill kernel", "workspace",
                   fmt::format("has {} bytes; the call needs {} (linear() provides them)",
                               call.workspace.bytes, layout.bytes));
    }
    device::GemmParams p = detail::gemm_params(call);
    // Past the bf16 activation: the stream-K partial tiles, the split tiles or the part sums.
    auto* const scratch = static_cast<std::uint8_t*>(call.workspace.data);
    float* const beyond_activation = reinterpret_cast<float*>(scratch + layout.activation_bytes);
    const auto words_at = [scratch](const ScratchWords& words) {
      return words.count > 0 ? reinterpret_cast<std::uint32_t*>(scratch + words.offset) : nullptr;
    };
    if (layout.flags.count > 0) {
      p.partials = beyond_activation;
      p.flags = words_at(layout.flags);
      p.stream_k_ctas = layout.stream_k_ctas;
    }
    if (layout.split_arrivals.count > 0) {
      p.split_tiles = beyond_activation;
      p.split_tile_floats = static_cast<std::int64_t>(layout.split_tile_bytes / 4);
      p.split_arrivals = words_at(layout.split_arrivals);
      p.split_arrival_words = static_cast<int>(layout.split_arrivals.count);
    }
    if (layout.part_sum_slots > 0) {
      p.part_sums = beyond_activation;
      p.part_sum_slots = layout.part_sum_slots;
    }
    require_layer(device::prefill_gemm_unsupported(p), shape);
    if (as_is() && call.activation != ActivationForm::kDequantized) {
      detail::fail(ErrorCode::kInternal, "prefill kernel", "x",
                   "is not laid out in the scratch (linear() lays out W8A16's x)");
    }
    if (call.activation != ActivationForm::kDequantized) {
      device::ActivationBf16Params a;
      a.q = p.a;
      a.scales = p.a_scales;
      a.ld_q = p.ld_a;
      a.ld_scales = p.ld_a_scales;
      a.out = call.workspace.data;
      a.ld_out = shape.k;
      a.m = p.m;
      a.k = p.k;
      const ScratchWords zeroed = layout.zeroed();
      a.zero_for_next = {words_at(zeroed), static_cast<int>(zeroed.count)};
      detail::check_cuda(device::launch_activation_bf16(a, call.stream),
                         "linear: launching the prefill activation pre-pass");
    }
    const cudaError_t launched = device::launch_prefill_gemm(p, call.workspace.data, shape.k,
                                                             c.instance, c.splits, call.stream);
    if (launched == cudaErrorInvalidConfiguration) explain_register_moves(c.instance, config);
    require_launched(launched, config);
  }

 private:
  // A launch the launcher refused as an invalid configuration: if the instance's register moves
  // lack registers (prefill_gemm_register_moves), says so, naming the config and both counts.
  static void explain_register_moves(int instance, const std::string& config) {
    device::PrefillRegisterMoves moves;
    if (device::prefill_gemm_register_moves(instance, &moves) != cudaSuccess ||
        moves.compiled >= moves.needed) {
      return;
    }
    detail::fail(ErrorCode::kUnsupported, "prefill kernel", "config",
                 fmt::format("is '{}', whose warpgroups move registers (setmaxnreg) and need {} a "
                             "thread at launch; this build's kernel has {}, so it is not launched "
                             "(it would wait forever)",
                             config, moves.needed, moves.compiled));
  }

  // A call's scratch: the bf16 activation from byte 0; for a stream-K config then one fp32
  // partial tile per CTA of a launch of at most `stream_k_ctas` CTAs (one per SM), and after
  // those a flag word per CTA, which must be zero when the GEMM starts; for a k-parts config
  // that keeps its part sums in memory, one fp32 tile per SM.
  // A split config's call that meets in memory (split_area): one fp32 tile per CTA, then an
  // arrival word per output tile, which must be zero when the GEMM starts.
  struct ScratchLayout {
    std::size_t activation_bytes = 0;
    int stream_k_ctas = 0;   // 0: not a stream-K config
    int part_sum_slots = 0;  // 0: no part sums in memory
    ScratchWords flags;
    std::size_t split_tile_bytes = 0;
    ScratchWords split_arrivals;  // count 0: the splits meet over a cluster (or none)
    std::size_t bytes = 0;
    // The words the pass before the GEMM zeroes.
    ScratchWords zeroed() const { return flags.count > 0 ? flags : split_arrivals; }
  };
  static ScratchLayout scratch_layout(const LinearShape& shape, std::string_view config, int sms) {
    ScratchLayout l;
    l.activation_bytes = activation_bytes(shape);
    l.bytes = l.activation_bytes;
    const auto c = compiled_configs().find(config);
    if (sms >= 1 && keeps_part_sums_in_memory(c.instance)) {
      l.part_sum_slots = sms;
      l.bytes += device::prefill_part_sum_bytes(sms);
      return l;
    }
    if (const SplitArea a = split_area(shape, c, sms); a.bytes > 0) {
      l.split_tile_bytes = a.tile_bytes;
      l.split_arrivals = {l.activation_bytes + a.arrivals_offset, a.arrivals};
      l.bytes += a.bytes;
      return l;
    }
    if (c.instance < 0 || sms < 1 || c.walk != detail::PrefillConfig::Walk::kStreamK) return l;
    l.stream_k_ctas = sms;
    l.flags = {l.activation_bytes + static_cast<std::size_t>(sms) * c.rows * c.tokens * 4,
               static_cast<std::size_t>(sms)};
    l.bytes += device::prefill_stream_k_bytes(sms);
    return l;
  }
  // Where a split config's call meets in memory on `sms` SMs (detail::meets_splits_in_memory):
  // its tiles, then its arrival words (offsets from the area's start); bytes 0 where it meets
  // over a cluster.
  struct SplitArea {
    std::size_t tile_bytes = 0, arrivals_offset = 0, arrivals = 0, bytes = 0;
  };
  static SplitArea split_area(const LinearShape& shape,
                              const detail::Resolved<detail::PrefillConfig>& c, int sms) {
    if (!can_meet_in_memory(shape, c)) return {};  // every unsplit call: no work shape built
    const auto tiles = static_cast<std::size_t>(detail::output_tiles(shape, c.rows, c.tokens));
    const std::optional<detail::WorkShape> work = work_of(shape, c);
    if (!work || !detail::meets_splits_in_memory(*work, static_cast<std::int64_t>(tiles), sms)) {
      return {};
    }
    SplitArea a;
    a.tile_bytes = tiles * static_cast<std::size_t>(c.splits * c.rows * c.tokens * 4);
    a.arrivals_offset = round_up(a.tile_bytes);
    a.arrivals = tiles;
    a.bytes = a.arrivals_offset + round_up(tiles * 4);
    return a;
  }
  // Whether a call of this config can meet its K splits in memory at all: the tile can, it
  // splits, and M >= kPrefillSplitInMemoryMinRows (detail::meets_splits_in_memory says where).
  static bool can_meet_in_memory(const LinearShape& shape,
                                 const detail::Resolved<detail::PrefillConfig>& c) {
    return c.instance >= 0 && c.splits > 1 && shape.m >= device::kPrefillSplitInMemoryMinRows &&
           device::prefill_gemm_instances()[static_cast<std::size_t>(c.instance)].splits_in_memory;
  }
  static std::size_t round_up(std::size_t bytes) {
    return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
  }
  static std::size_t activation_bytes(const LinearShape& shape) {
    return round_up(static_cast<std::size_t>(shape.m * shape.k) * 2);
  }
};

}  // namespace

std::shared_ptr<const Kernel> make_prefill_kernel(bool as_is) {
  return std::make_shared<PrefillKernel>(as_is);
}

}  // namespace mxlinear
