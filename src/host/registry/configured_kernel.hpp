// What the registry entries of the sm_90a kernels share: their compiled configs, looked up by
// name through the config's parse(), and the checks run() makes before a launch, with the same
// errors in every kernel.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "device/common/sm90.hpp"
#include "host/registry/kernel.hpp"

namespace mxlinear::detail {

// The output tiles of `rows` weight rows by `tokens` activation rows that cover an M x N call.
constexpr std::int64_t output_tiles(const LinearShape& shape, std::int64_t rows,
                                    std::int64_t tokens) {
  return (shape.n + rows - 1) / rows * ((shape.m + tokens - 1) / tokens);
}

// A config and the index of the compiled instance that runs it; instance < 0: the kernel has no
// such config.
template <class Config>
struct Resolved : Config {
  int instance = -1;
};

// The configs a kernel compiled, in the kernel's order. Built once: a lookup parses the name
// and compares fields, and never formats a name.
template <class Config>
class ConfigTable {
 public:
  // Every instance with each of `split_counts` that `fits(instance index, splits)`, instance by
  // instance: Config::of(instance, splits).
  template <class Instance, class Fits>
  static ConfigTable with_splits(std::span<const Instance> instances,
                                 std::span<const int> split_counts, Fits fits) {
    ConfigTable table;
    for (std::size_t i = 0; i < instances.size(); ++i) {
      for (const int splits : split_counts) {
        if (fits(static_cast<int>(i), splits)) {
          table.add(Config::of(instances[i], splits), static_cast<int>(i));
        }
      }
    }
    return table;
  }

  // One config per instance: Config::of(instance).
  template <class Instance>
  static ConfigTable of_each(std::span<const Instance> instances) {
    ConfigTable table;
    for (std::size_t i = 0; i < instances.size(); ++i) {
      table.add(Config::of(instances[i]), static_cast<int>(i));
    }
    return table;
  }

  void add(const Config& config, int instance) {
    compiled_.push_back({config, instance});
    names_.push_back(config.name());
  }

  // The compiled config `name` names (instance < 0 where none does). A name is compared with the
  // compiled names rather than parsed: Config::parse accepts only the text name() prints, so the
  // two agree, and a lookup on every call stays a string comparison per config.
  Resolved<Config> find(std::string_view name) const {
    for (std::size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] == name) return compiled_[i];
    }
    return {};
  }

  const std::vector<std::string>& names() const { return names_; }

 private:
  std::vector<Resolved<Config>> compiled_;
  std::vector<std::string> names_;
};

// "needs 16-byte aligned e4m3 rows" unless the layer has them (the alignment of every sm_90a
// kernel's 16-byte loads and TMA boxes).
Verdict needs_16_byte_rows(const LayerDescription& layer);
// "needs K % 32 == 0" unless it is (whole MX blocks).
Verdict needs_whole_blocks(const LayerDescription& layer);
// Both: what a kernel reading its operands by TMA boxes of whole MX blocks needs.
Verdict needs_whole_blocks_in_16_byte_rows(const LayerDescription& layer);

// Whether a kernel multiplying `operands` (kMx: W8A8; or W8A16's kBf16 and/or kF16) implements
// the layer's operand: "serves ...; the call is ..." otherwise.
Verdict needs_operand(const LayerDescription& layer,
                      std::initializer_list<ActivationOperand> operands);
// "needs 16-byte aligned rows of x" unless W8A16's x has them (a kernel reading x directly).
Verdict needs_16_byte_x_rows(const LayerDescription& layer);

// A GPU kernel for sm_90a: it reads the weight in the checkpoint layout, and its run() checks a
// call with the same errors as the others'.
class Sm90Kernel : public Kernel {
 public:
  std::string_view name() const final { return name_; }
  ActivationMode activation_mode() const final { return mode_; }
  Verdict is_supported(const DeviceDescription& device) const final;
  void prepare_weights(const MxWeight& in, const MxWeight& out, cudaStream_t stream) const final;
  bool prepared_weights_cacheable() const final { return true; }

 protected:
  Sm90Kernel(std::string_view name, ActivationMode mode) : name_(name), mode_(mode) {}

  // A W8A16 kernel: it multiplies the caller's 16-bit x as it is.
  bool as_is() const { return mode_ == ActivationMode::kW8A16; }
  // For a kernel taking both 16-bit dtypes in W8A16: whether it implements the layer's operand
  // (needs_operand of the MX activation, or of bf16 and fp16 x).
  Verdict needs_mode_operand(const LayerDescription& layer) const;
  // For a kernel that reads the activation itself (the MX one, quantizing it or not, or W8A16's
  // x as it is): the call's activation form is its mode's (kInternal otherwise).
  void require_mode_activation(const KernelCall& call) const;

  // can_run's verdicts: on a name that is none of configs(); on K split `splits` ways (each
  // split needs a 128-K chunk); on a CTA needing `smem` bytes of shared memory at `where`.
  Verdict not_a_config(std::string_view config) const;
  static Verdict splits_fit(std::string_view config, int splits, std::int64_t k);
  template <class... Args>
  static Verdict smem_fits(std::string_view config, int smem, fmt::format_string<Args...> where,
                           Args&&... args) {
    if (smem <= device::kSm90MaxSmemPerCta) return {};
    return smem_exceeded(config, smem, fmt::format(where, std::forward<Args>(args)...));
  }
  // run()'s checks; each throws mxlinear::Error where the call fails it.
  // The config is one of configs() (kInvalidArgument otherwise, listing them).
  void require_known(bool known, std::string_view config) const;
  // The config can run the call (kUnsupported with the verdict's reason otherwise).
  void require(const Verdict& verdict) const;
  // The call's M fits the grid's 65535 tiles of `tokens` rows.
  void require_token_tiles(const LinearShape& shape, std::int64_t tokens,
                           std::string_view config) const;
  // `why_not` is empty: the device code takes the layer's pointers and strides.
  void require_layer(std::string_view why_not, const LinearShape& shape) const;
  // The launch of `config` succeeded.
  void require_launched(cudaError_t status, std::string_view config) const;

 private:
  static Verdict smem_exceeded(std::string_view config, int smem, std::string_view where);

  std::string_view name_;
  ActivationMode mode_;
};

// An Sm90Kernel whose configs are the rows of a ConfigTable.
template <class Config>
class ConfiguredKernel : public Sm90Kernel {
 public:
  std::vector<std::string> configs() const final { return table_.names(); }

 protected:
  ConfiguredKernel(std::string_view name, const ConfigTable<Config>& table,
                   ActivationMode mode = ActivationMode::kW8A8)
      : Sm90Kernel(name, mode), table_(table) {}

  // The compiled config `config` names (instance < 0 where none does).
  Resolved<Config> find(std::string_view config) const { return table_.find(config); }
  // The same, or throws kInvalidArgument listing the kernel's configs.
  Resolved<Config> known(std::string_view config) const {
    const Resolved<Config> c = find(config);
    require_known(c.instance >= 0, config);
    return c;
  }

 private:
  const ConfigTable<Config>& table_;
};

}  // namespace mxlinear::detail
