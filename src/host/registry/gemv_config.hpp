// The gemv kernel's config: a compiled instance (tile) and the point at which the next kernel
// may start launching. Its name spells each field (config_name.hpp has the vocabulary):
// "w16_t8_kwarps8_st4_split2_waited", "w8_t8_kwarps4_st6_kparts", "w32_t8_st6_kparts" (one K
// warp per row tile: no kwarps token).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "device/common/gemm_params.hpp"
#include "device/kernels/gemv/gemv_gemm.hpp"

namespace mxlinear::detail {

struct GemvConfig {
  int rows = 16;         // weight rows per CTA: 16 per row tile (8 for 8-row k-parts tiles)
  int tokens = 8;        // activation rows per CTA
  int kwarps = 4;        // K ranges per row tile, one warp each
  int stages = 0;        // slots of each warp's shared-memory weight ring; 0: through registers
  int splits = 1;        // K ranges per cluster of CTAs
  bool k_parts = false;  // the batch-invariant mode's K parts and order
  device::NextLaunch next_launch = device::NextLaunch::kAfterActivation;

  // The config of a compiled instance with the next kernel launching at `next`.
  static GemvConfig of(const device::GemvInstanceInfo& instance,
                       device::NextLaunch next = device::NextLaunch::kAfterActivation);

  std::string name() const;
  static std::optional<GemvConfig> parse(std::string_view name);
  bool operator==(const GemvConfig&) const = default;

  // The name's tokens, in order: printed by config_name::Writer, parsed by config_name::Reader.
  template <class Config, class Tokens>
  static bool spell(Config& c, Tokens& t) {
    return t.number("w", c.rows) && t.number("t", c.tokens) && t.number("kwarps", c.kwarps, 1) &&
           t.number("st", c.stages, 0) && t.flag("kparts", c.k_parts) &&
           t.number("split", c.splits, 1) &&
           t.choice(c.next_launch, {{device::NextLaunch::kAfterWait, "waited"},
                                    {device::NextLaunch::kAtEntry, "early"}});
  }
};

}  // namespace mxlinear::detail
