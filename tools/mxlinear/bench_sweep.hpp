// `mxlinear bench --all-configs`: which configs a figure sweeps, and the sweep itself: every
// config of every GPU kernel that can run the layer, checked against the figure's fp64 reference
// rows and then timed, in each mode whose dispatched call passed its check.
#pragma once

#include <regex.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_layer.hpp"
#include "host/registry/kernel.hpp"

namespace mxlinear::cli {

// A POSIX extended regex, searched in a string. POSIX <regex.h> rather than std::regex: GCC 12
// reports -Wmaybe-uninitialized inside <regex>'s templates at -O2 with the sanitizers, which
// -Werror turns into a failed build, and a config filter needs no more than ERE.
class ConfigPattern {
 public:
  // Compiles `pattern`; on a syntax error, error() says what is wrong.
  explicit ConfigPattern(const std::string& pattern) {
    const int rc = regcomp(&regex_, pattern.c_str(), REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
      char message[256];
      regerror(rc, &regex_, message, sizeof message);
      error_ = message;
    }
  }
  ConfigPattern(const ConfigPattern&) = delete;
  ConfigPattern& operator=(const ConfigPattern&) = delete;
  ~ConfigPattern() {
    if (error_.empty()) regfree(&regex_);
  }
  const std::string& error() const { return error_; }
  bool found_in(const std::string& text) const {
    return regexec(&regex_, text.c_str(), 0, nullptr, 0) == 0;
  }

 private:
  regex_t regex_{};
  std::string error_;
};

// Which configs --all-configs times: kernels by name, configs by a regex searched in the name,
// of those the tuner sweeps at M and, with --batch-invariant, those the mode can select at K.
struct SweepFilter {
  bool all_configs = false;
  std::vector<std::string> kernels;  // empty: every GPU kernel
  std::unique_ptr<ConfigPattern> configs;
  bool batch_invariant = false;

  bool takes(const Kernel& kernel, const std::string& config, std::int64_t m,
             std::int64_t k) const {
    return (kernels.empty() ||
            std::find(kernels.begin(), kernels.end(), kernel.name()) != kernels.end()) &&
           (!configs || configs->found_in(config)) &&
           (kernel.worth_sweeping(m, config) ||
            (batch_invariant && kernel.keeps_k_order(config, k)));
  }
};

// Adds to `row` the configs that `sweep` takes, in each mode whose dispatched call passed its
// check (w8a8_ok, w8a16_ok; a mode that did not is not swept): configs (W8A8 GEMM only) and
// configs_linear (the full linear, W8A8 and W8A16 keys apart), configs_check_rel_error,
// configs_wrong and configs_linear_wrong (never timed), configs_waves, configs_keep_k_order (with
// --batch-invariant) and configs_estimated_us (the cost model's estimate). A W8A16 config that
// fails its check is added to `wrong_w8a16_configs` too: it has no GEMM-only check that would
// land it in configs_wrong.
void add_sweep_figures(nlohmann::json& row, const SweepFilter& sweep, const FigureInputs& in,
                       bool w8a8_ok, bool w8a16_ok, nlohmann::json& wrong_w8a16_configs);

}  // namespace mxlinear::cli
