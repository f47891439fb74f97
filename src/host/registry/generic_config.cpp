#include "host/registry/generic_config.hpp"

#include "host/registry/config_name.hpp"

namespace mxlinear::detail {

GenericConfig GenericConfig::of(const device::GenericConfigInfo& i) {
  return {.rows = i.bn,
          .tokens = i.bm,
          .warp_rows = i.wn,
          .warp_tokens = i.wm,
          .kwarps = i.warps_k,
          .stages = i.stages};
}

std::string GenericConfig::name() const { return config_name::print(*this); }

std::optional<GenericConfig> GenericConfig::parse(std::string_view name) {
  return config_name::parse<GenericConfig>(name);
}

}  // namespace mxlinear::detail
