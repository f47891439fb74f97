// Kernels for registry tests: a stand-in for a Hopper tuned kernel, and a recorder. They never
// touch a GPU.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "host/registry/registry.hpp"

namespace mxlinear::test {

class FakeKernel : public Kernel {
 public:
  FakeKernel(std::string name, bool tuned, std::vector<std::string> configs,
             std::string arch = "sm_90a", std::int64_t max_k = 1 << 20)
      : name_(std::move(name)),
        tuned_(tuned),
        configs_(std::move(configs)),
        arch_(std::move(arch)),
        max_k_(max_k) {}
  std::string_view name() const override { return name_; }
  std::vector<std::string> configs() const override { return configs_; }
  Verdict is_supported(const DeviceDescription& d) const override {
    if (d.arch != arch_) return {"needs " + arch_};
    return {};
  }
  Verdict can_implement(const LayerDescription& l) const override {
    if (l.k > max_k_) return {"K above " + std::to_string(max_k_)};
    return {};
  }
  bool needs_tuned_rows() const override { return tuned_; }
  std::string default_config(std::int64_t) const override { return configs_.front(); }
  void prepare_weights(const MxWeight&, const MxWeight&, cudaStream_t) const override {}
  bool prepared_weights_cacheable() const override { return true; }
  CallPlan plan(const Problem&, std::string_view) const override { return {}; }
  std::size_t max_scratch_bytes(std::int64_t, std::int64_t,
                                const DeviceDescription&) const override {
    return 0;
  }
  void run(const KernelCall&, const std::string&) const override {}
  // The cost model prices the configs given a work shape here; the others it never chooses.
  std::optional<detail::WorkShape> work_shape(const LinearShape&,
                                              std::string_view config) const override {
    const auto it = work_.find(std::string(config));
    if (it == work_.end()) return std::nullopt;
    return it->second;
  }
  void set_work(const std::string& config, const detail::WorkShape& w) { work_[config] = w; }

 private:
  std::map<std::string, detail::WorkShape> work_;
  std::string name_;
  bool tuned_;
  std::vector<std::string> configs_;
  std::string arch_;
  std::int64_t max_k_;
};

}  // namespace mxlinear::test
