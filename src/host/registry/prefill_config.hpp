// The prefill kernel's config: a compiled instance (tile and walk) and its K split. Its name
// spells each field (config_name.hpp has the vocabulary): "w128_t256_st4_bk64_overlap_split2",
// "w64_t32_st4_overlap_kparts".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "device/kernels/prefill/prefill_gemm.hpp"

namespace mxlinear::detail {

struct PrefillConfig {
  // How the CTAs cover the output: one CTA per tile; one CTA per SM walking the tiles; or the
  // same walk over (tile, 128-K chunk) units, cut tiles met in the workspace.
  enum class Walk : std::uint8_t { kTiles, kPersistent, kStreamK };

  int rows = 128;            // weight rows per CTA
  int tokens = 128;          // activation rows per CTA (wgmma N)
  int stages = 4;            // ring depth
  int bk = 128;              // K per stage
  bool overlap = false;      // one stage's wgmma kept in flight per warpgroup
  bool alternating = false;  // two warpgroups on the same rows taking alternate stages
  Walk walk = Walk::kTiles;
  bool k_parts = false;  // the batch-invariant K parts summed apart in one CTA (K unsplit)
  int splits = 1;        // K ranges per cluster of CTAs

  // The config of a compiled instance with K split `splits` ways.
  static PrefillConfig of(const device::PrefillInstanceInfo& instance, int splits);

  std::string name() const;
  static std::optional<PrefillConfig> parse(std::string_view name);
  bool operator==(const PrefillConfig&) const = default;

  // The name's tokens, in order: printed by config_name::Writer, parsed by config_name::Reader.
  template <class Config, class Tokens>
  static bool spell(Config& c, Tokens& t) {
    return t.number("w", c.rows) && t.number("t", c.tokens) && t.number("st", c.stages) &&
           t.number("bk", c.bk, 128) && t.flag("overlap", c.overlap) &&
           t.flag("alt", c.alternating) &&
           t.choice(c.walk, {{Walk::kPersistent, "persistent"}, {Walk::kStreamK, "streamk"}}) &&
           t.flag("kparts", c.k_parts) && t.number("split", c.splits, 1);
  }
};

}  // namespace mxlinear::detail
