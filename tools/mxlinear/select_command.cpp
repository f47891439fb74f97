#include "select_command.hpp"

#include <fmt/format.h>

#include <memory>
#include <string>

#include "host/registry/registry.hpp"

namespace mxlinear::cli {
namespace {

struct SelectOptions {
  std::string model = "builtin:minimax-m3.1-flash-tp4";
  std::string device = "current";
  std::string out_dtype = "bf16";
  bool json = false;
};

int run_select(const SelectOptions& o) {
  const Registry& registry = Registry::global();
  const DeviceDescription device =
      o.device == "current" ? DeviceDescription::current() : DeviceDescription::parse(o.device);
  const DType out =
      o.out_dtype == "fp32" ? DType::kF32 : (o.out_dtype == "fp16" ? DType::kF16 : DType::kBF16);
  const auto rows = registry.report(load_model(o.model), device, out);
  if (o.json) {
    fmt::print("{}\n", report_json(rows, device));
  } else {
    fmt::print("{}", format_report(rows, device));
  }
  for (const ReportRow& r : rows) {
    if (!r.selection.kernel) return 1;
  }
  return 0;
}

}  // namespace

void add_select_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<SelectOptions>();
  CLI::App* cmd = app.add_subcommand("select", "Show the kernel each layer of a model gets");
  cmd->add_option("--model", o->model, "builtin:<name> or a CSV of name,N,K,count");
  cmd->add_option("--device", o->device,
                  "current (default), cpu, or a described GPU such as sm_90a:132");
  cmd->add_option("--out-dtype", o->out_dtype, "bf16, fp16 or fp32")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  cmd->add_flag("--json", o->json, "print the report as JSON");
  cmd->callback([o, &exit_code] { exit_code = run_select(*o); });
}

}  // namespace mxlinear::cli
