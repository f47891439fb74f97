// A kernel's configs by name, built once: linear() looks its config up by name on every eager
// call, which formatting every name again per lookup made cost more than it needs.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mxlinear::detail {

template <class Config>
class NamedConfigs {
 public:
  explicit NamedConfigs(std::vector<std::pair<std::string, Config>> named)
      : named_(std::move(named)) {}

  // The config of that name, or nullptr where the kernel has none.
  const Config* find(std::string_view name) const {
    for (const auto& [n, config] : named_) {
      if (n == name) return &config;
    }
    return nullptr;
  }

  // Every name, in the kernel's order.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(named_.size());
    for (const auto& entry : named_) out.push_back(entry.first);
    return out;
  }

 private:
  std::vector<std::pair<std::string, Config>> named_;
};

}  // namespace mxlinear::detail
