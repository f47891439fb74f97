// The generic kernel's config: one compiled tile. Its name spells each field (config_name.hpp
// has the vocabulary): "w128_t128_warp32x64_st4".
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "device/kernels/generic/generic_gemm.hpp"

namespace mxlinear::detail {

struct GenericConfig {
  int rows = 128;        // weight rows per CTA
  int tokens = 128;      // activation rows per CTA
  int warp_rows = 32;    // weight rows of each warp's tile
  int warp_tokens = 64;  // tokens of each warp's tile
  int kwarps = 1;        // K ranges per warp tile, one warp each
  int stages = 4;        // ring depth

  // The config of a compiled instance.
  static GenericConfig of(const device::GenericConfigInfo& instance);

  std::string name() const;
  static std::optional<GenericConfig> parse(std::string_view name);
  bool operator==(const GenericConfig&) const = default;

  // The name's tokens, in order: printed by config_name::Writer, parsed by config_name::Reader.
  template <class Config, class Tokens>
  static bool spell(Config& c, Tokens& t) {
    return t.number("w", c.rows) && t.number("t", c.tokens) &&
           t.pair("warp", c.warp_rows, c.warp_tokens) && t.number("kwarps", c.kwarps, 1) &&
           t.number("st", c.stages);
  }
};

}  // namespace mxlinear::detail
