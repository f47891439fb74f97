#include "host/registry/decode_config.hpp"

#include "host/registry/config_name.hpp"

namespace mxlinear::detail {

DecodeConfig DecodeConfig::of(const device::DecodeInstanceInfo& i, int splits) {
  return {.rows = 64,
          .tokens = i.tokens,
          .stages = i.stages,
          .alternating = i.consumer_groups > 1,
          .splits = splits};
}

std::string DecodeConfig::name() const { return config_name::print(*this); }

std::optional<DecodeConfig> DecodeConfig::parse(std::string_view name) {
  return config_name::parse<DecodeConfig>(name);
}

}  // namespace mxlinear::detail
