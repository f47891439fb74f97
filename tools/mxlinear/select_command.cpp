#include "select_command.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli_support.hpp"
#include "exit_codes.hpp"
#include "host/log.hpp"
#include "host/registry/registry.hpp"
#include "select_json.hpp"

namespace mxlinear::cli {
namespace {

struct SelectOptions {
  std::string model = "builtin:minimax-m3.1-flash-tp4";
  std::string device = "current";
  std::string out_dtype = "bf16";
  std::string activation;  // empty: MXLINEAR_ACTIVATION's mode
  std::string x_dtype = "bf16";
  bool batch_invariant = false;  // false: MXLINEAR_BATCH_INVARIANT's mode
  std::vector<std::int64_t> ms{kReportTokenCounts.begin(), kReportTokenCounts.end()};
  bool json = false;
};

// The decisions behind the report through the library's log, in linear()'s words: info, one
// line per layer; debug, one line per M.
void log_decisions(const std::vector<ReportRow>& rows, const DeviceDescription& device, DType out) {
  if (!detail::log_enabled(detail::LogLevel::kInfo)) return;
  for (const ReportRow& r : rows) {
    const LayerSelection& s = r.selection;
    std::string rejected;
    for (const Rejection& j : s.rejected) {
      rejected += fmt::format("; {} rejected: {}", j.kernel, j.reason);
    }
    const std::vector<std::string> runs = kernels_run(r);
    detail::log(
        detail::LogLevel::kInfo,
        fmt::format("{}{}; its calls run on {}",
                    selection_log_line(r.layer.n, r.layer.k, out, device,
                                       s.kernel ? s.kernel->name() : "no kernel"),
                    rejected, runs.empty() ? "none" : fmt::format("{}", fmt::join(runs, ", "))));
    if (!detail::log_enabled(detail::LogLevel::kDebug)) continue;
    for (const auto& [m, d] : r.per_m) {
      detail::log(detail::LogLevel::kDebug, dispatch_log_line(m, r.layer.n, r.layer.k, d));
    }
  }
}

int run_select(const SelectOptions& o) {
  // The model first: a bad file is reported before the registry reads its tables.
  const std::vector<ModelLayer> layers = load_model(o.model);
  const DeviceDescription device =
      o.device == "current" ? DeviceDescription::current() : DeviceDescription::parse(o.device);
  if (o.device != "current") {
    if (const auto set = selection_switches_set(); !set.empty()) {
      fmt::print(stderr, "mxlinear select: the report for {} applies {} from this environment\n",
                 device.to_string(), fmt::join(set, ", "));
    }
  }
  const Registry& registry = Registry::global();
  // On a GPU no kernel supports, linear() refuses device memory unless the CPU reference is
  // forced; the report's reference rows stand for that forced backend (or host memory).
  if (device.is_gpu && !registry.check_device(device, 0).ok()) {
    fmt::print(stderr,
               "mxlinear select: {} has no mxlinear GPU kernel (they need sm_90a); linear() "
               "refuses its device-memory calls unless MXLINEAR_BACKEND=reference, and the "
               "report's 'reference' rows are that forced backend\n",
               device.to_string());
  }
  const DType out =
      o.out_dtype == "fp32" ? DType::kF32 : (o.out_dtype == "fp16" ? DType::kF16 : DType::kBF16);
  const ActivationMode mode = o.activation.empty() ? registry.environment().activation
                                                   : *parse_activation_mode(o.activation);
  const auto operand =
      activation_operand(mode, o.x_dtype == "fp16" ? DType::kF16 : DType::kBF16).value();
  const bool invariant = o.batch_invariant || registry.environment().batch_invariant;
  const auto rows =
      registry.report(layers, device, out, operand, invariant, report_token_counts(o.ms));
  log_decisions(rows, device, out);
  if (o.json) {
    fmt::print("{}\n", select_report_json(rows, device));
  } else {
    fmt::print("{}", format_report(rows, device));
  }
  for (const ReportRow& r : rows) {
    if (!r.selection.kernel) return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

void add_select_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<SelectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "select", "Show the kernels each layer of a model runs on, per M, and why");
  cmd->add_option("--model", o->model, "builtin:<name> or a CSV of name,N,K,count rows");
  cmd->add_option("--device", o->device,
                  "current, cpu, or a described GPU such as sm_90a:132 (arch:SMs)");
  cmd->add_option("--out-dtype", o->out_dtype, "bf16, fp16 or fp32")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  cmd->add_option("--activation", o->activation,
                  "mx (W8A8: x quantized to MXFP8) or bf16 (W8A16: x as it is); default: "
                  "MXLINEAR_ACTIVATION, else mx")
      ->check(CLI::IsMember({"mx", "bf16"}));
  cmd->add_option("--x-dtype", o->x_dtype, "the activation's dtype in W8A16: bf16 or fp16")
      ->check(CLI::IsMember({"bf16", "fp16"}));
  cmd->add_flag("--batch-invariant", o->batch_invariant,
                "the report of the batch-invariant mode, in which each output row's bits depend "
                "only on that row of x, the weights and the mode, never on M or on the row's "
                "place in the batch: every call of a layer sums K in one order that K fixes "
                "(its parts, added in order), on the configs that keep it (the prefill kernel's "
                "and the GEMV's k-parts configs; no other K split, no decode kernel), which "
                "costs speed; default: MXLINEAR_BATCH_INVARIANT=1, else off");
  cmd->add_option("--m", o->ms, "token counts to show the dispatch of, in any order")
      ->delimiter(',')
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print the report as JSON");
  cmd->callback([o, &exit_code] { exit_code = run_select(*o); });
}

}  // namespace mxlinear::cli
