#include "bench_sweep.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "device_memory.hpp"
#include "host/registry/registry.hpp"
#include "mxlinear/linear.hpp"

namespace mxlinear::cli {

using nlohmann::json;

void add_sweep_figures(json& row, const SweepFilter& sweep, const FigureInputs& in, bool ok,
                       bool ok_w8a16, json& wrong_w8a16_configs) {
  const LayerWeights& w = in.weights;
  const FigureBuffers& b = in.buffers;
  const std::int64_t m = b.m, n = b.n, k = b.k;
  const ReferenceRows &ref = in.reference, &ref_w8a16 = in.reference_w8a16;
  const QuantizedActivation xa = b.quantized();
  const TensorView &xv = b.xv, &ov = b.ov;
  const MedianOf& median = in.median;
  cudaStream_t stream = in.stream;
  // Named, and not batch-invariant, as the figure's own W8A16 call (whatever the environment says).
  const LinearOptions w8a16{ActivationMode::kW8A16, false};
  // Every config of every GPU kernel that can run this layer: the tuner's sweep, in each mode
  // whose dispatched kernel passed its check. A W8A8 config is timed GEMM only (on the
  // pre-quantized activation) and as the full linear from bf16 (linear_with: quantization
  // included, or skipped where the config quantizes x itself). A W8A16 config is timed as the
  // full linear only: its kernel multiplies the bf16 x itself, so there is no GEMM-only call
  // to time apart. The W8A16 kernels are registered apart from the W8A8 ones (prefill_a16,
  // generic_a16, ...), so their keys in configs_linear are distinct.
  json configs = json::object(), configs_error = json::object(), configs_wrong = json::object(),
       configs_linear = json::object(), configs_linear_wrong = json::object(),
       configs_waves = json::object(), configs_keep_k_order = json::array(),
       configs_estimated = json::object();
  const DeviceDescription device = DeviceDescription::current();
  LayerDescription layer;
  layer.n = n;
  layer.k = k;
  LayerDescription layer_w8a16 = layer;
  layer_w8a16.operand = ActivationOperand::kBf16;
  // Beside a timed full linear of `of`'s mode: with --batch-invariant, whether it keeps K's
  // order (the mode takes only those: what its choice is measured against), and the cost
  // model's estimate of it (what a change of the model is checked against; both read by
  // scripts/sweep_summary.py).
  const auto note_timed_linear = [&](const Kernel& kernel, const std::string& config,
                                     const LayerDescription& of, const std::string& key) {
    if (sweep.batch_invariant && kernel.keeps_k_order(config, k)) {
      configs_keep_k_order.push_back(key);
    }
    if (const auto us = estimated_call_us(kernel, config, of, m, device)) {
      configs_estimated[key] = *us;
    }
  };
  // The GPU kernels a mode whose dispatched call passed (`mode_ok`) sweeps for `of`.
  const auto swept = [&](const Kernel& kernel, const LayerDescription& of, bool mode_ok) {
    return mode_ok && kernel.is_supported(device).ok() && kernel.can_implement(of).ok() &&
           kernel.name() != "reference";
  };
  // A config's first run on a poisoned output, its error against `reference`; nullopt where the
  // config cannot take this shape (e.g. more K splits than chunks: it throws before launching).
  const auto first_run_error = [&](const std::function<void(int)>& run,
                                   const ReferenceRows& reference) -> std::optional<double> {
    std::optional<double> error;
    if (refusal_of([&] {
          error = checked_first_run(
              b, [&] { run(0); }, reference, stream);
        })) {
      return std::nullopt;
    }
    return error;
  };
  for (const auto& kernel : Registry::global().kernels()) {
    if (!swept(*kernel, layer, ok)) continue;
    for (const std::string& config : kernel->configs()) {
      if (!sweep.takes(*kernel, config, m, k)) continue;
      const auto call = [&](int i) {
        kernel->run(
            KernelCall{xa, w.view(i), std::nullopt, ov, LinearShape{m, n, k}, stream, b.work()},
            config);
      };
      const std::optional<double> error = first_run_error(call, ref);
      if (!error) continue;
      const double config_err = *error;
      const std::string key = fmt::format("{}/{}", kernel->name(), config);
      if (!(config_err <= in.tolerance)) {
        configs_wrong[key] = config_err;  // never timed, never a tuned row
        continue;
      }
      configs_error[key] = config_err;
      configs[key] = median(call).median;
      // How many waves its grid takes on this device, where the kernel says (a grid that
      // does not fit at once pays for it, e.g. split configs at K = 768).
      if (const auto f = kernel->launch_footprint({m, n, k}, config); f && f->resident_ctas > 0) {
        configs_waves[key] = (f->ctas + f->resident_ctas - 1) / f->resident_ctas;
      }
      const auto full_call = [&](int i) {
        linear_with(*kernel, config, xv, w.view(i), std::nullopt, ov, stream, b.work());
      };
      if (const double linear_err = checked_first_run(
              b, [&] { full_call(0); }, ref, stream);
          !(linear_err <= in.tolerance)) {
        configs_linear_wrong[key] = linear_err;
      } else {
        configs_linear[key] = median(full_call).median;
        note_timed_linear(*kernel, config, layer, key);
      }
    }
  }
  for (const auto& kernel : Registry::global().kernels()) {
    if (!swept(*kernel, layer_w8a16, ok_w8a16)) continue;
    for (const std::string& config : kernel->configs()) {
      if (!sweep.takes(*kernel, config, m, k)) continue;
      const auto full_call = [&](int i) {
        linear_with(*kernel, config, xv, w.view(i), std::nullopt, ov, stream, b.work(), w8a16);
      };
      const std::optional<double> error = first_run_error(full_call, ref_w8a16);
      if (!error) continue;
      const double config_err = *error;
      const std::string key = fmt::format("{}/{}", kernel->name(), config);
      if (!(config_err <= in.tolerance)) {
        configs_linear_wrong[key] = config_err;  // never timed, never a tuned row
        wrong_w8a16_configs[key] = config_err;
        continue;
      }
      // Its error beside the W8A8 configs' own: a tuned row carries the error of its config.
      configs_error[key] = config_err;
      configs_linear[key] = median(full_call).median;
      note_timed_linear(*kernel, config, layer_w8a16, key);
    }
  }
  if (ok) row["configs"] = configs;
  row["configs_check_rel_error"] = configs_error;
  row["configs_linear"] = configs_linear;
  if (!configs_wrong.empty()) row["configs_wrong"] = configs_wrong;
  if (!configs_linear_wrong.empty()) row["configs_linear_wrong"] = configs_linear_wrong;
  if (!configs_waves.empty()) row["configs_waves"] = configs_waves;
  if (!configs_keep_k_order.empty()) row["configs_keep_k_order"] = configs_keep_k_order;
  if (!configs_estimated.empty()) row["configs_estimated_us"] = configs_estimated;
}

}  // namespace mxlinear::cli
