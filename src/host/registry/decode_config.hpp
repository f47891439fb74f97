// The decode kernel's config: a compiled instance (tile) and its K split. Its name spells each
// field (config_name.hpp has the vocabulary): "w64_t8_st8_alt_split4".
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "device/kernels/decode/decode_gemm.hpp"

namespace mxlinear::detail {

struct DecodeConfig {
  int rows = 64;             // weight rows per CTA (wgmma M)
  int tokens = 8;            // activation rows per CTA (wgmma N)
  int stages = 4;            // ring depth
  bool alternating = false;  // two consumer warpgroups taking alternate stages
  int splits = 1;            // K ranges per cluster of CTAs

  // The config of a compiled instance with K split `splits` ways.
  static DecodeConfig of(const device::DecodeInstanceInfo& instance, int splits);

  std::string name() const;
  static std::optional<DecodeConfig> parse(std::string_view name);
  bool operator==(const DecodeConfig&) const = default;

  // The name's tokens, in order: printed by config_name::Writer, parsed by config_name::Reader.
  template <class Config, class Tokens>
  static bool spell(Config& c, Tokens& t) {
    return t.number("w", c.rows) && t.number("t", c.tokens) && t.number("st", c.stages) &&
           t.flag("alt", c.alternating) && t.number("split", c.splits, 1);
  }
};

}  // namespace mxlinear::detail
