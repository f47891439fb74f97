#include "host/registry/cost_model.hpp"

#include <algorithm>
#include <cmath>

namespace mxlinear::detail {
namespace {

constexpr double kScaleBytesPerWeight = 1.0 + 1.0 / 32;  // e4m3 and one E8M0 per 32
constexpr double kChunkK = 128;                          // K splits and stream-K cut at 128 K

double ceil_div(double a, double b) { return std::ceil(a / b); }

// The fraction of an SM's bf16 rate a CTA's main loop reaches. Folded tiles widen each weight
// fragment once per `tokens` tokens, so the widening's share falls as the tile widens (measured:
// ~90% of the peak at 128 x 256, ~81% at 64 x 128 with one consumer warpgroup); a CTA with one
// consumer warpgroup widens and waits for its wgmma in turn, whatever else shares its SM.
// Promoted engines pay a per-weight cost apart (promoted_weights_per_warp_s) and run their MMAs
// at a fraction of the rate.
double tensor_efficiency(const WorkShape& w, const DeviceRates& r) {
  switch (w.engine) {
    case WorkShape::Engine::kWgmmaFolded:
      if (r.measured_shares && w.measured_share > 0) return w.measured_share;
      return w.tokens / (w.tokens + r.folded_tokens_offset) *
             (w.consumer_groups >= 2 ? 1.0 : r.single_group_share);
    case WorkShape::Engine::kWgmmaPromoted:
      return r.wgmma_promoted_share;
    case WorkShape::Engine::kMmaPromoted:
    case WorkShape::Engine::kMmaChained:
      return r.mma_promoted_share;
  }
  return r.mma_promoted_share;
}

// Seconds of one CTA's tensor work (and quantization of its `m` tokens where it quantizes them)
// for a piece of `rows` x `tokens` x `k`.
double tensor_seconds(const WorkShape& w, double k, double m, const DeviceRates& r) {
  // A chained warp issues only its own chain's MMAs: the CTA's chains run side by side.
  const double chains =
      w.engine == WorkShape::Engine::kMmaChained ? std::max(1, w.consumer_warps) : 1;
  const double flops = 2.0 * w.rows * w.tokens * k / chains;
  double s = flops / (r.bf16_flops_per_sm_s * tensor_efficiency(w, r));
  if (w.engine != WorkShape::Engine::kWgmmaFolded) {
    const double rate = w.engine != WorkShape::Engine::kMmaChained ? r.promoted_weights_per_warp_s
                        : w.unscaled_chain ? r.unscaled_chained_weights_per_warp_s
                                           : r.chained_weights_per_warp_s;
    s += w.rows * k / (rate * std::max(1, w.consumer_warps));
  }
  if (w.quantizes_tokens) s += std::min<double>(m, w.tokens) * k / r.quantized_per_cta_s;
  // A part change stops the tile's main loop while the wgmma pipeline drains and the part joins
  // the running sum: both grow with the tile.
  return s + (w.k_parts - 1) * r.part_change_s * (w.rows * w.tokens) / (128.0 * 128.0);
}

// Bytes one CTA streams for a piece of `rows` x `tokens` x `k`: its weights and its tokens (no
// more than the call's `m`: rows past M are not read).
double cta_bytes(const WorkShape& w, double k, double m) {
  return w.rows * k * kScaleBytesPerWeight +
         std::min<double>(w.tokens, m) * k * w.activation_bytes_per_element;
}

double pass_seconds(ActivationPass pass, const LinearShape& s, const DeviceRates& r) {
  const double elements = static_cast<double>(s.m) * static_cast<double>(s.k);
  switch (pass) {
    case ActivationPass::kNone:
      return 0;
    case ActivationPass::kQuantize:  // bf16 in; e4m3 and scales out
      return r.launch_s + elements * (2 + kScaleBytesPerWeight) / r.read_bytes_per_s;
    case ActivationPass::kDequantize:  // bf16 in, bf16 out
      return r.launch_s + elements * 4 / r.read_bytes_per_s;
  }
  return 0;
}

}  // namespace

DeviceRates DeviceRates::of(const DeviceDescription& device) {
  DeviceRates r;
  if (device.sms > 0) {
    // The H200's per-SM rates; its DRAM bandwidth scaled with the SM count (a part with fewer
    // SMs has no more bandwidth per SM).
    r.read_bytes_per_s *= std::min(1.0, device.sms / 132.0);
    r.sms = device.sms;
  }
  return r;
}

double cluster_fill(int size) {
  switch (size) {
    case 1:
    case 2:
      return 1.0;
    case 3:
    case 6:
      return 108.0 / 132;
    case 4:
    case 8:
      return 128.0 / 132;
    default:
      return 120.0 / 132;  // 5 and 7: 3 or 4 SMs of a GPC of 16 or 18 idle
  }
}

bool meets_splits_in_memory(const WorkShape& w, std::int64_t tiles, int sms) {
  if (!w.splits_can_meet_in_memory || w.splits < 2 || tiles * w.splits > sms) return false;
  const auto clusters_that_fit =
      static_cast<std::int64_t>(std::floor(sms * cluster_fill(w.splits) / w.splits));
  return w.ctas_per_sm >= 2 || tiles > clusters_that_fit;
}

double estimated_seconds(const WorkShape& w, ActivationPass pass, const LinearShape& shape,
                         const DeviceRates& r) {
  const double m = static_cast<double>(shape.m), n = static_cast<double>(shape.n),
               k = static_cast<double>(shape.k);
  const double chunks = ceil_div(k, kChunkK);
  const double tiles = ceil_div(n, w.rows) * ceil_div(m, w.tokens);
  const double dram =
      (n * k * kScaleBytesPerWeight + m * k * w.activation_bytes_per_element + m * n * 2) /
      r.read_bytes_per_s;
  const double sms = r.sms;
  double streamed = 0;  // bytes all CTAs stream (from L2 where they repeat)
  double busiest = 0;  // the busiest SM's seconds of tensor work or of streaming, whichever is more
  double fill_drain = 0;
  switch (w.walk) {
    case WorkShape::Walk::kTiles: {
      const double splits = std::min<double>(w.splits, chunks);
      const double k_cta = std::min(k, ceil_div(chunks, splits) * kChunkK);
      const double ctas = tiles * splits;
      const bool in_memory =
          splits > 1 && meets_splits_in_memory(w, static_cast<std::int64_t>(tiles), r.sms);
      const double slots = sms * (in_memory ? 1.0 : cluster_fill(w.splits));
      const double per_sm = ceil_div(ctas, slots);
      // Folded CTAs on one SM take turns on its tensor pipe; promoted ones overlap their
      // latency-bound widening; chained ones run side by side in waves of the CTAs it holds.
      const double side_by_side = w.engine == WorkShape::Engine::kWgmmaFolded ? 1.0
                                  : w.engine == WorkShape::Engine::kMmaChained
                                      ? per_sm / ceil_div(per_sm, w.ctas_per_sm)
                                      : std::min<double>(w.ctas_per_sm, per_sm);
      busiest = std::max(per_sm * tensor_seconds(w, k_cta, m, r) / side_by_side,
                         per_sm * cta_bytes(w, k_cta, m) / r.sm_bytes_per_s);
      if (w.engine == WorkShape::Engine::kMmaChained) {
        busiest = std::max(busiest, per_sm * w.rows * k_cta / r.chained_weights_per_sm_s) +
                  per_sm * r.chained_cta_s;
      }
      streamed = ctas * cta_bytes(w, k_cta, m);
      const double waves = ceil_div(ctas, slots * w.ctas_per_sm);
      fill_drain = waves * r.tile_latency_s;
      if (in_memory) {
        // Every CTA writes its tile; the last of a tile's splits reads the others back.
        const double tile_bytes = w.rows * w.tokens * 4.0;
        fill_drain += waves * (r.memory_meeting_s + tile_bytes * splits / r.sm_bytes_per_s);
      } else if (splits > 1) {
        const double share_bytes = w.rows * w.tokens * 4.0 * (splits - 1) / splits;
        fill_drain += waves * (r.cluster_meeting_s + share_bytes / r.meeting_bytes_per_s);
      }
      break;
    }
    case WorkShape::Walk::kPersistent: {
      const double per_sm = ceil_div(tiles, sms);
      busiest =
          per_sm * std::max(tensor_seconds(w, k, m, r), cta_bytes(w, k, m) / r.sm_bytes_per_s);
      streamed = tiles * cta_bytes(w, k, m);
      // The next tile's copies overlap this one's epilogue.
      fill_drain = r.tile_latency_s + per_sm * r.walk_tile_s;
      break;
    }
    case WorkShape::Walk::kStreamK: {
      const double units = tiles * chunks;
      const double per_sm = ceil_div(units, sms);
      busiest = per_sm * std::max(tensor_seconds(w, kChunkK, m, r),
                                  cta_bytes(w, kChunkK, m) / r.sm_bytes_per_s);
      streamed = units * cta_bytes(w, kChunkK, m);
      // A cut tile's partials meet through the workspace, after its owner's own run.
      fill_drain = 2 * r.tile_latency_s + ceil_div(tiles, sms) * r.walk_tile_s +
                   w.rows * w.tokens * 4.0 / r.meeting_bytes_per_s;
      break;
    }
  }
  return r.launch_s + std::max({busiest, dram, streamed / r.l2_bytes_per_s}) + fill_drain +
         pass_seconds(pass, shape, r);
}

}  // namespace mxlinear::detail
