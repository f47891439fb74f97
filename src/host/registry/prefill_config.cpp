#include "host/registry/prefill_config.hpp"

#include "host/registry/config_name.hpp"

namespace mxlinear::detail {

PrefillConfig PrefillConfig::of(const device::PrefillInstanceInfo& i, int splits) {
  return {.rows = i.rows,
          .tokens = i.tokens,
          .stages = i.stages,
          .bk = i.bk,
          .overlap = i.overlap,
          .alternating = i.alternating,
          .walk = i.stream_k ? Walk::kStreamK : (i.persistent ? Walk::kPersistent : Walk::kTiles),
          .k_parts = i.k_parts,
          .splits = splits};
}

std::string PrefillConfig::name() const { return config_name::print(*this); }

std::optional<PrefillConfig> PrefillConfig::parse(std::string_view name) {
  return config_name::parse<PrefillConfig>(name);
}

}  // namespace mxlinear::detail
