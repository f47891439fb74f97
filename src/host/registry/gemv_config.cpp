#include "host/registry/gemv_config.hpp"

#include "host/registry/config_name.hpp"

namespace mxlinear::detail {

GemvConfig GemvConfig::of(const device::GemvInstanceInfo& i, device::NextLaunch next) {
  return {.rows = i.rows,
          .tokens = i.tokens,
          .kwarps = i.warps,
          .stages = i.stages,
          .splits = i.splits,
          .k_parts = i.k_parts,
          .next_launch = next};
}

std::string GemvConfig::name() const { return config_name::print(*this); }

std::optional<GemvConfig> GemvConfig::parse(std::string_view name) {
  return config_name::parse<GemvConfig>(name);
}

}  // namespace mxlinear::detail
