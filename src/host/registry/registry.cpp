#include "host/registry/registry.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include "host/log.hpp"
#include "host/registry/shipped_tables.hpp"
#include "host/validate.hpp"
#include "mxlinear/version.hpp"

namespace mxlinear {
namespace {

// Whether the forced backend (MXLINEAR_BACKEND) is the kernel that claims the layer: only then
// does it narrow the layer's calls to itself. Where it cannot run the layer, selection fell back
// to the automatic order, and the calls take every kernel that order allows.
bool forced_on(const Environment& env, const LayerSelection& selection) {
  return env.backend != "auto" && selection.kernel != nullptr &&
         selection.kernel->name() == env.backend;
}

// The mode of a layer's calls: W8A8 for the MX operand, W8A16 for a 16-bit one.
ActivationMode mode_of(const LayerDescription& layer) {
  return layer.operand == ActivationOperand::kMx ? ActivationMode::kW8A8 : ActivationMode::kW8A16;
}

// Whether any config of `kernel` keeps a fixed order for this K: a kernel the batch-invariant mode
// can run.
bool keeps_any_k_order(const Kernel& kernel, std::int64_t k) {
  for (const std::string& c : kernel.configs()) {
    if (kernel.keeps_k_order(c, k)) return true;
  }
  return false;
}

bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string names_of(const std::vector<std::shared_ptr<const Kernel>>& kernels) {
  std::vector<std::string> names;
  for (const auto& k : kernels) names.emplace_back(k->name());
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

struct Registry::ModelCache {
  using Key = std::tuple<std::string, int, std::int64_t, std::int64_t, int, int, int, int, int, int,
                         bool, const Kernel*, std::int64_t>;
  // Calls of many distinct M (every batch size a server sees) stay far below this; past it the
  // choices are dropped and made again.
  static constexpr std::size_t kMaxChoices = 1 << 16;
  std::mutex mutex;
  std::map<Key, std::optional<Dispatch>> choices;
};

TableContext table_context(const std::vector<std::shared_ptr<const Kernel>>& kernels) {
  TableContext context;
  for (const auto& k : kernels) {
    context.kernel_configs[std::string(k->name())] = k->configs();
    if (k->activation_mode() == ActivationMode::kW8A16) context.w8a16_kernels.emplace(k->name());
  }
  context.library_version = fmt::format("{}.{}", MXLINEAR_VERSION_MAJOR, MXLINEAR_VERSION_MINOR);
  context.cuda_version = fmt::format("{}.{}", CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
  return context;
}

Registry::Registry(std::vector<std::shared_ptr<const Kernel>> kernels, TunedTable table,
                   Environment environment)
    : kernels_(std::move(kernels)),
      table_(std::move(table)),
      env_(std::move(environment)),
      model_cache_(std::make_shared<ModelCache>()) {
  for (const auto& k : kernels_) {
    const std::vector<std::string> names = k->configs();
    configs_[k.get()] = std::set<std::string, std::less<>>(names.begin(), names.end());
  }
  warnings_ = table_.warnings();
  for (const std::string& name : env_.disabled) {
    if (!find(name)) {
      warnings_.push_back(fmt::format(
          "MXLINEAR_DISABLED_KERNELS names '{}', which is not a kernel; valid names: {}",
          detail::for_display(name), names_of(kernels_)));
    }
  }
  if (env_.backend != "auto" && !find(env_.backend)) {
    warnings_.push_back(fmt::format(
        "MXLINEAR_BACKEND is '{}', which is not a kernel; using automatic selection. Valid: "
        "auto, {}",
        detail::for_display(env_.backend), names_of(kernels_)));
    env_.backend = "auto";
  }
  if (env_.log != "warn" && env_.log != "info" && env_.log != "debug") {
    warnings_.push_back(fmt::format("MXLINEAR_LOG is '{}'; expected warn, info or debug",
                                    detail::for_display(env_.log)));
  }
  if (!env_.cost_model_invalid.empty()) {
    warnings_.push_back(fmt::format("MXLINEAR_COST_MODEL is '{}'; expected 1 or 0; using 1",
                                    detail::for_display(env_.cost_model_invalid)));
  }
  if (!env_.activation_invalid.empty()) {
    warnings_.push_back(fmt::format("MXLINEAR_ACTIVATION is '{}'; expected mx or bf16; using mx",
                                    detail::for_display(env_.activation_invalid)));
  }
  if (!env_.batch_invariant_invalid.empty()) {
    warnings_.push_back(fmt::format("MXLINEAR_BATCH_INVARIANT is '{}'; expected 1 or 0; using 0",
                                    detail::for_display(env_.batch_invariant_invalid)));
  }
}

const Registry& Registry::global() {
  static const Registry registry = [] {
    auto kernels = builtin_kernels();
    const TableContext context = table_context(kernels);
    const Environment env = Environment::from_process();
    TunedTable table;
    for (const auto& [name, text] : detail::shipped_tables()) {
      table.add(std::string(text), fmt::format("configs/{}", name), context);
    }
    for (const std::string& path : env.tuned_tables) table.add_file(path, context);
    Registry r(std::move(kernels), std::move(table), env);
    for (const std::string& w : r.warnings()) detail::log(detail::LogLevel::kWarn, w);
    return r;
  }();
  return registry;
}

const Kernel* Registry::find(std::string_view name) const {
  for (const auto& k : kernels_) {
    if (k->name() == name) return k.get();
  }
  return nullptr;
}

LayerSelection Registry::select(const LayerDescription& layer,
                                const DeviceDescription& device) const {
  LayerSelection s;
  s.layer = layer;
  std::vector<const Kernel*> order;
  if (const Kernel* forced = env_.backend == "auto" ? nullptr : find(env_.backend)) {
    order.push_back(forced);
  }
  for (const auto& k : kernels_) {
    if (std::find(order.begin(), order.end(), k.get()) == order.end()) order.push_back(k.get());
  }
  for (const Kernel* k : order) {
    // The other mode's kernels are not candidates (the CPU reference serves both); a forced one
    // says why it is passed over.
    if (!is_cpu_reference(*k) && k->activation_mode() != mode_of(layer)) {
      if (k->name() == env_.backend) {
        s.rejected.push_back(
            {std::string(k->name()), fmt::format("runs the other activation mode; this layer is {}",
                                                 describe(layer.operand))});
      }
      continue;
    }
    std::string reason;
    if (contains(env_.disabled, k->name())) {
      reason = "disabled by MXLINEAR_DISABLED_KERNELS";
    } else if (Verdict v = k->is_supported(device); !v.ok()) {
      reason = v.reason;
    } else if (Verdict c = k->can_implement(layer); !c.ok()) {
      reason = c.reason;
    } else if (layer.batch_invariant && !keeps_any_k_order(*k, layer.k)) {
      reason = "no config keeps a fixed K order (batch-invariant mode)";
    } else if (layer.batch_invariant && k->k_order_family() != k->name()) {
      reason = fmt::format("its configs that keep the K order join {}'s (batch-invariant mode)",
                           k->k_order_family());
    } else if (!layer.batch_invariant &&  // the mode prices the configs, tuned rows or not
               k->needs_tuned_rows() &&
               !table_.has_shape(device.arch, device.sms, layer.n, layer.k, k->name())) {
      reason = fmt::format("no tuned rows of {} for {} x {} on {} with {} SMs", k->name(), layer.n,
                           layer.k, device.arch, device.sms);
    }
    if (reason.empty()) {
      s.kernel = k;
      break;
    }
    s.rejected.push_back({std::string(k->name()), reason});
  }
  if (env_.backend != "auto" && (!s.kernel || s.kernel->name() != env_.backend)) {
    const std::string why = s.rejected.empty() ? "" : s.rejected.front().reason;
    s.warnings.push_back(fmt::format(
        "MXLINEAR_BACKEND={} cannot run layer {} x {} ({}); using automatic selection: {}",
        env_.backend, layer.n, layer.k, why, s.kernel ? s.kernel->name() : "none"));
  }
  return s;
}

Dispatch Registry::dispatch(const LayerSelection& selection, const DeviceDescription& device,
                            std::int64_t m) const {
  Dispatch d;
  d.kernel = selection.kernel;
  if (!d.kernel) return d;
  if (selection.layer.batch_invariant) return invariant_dispatch(selection, device, m);
  const bool forced = forced_on(env_, selection);
  const LayerDescription& layer = selection.layer;
  const bool w8a16 = mode_of(layer) == ActivationMode::kW8A16;
  // A row may hand this M to another kernel (a tuned row for the generic kernel where it is
  // faster), but never to one that is disabled, unsupported or unable, nor to a config that
  // cannot run this K and M, and never against a forced backend.
  const auto take_row = [&](const std::optional<TunedValue>& row, bool borrowed) {
    if (!row) return false;
    const Kernel* k = find(row->kernel);
    if (!k || contains(env_.disabled, k->name()) || (forced && k != selection.kernel) ||
        !runnable(*k, row->config, layer, m, device).ok() ||
        (borrowed && !k->worth_sweeping(m, row->config))) {
      return false;
    }
    d.kernel = k;
    d.config = row->config;
    d.why = fmt::format("tuned row {}{}", row->source, borrowed ? " (nearest bucket)" : "");
    return true;
  };
  if (take_row(table_.lookup(device.arch, device.sms, layer.n, layer.k, m, w8a16), false)) {
    return d;
  }
  // No usable row for this M: the cost model's choice (docs/TUNED_TABLES.md); with the model
  // off or no modelled config, the row of the nearest bucket, else the default config. Neither
  // may be a config its kernel does not serve at this M (the W8A16 GEMV claims fp16 layers by
  // its rows of up to 8 tokens, and nothing modelled runs fp16 x beyond them): the generic
  // kernel runs such calls.
  if (env_.cost_model) {
    if (std::optional<Dispatch> chosen = modelled(selection, device, m)) return *chosen;
  }
  if (take_row(table_.nearest(device.arch, device.sms, layer.n, layer.k, m, w8a16), true)) {
    return d;
  }
  d.config = d.kernel->default_config(m);
  d.why = "default config";
  if (!d.kernel->worth_sweeping(m, d.config)) {
    if (const Kernel* fallback = untuned_fallback(selection, device)) {
      d.why = fmt::format("{} does not serve M = {}; {}'s default config", d.kernel->name(), m,
                          fallback->name());
      d.kernel = fallback;
      d.config = fallback->default_config(m);
    }
  }
  return d;
}

Dispatch Registry::invariant_dispatch(const LayerSelection& selection,
                                      const DeviceDescription& device, std::int64_t m) const {
  // One order serves every M: the selected kernel's configs that keep it, and those of the
  // kernels of its family (Kernel::k_order_family); a tuned row only where it names such a
  // config.
  Dispatch d;
  d.kernel = selection.kernel;
  const LayerDescription& layer = selection.layer;
  const bool w8a16 = mode_of(layer) == ActivationMode::kW8A16;
  if (const std::optional<TunedValue> row =
          table_.lookup(device.arch, device.sms, layer.n, layer.k, m, w8a16)) {
    const Kernel* k = find(row->kernel);
    if (k && in_k_order_of(*k, *d.kernel) && !contains(env_.disabled, k->name()) &&
        runnable(*k, row->config, layer, m, device).ok()) {
      d.kernel = k;
      d.config = row->config;
      d.why = fmt::format("batch-invariant, tuned row {}", row->source);
      return d;
    }
  }
  if (env_.cost_model) {
    if (std::optional<Dispatch> chosen = modelled(selection, device, m)) {
      chosen->why = "batch-invariant, " + chosen->why;
      return *chosen;
    }
  }
  const std::string preferred = d.kernel->default_config(m);
  std::vector<std::string> order{preferred};
  for (const std::string& c : d.kernel->configs()) order.push_back(c);
  for (const std::string& c : order) {
    if (runnable(*d.kernel, c, layer, m, device).ok()) {
      d.config = c;
      d.why = c == preferred ? "batch-invariant, default config"
                             : "batch-invariant, the first config that keeps the K order";
      return d;
    }
  }
  // No config of the kernel runs M: the call's run() refuses it with the config's reason.
  d.config = preferred;
  d.why = "batch-invariant, default config";
  return d;
}

const Kernel* Registry::untuned_fallback(const LayerSelection& selection,
                                         const DeviceDescription& device) const {
  const bool forced = forced_on(env_, selection);
  for (const auto& k : kernels_) {
    if (k->needs_tuned_rows() || is_cpu_reference(*k) ||
        k->activation_mode() != mode_of(selection.layer) ||
        (forced && k.get() != selection.kernel) || contains(env_.disabled, k->name()) ||
        !k->is_supported(device).ok() || !k->can_implement(selection.layer).ok()) {
      continue;
    }
    return k.get();
  }
  return nullptr;
}

std::optional<Dispatch> Registry::modelled(const LayerSelection& selection,
                                           const DeviceDescription& device, std::int64_t m) const {
  const LayerDescription& layer = selection.layer;
  if (m < 1 || layer.n < 1 || layer.k < 1) return std::nullopt;
  const ModelCache::Key key{device.arch,
                            device.sms,
                            layer.n,
                            layer.k,
                            static_cast<int>(layer.out_dtype),
                            layer.bias_dtype ? static_cast<int>(*layer.bias_dtype) : -1,
                            layer.alignment,
                            layer.scale_alignment,
                            static_cast<int>(layer.operand),
                            layer.x_alignment,
                            layer.batch_invariant,
                            selection.kernel,
                            m};
  {
    const std::lock_guard<std::mutex> lock(model_cache_->mutex);
    if (const auto it = model_cache_->choices.find(key); it != model_cache_->choices.end()) {
      return it->second;
    }
  }
  const bool forced = forced_on(env_, selection);
  std::optional<Dispatch> best;
  for (const auto& kernel : kernels_) {
    // The batch-invariant mode prices the configs that keep the K order of the selected kernel
    // and its family, at every M (where they are not worth a sweep, they still give this M the
    // layer's order).
    if ((forced && kernel.get() != selection.kernel) || contains(env_.disabled, kernel->name()) ||
        (layer.batch_invariant && !in_k_order_of(*kernel, *selection.kernel)) ||
        !kernel->is_supported(device).ok() || !kernel->can_implement(layer).ok()) {
      continue;
    }
    for (const std::string& config : kernel->configs()) {
      if (layer.batch_invariant ? !kernel->keeps_k_order(config, layer.k)
                                : !kernel->worth_sweeping(m, config)) {
        continue;
      }
      const std::optional<double> us = estimated_call_us(*kernel, config, layer, m, device);
      if (us && (!best || *us < best->estimated_us)) {  // ties: the kernel and config listed first
        best = Dispatch{kernel.get(), config, "", *us};
      }
    }
  }
  if (best) best->why = fmt::format("cost model, {:.1f} us estimated", best->estimated_us);
  const std::lock_guard<std::mutex> lock(model_cache_->mutex);
  if (model_cache_->choices.size() >= ModelCache::kMaxChoices) model_cache_->choices.clear();
  model_cache_->choices.emplace(key, best);
  return best;
}

std::optional<double> estimated_call_us(const Kernel& kernel, const std::string& config,
                                        const LayerDescription& layer, std::int64_t m,
                                        const DeviceDescription& device) {
  if (m < 1 || layer.n < 1 || layer.k < 1 || !kernel.can_run(m, layer.k, config).ok()) {
    return std::nullopt;
  }
  const LinearShape shape{m, layer.n, layer.k};
  const std::optional<detail::WorkShape> work = kernel.work_shape(shape, config);
  if (!work) return std::nullopt;
  Problem problem;
  problem.shape = shape;
  problem.operand = layer.operand;
  problem.x_dtype = layer.operand == ActivationOperand::kF16 ? DType::kF16 : DType::kBF16;
  problem.x_self_quantizable = true;
  problem.out_dtype = layer.out_dtype;
  problem.sms = device.sms;
  const ActivationForm form = kernel.plan(problem, config).activation;
  const detail::ActivationPass pass =
      form == ActivationForm::kUnquantized || form == ActivationForm::kAsIs
          ? detail::ActivationPass::kNone
          : (form == ActivationForm::kDequantized ? detail::ActivationPass::kDequantize
                                                  : detail::ActivationPass::kQuantize);
  detail::DeviceRates rates = detail::DeviceRates::of(device);
  rates.measured_shares = layer.batch_invariant && m >= detail::kMeasuredSharesFromM;
  return detail::estimated_seconds(*work, pass, shape, rates) * 1e6;
}

CallVerdict Registry::runnable(const Kernel& kernel, std::string_view config,
                               const LayerDescription& layer, std::int64_t m,
                               const DeviceDescription& device) const {
  if (const Verdict v = kernel.can_implement(layer); !v.ok()) {
    return {fmt::format("is '{}', which cannot run this {} x {} layer: {}", kernel.name(), layer.n,
                        layer.k, v.reason),
            "kernel"};
  }
  const auto known = configs_.find(&kernel);
  const bool has_config = known != configs_.end() ? known->second.count(config) > 0 : [&] {
    const std::vector<std::string> names = kernel.configs();
    return std::find(names.begin(), names.end(), config) != names.end();
  }();
  if (!has_config) {
    return {fmt::format("is '{}'; expected one of {}'s: {}", detail::for_display(config),
                        kernel.name(), fmt::join(kernel.configs(), ", ")),
            "config", ErrorCode::kInvalidArgument};
  }
  if (const Verdict v = kernel.can_run(m, layer.k, config); !v.ok()) {
    return {fmt::format("is '{}/{}', which cannot run M = {}, K = {}: {}", kernel.name(), config, m,
                        layer.k, v.reason),
            "config"};
  }
  if (layer.batch_invariant && !kernel.keeps_k_order(config, layer.k)) {
    return {fmt::format("is '{}/{}', which does not keep a fixed K order (batch-invariant mode)",
                        kernel.name(), config),
            "config", ErrorCode::kInvalidArgument};
  }
  if (const Verdict v = kernel.is_supported(device); !v.ok()) {
    return {fmt::format("is '{}', which does not run on {}: {}", kernel.name(), device.to_string(),
                        v.reason),
            "kernel"};
  }
  return {};
}

Verdict Registry::check_device(const DeviceDescription& device, int ordinal) const {
  if (const Kernel* forced = find(env_.backend); forced && is_cpu_reference(*forced)) return {};
  for (const auto& k : kernels_) {
    if (!is_cpu_reference(*k) && k->is_supported(device).ok()) return {};
  }
  if (!device.is_gpu) {
    return {
        "is in device memory, but this machine has no CUDA device; mxlinear's GPU kernels "
        "need sm_90a (Hopper)"};
  }
  return {
      fmt::format("is on device {} ({}, {}); mxlinear's GPU kernels need sm_90a (Hopper); set "
                  "MXLINEAR_BACKEND=reference to run the CPU reference",
                  ordinal, device.name, device.arch)};
}

std::size_t Registry::max_scratch_bytes(std::int64_t rows, std::int64_t k,
                                        const DeviceDescription& device) const {
  std::size_t bytes = 0;
  for (const auto& kernel : kernels_) {
    bytes = std::max(bytes, kernel->max_scratch_bytes(rows, k, device));
  }
  return bytes;
}

std::vector<ReportRow> Registry::report(const std::vector<ModelLayer>& layers,
                                        const DeviceDescription& device, DType out_dtype,
                                        ActivationOperand operand, bool batch_invariant,
                                        std::span<const std::int64_t> ms) const {
  // Checked before any layer: the report's text names its M as a list in this order.
  if (ms.empty()) {
    detail::fail(ErrorCode::kInvalidArgument, "selection_report", "ms",
                 "is empty; expected at least one token count");
  }
  constexpr std::int64_t kMaxTokens = detail::kMaxExtent;  // the most rows linear() takes
  for (std::size_t i = 0; i < ms.size(); ++i) {
    if (ms[i] < 1 || ms[i] > kMaxTokens || (i > 0 && ms[i] <= ms[i - 1])) {
      detail::fail(ErrorCode::kInvalidArgument, "selection_report", "ms",
                   fmt::format("is [{}]; expected token counts in 1..{} in ascending order, each "
                               "once",
                               fmt::join(ms, ", "), kMaxTokens));
    }
  }
  for (const ModelLayer& layer : layers) {
    if (layer.n < 1 || layer.n > kMaxLayerFeatures || layer.k < kBlockSize ||
        layer.k % kBlockSize != 0 || layer.k > kMaxLayerFeatures) {
      detail::fail(ErrorCode::kInvalidArgument, "selection_report", "layers",
                   fmt::format("has '{}' with N = {}, K = {}; expected N in 1..{} and K a "
                               "multiple of {} in {}..{}",
                               detail::for_display(layer.name), layer.n, layer.k, kMaxLayerFeatures,
                               kBlockSize, kBlockSize, kMaxLayerFeatures));
    }
  }
  std::vector<ReportRow> rows;
  for (const ModelLayer& layer : layers) {
    ReportRow row;
    row.layer = layer;
    LayerDescription desc;
    desc.n = layer.n;
    desc.k = layer.k;
    desc.out_dtype = out_dtype;
    desc.operand = operand;
    desc.batch_invariant = batch_invariant;
    row.selection = select(desc, device);
    for (const std::int64_t m : ms) {
      row.per_m.emplace_back(m, dispatch(row.selection, device, m));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<ReportRow> selection_report(const std::vector<ModelLayer>& layers,
                                        const DeviceDescription& device, DType out_dtype,
                                        ActivationOperand operand, bool batch_invariant,
                                        std::span<const std::int64_t> ms) {
  return Registry::global().report(layers, device, out_dtype, operand, batch_invariant, ms);
}

bool is_cpu_reference(const Kernel& kernel) { return kernel.name() == "reference"; }

std::string selection_log_line(std::int64_t n, std::int64_t k, DType out,
                               const DeviceDescription& device, std::string_view kernel) {
  return fmt::format("layer {} x {} ({} out) on {}: {}", n, k, to_string(out), device.to_string(),
                     kernel);
}

std::string dispatch_log_line(std::int64_t m, std::int64_t n, std::int64_t k, const Dispatch& d) {
  return fmt::format("{} x {} x {}: {}/{} ({})", m, n, k, d.kernel ? d.kernel->name() : "none",
                     d.config, d.why);
}

std::string_view kernel_name(const Kernel* kernel) {
  return kernel != nullptr ? kernel->name() : std::string_view();
}

}  // namespace mxlinear
