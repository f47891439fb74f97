// The cost model that chooses a config for a shape and M no tuned row covers. Each kernel
// describes a config's work in kernel-independent terms (WorkShape): its output tile, K split,
// walk over the tiles and the CTAs an SM holds. The model prices that on the device's rates:
// the busiest SM's tensor work and bytes, the DRAM bytes of the call, the waves' fill and drain,
// the split meeting and the activation pass ahead of the kernel. The estimate ranks configs; it
// is not a prediction to publish (docs/TUNED_TABLES.md says how close it comes).
#pragma once

#include <cstdint>

#include "mxlinear/linear_types.hpp"
#include "mxlinear/selection.hpp"

namespace mxlinear::detail {

struct WorkShape {
  // How the tensor work is done.
  enum class Engine : std::uint8_t {
    // mma.sync on exactly widened e4m3, each MX block's partial promoted into fp32 (gemv).
    kMmaPromoted,
    // f16 wgmma with the weights on its 64-row side, promoted per MX block (decode).
    kWgmmaPromoted,
    // bf16 wgmma on scale-folded operands, all of K accumulated in the tensor core (prefill).
    kWgmmaFolded,
    // mma.sync, each warp one chain through whole K parts (the gemv's k-parts configs), on
    // scale-folded or (unscaled_chain) unscaled operands: a warp's chain is serial, so CTAs
    // beyond those an SM holds wait a wave.
    kMmaChained,
  };
  // How the CTAs cover the output tiles: one CTA per tile (and K split); one CTA per SM walking
  // the tiles; or that walk cut into equal runs of (tile, 128-K chunk) units.
  enum class Walk : std::uint8_t { kTiles, kPersistent, kStreamK };

  Engine engine = Engine::kWgmmaFolded;
  Walk walk = Walk::kTiles;
  int rows = 64;   // weight rows of one CTA's output tile
  int tokens = 8;  // activation rows of one CTA's output tile
  int splits = 1;  // K ranges of a tile, met over a cluster of that many CTAs or in memory
  // The kernel can meet the splits in memory instead (meets_splits_in_memory says where).
  bool splits_can_meet_in_memory = false;
  int ctas_per_sm = 1;      // CTAs of this config one SM holds at once
  int consumer_groups = 1;  // warpgroups sharing a tile's tensor work
  int consumer_warps = 4;   // warps widening and promoting the weights (promoted engines)
  double activation_bytes_per_element = 1.03125;  // what the kernel reads of x: e4m3 + scales
  // Each CTA quantizes its tokens' K range itself (or, k parts, stages them as 16-bit rows).
  bool quantizes_tokens = false;
  // K parts a CTA sums apart (the batch-invariant mode's k-parts tiles; 1 elsewhere).
  int k_parts = 1;
  // A chained warp in the scaled domain (the gemv's k-parts tiles): unscaled f16 operands.
  bool unscaled_chain = false;
  // The share of the bf16 rate the folded main loop reaches where the kernel has measured it
  // for this tile (0: not measured); priced where DeviceRates::measured_shares says so.
  double measured_share = 0;
};

// What the linear runs ahead of the kernel for a bf16 activation (CallPlan::activation).
enum class ActivationPass : std::uint8_t {
  kNone,        // the kernel quantizes x itself
  kQuantize,    // e4m3 + scales written
  kDequantize,  // e4m3 quantization and the bf16 dequantized copy written
};

// The rates of a device the model prices on, with the SM count of the device described. The
// defaults are sm_90a figures fitted to an H200 sweep of every config on shapes no table has
// rows for (bench/models/untuned-shapes.csv, M = 1 to 4096): the fit minimises the mean log of
// (time of the config chosen / time of the fastest config), plus 0.3 x its worst. The L2 rate
// was then set against `mxlinear tune --timings` of every
// config on the reference model's shapes (M = 1 to 8192, both modes) and those shapes.
struct DeviceRates {
  int sms = 132;
  double read_bytes_per_s = 4.4e12;           // DRAM read ceiling
  double l2_bytes_per_s = 9e12;               // what all SMs together stream from L2
  double sm_bytes_per_s = 130e9;              // what one SM's loads in flight sustain (L2 or DRAM)
  double bf16_flops_per_sm_s = 800e12 / 132;  // the dense bf16 wgmma rate of one SM
  // e4m3 weights one warp widens exactly and promotes per MX block per second (the promoted
  // engines' cost per weight, whatever the token count). It is latency-bound: the CTAs an SM
  // holds at once do it side by side.
  double promoted_weights_per_warp_s = 4e9;
  // The same for a chained warp (kMmaChained): it folds each scale into bf16 weights and waits
  // for each mma of its chain. Set against `mxlinear bench --all-configs --batch-invariant` of
  // the gemv's k-parts configs at M = 1 on four layers (2.3e9 to 4.7e9 per warp).
  double chained_weights_per_warp_s = 2.5e9;
  // The same in the scaled domain (WorkShape::unscaled_chain): ~28 instructions a block and warp
  // where the folded chain issues ~48.
  double unscaled_chained_weights_per_warp_s = 4.3e9;
  // What one SM's chained warps together get through, whatever their count: the SM's chains
  // share its issue slots and its ring copies (dense 6144 x 6144 at M = 1 runs 18 chained warps
  // an SM), so past a few warps more chains an SM do not shorten the busiest SM's time.
  // Fitted with chained_cta_s to the k-parts tiles' times at M = 1 on the four batch-invariant
  // layers (bench/models/batch-invariant.csv, H200): without the two, the four-chain tile and the
  // 8-row tile were priced alike on one-part layers and the four-chain tile the cheaper on
  // Qwen3-32B qkv, where it is the slower.
  double chained_weights_per_sm_s = 27e9;
  // A chained CTA's fixed work, paid in turn by the CTAs an SM holds: instruction fetch at launch,
  // the loads of its scales and the staging of its tokens before the main loop.
  double chained_cta_s = 0.15e-6;
  // The share of the bf16 rate a folded main loop reaches: tokens / (tokens + folded_tokens_offset)
  // (the widening of each weight is shared by the tile's tokens), times single_group_share where
  // a CTA has one consumer warpgroup (it widens and waits for its wgmma in turn, and a second CTA
  // on its SM did not make up for that in `mxlinear tune --timings`); the promoted
  // engines' MMAs run at a fixed share.
  double folded_tokens_offset = 31;
  double single_group_share = 0.6;
  double wgmma_promoted_share = 0.2;
  double mma_promoted_share = 0.31;
  // Price folded tiles at the shares their kernel measured (WorkShape::measured_share) instead.
  // The batch-invariant mode does from kMeasuredSharesFromM tokens: there its choices are among
  // the prefill kernel's tiles, which the curve misranks (it overrates the 128 x 64 and 64 x 32
  // tiles 1.2-1.6x). Below, the mode's GEMV configs compete with the 64 x 32 tile and their rates
  // were set against its curve price. The default mode keeps the curve: its choices between the
  // prefill tiles and the decode kernel's at small M, and its split counts at long K, were fitted
  // with it, and the measured shares alone moved 19 of its choices on the sweep's figures to
  // 0.59-1.52x the time (docs/PERFORMANCE.md, "The batch-invariant mode"), 1.03x geomean
  // (measured on the H200).
  bool measured_shares = false;
  // Activation elements a CTA that quantizes its own tokens quantizes per second.
  double quantized_per_cta_s = 2.5e9;
  double tile_latency_s = 0.43e-6;      // a CTA's prologue (first stage in) and epilogue (store)
  double walk_tile_s = 0.3e-6;          // a persistent or stream-K CTA's cost per tile it walks
  double launch_s = 1.44e-6;            // a kernel launch on a stream
  double cluster_meeting_s = 1.36e-6;   // a cluster barrier of the split meeting
  double meeting_bytes_per_s = 6.25e9;  // a split's share received through distributed smem
  // A split meeting in memory beyond its bytes: the count and the reads' round trips (qkv's 120
  // CTAs of 64 x 32 in three splits ran 1.7 us over the same CTAs unsplit, H100).
  double memory_meeting_s = 1.5e-6;
  double part_change_s = 4e-6;  // a k-parts tile's stop at each part change, 128 x 128

  static DeviceRates of(const DeviceDescription& device);
};

// The fewest tokens at which the batch-invariant mode prices folded tiles at their measured
// shares (DeviceRates::measured_shares); the shares were measured from there up.
constexpr std::int64_t kMeasuredSharesFromM = 16;

// The fraction of an SM's CTA slots that clusters of `size` CTAs can occupy at once: a cluster
// must fit one GPC. Measured on the H200 for 3 (36 clusters fit, 40 do not); the others follow
// from its GPCs of 16 and 18 SMs.
double cluster_fill(int size);

// Whether the K splits of `w` over `tiles` output tiles meet in memory on `sms` SMs rather than
// over a cluster: where the kernel can, the CTAs fit the SMs one each, and a cluster launch would
// not hold them so: two fit an SM (the cluster scheduler then places them two to an SM), or not
// all the clusters fit the GPCs (cluster_fill). There the CTAs launched plainly spread one to an
// SM and meet through L2; elsewhere the cluster's meeting is the cheaper one (docs/PERFORMANCE.md,
// "The kernels and why they are built so").
bool meets_splits_in_memory(const WorkShape& w, std::int64_t tiles, int sms);

// Seconds one call of M x N x K takes on `rates` with work shape `w` and `pass` ahead of it.
double estimated_seconds(const WorkShape& w, ActivationPass pass, const LinearShape& shape,
                         const DeviceRates& rates);

}  // namespace mxlinear::detail
