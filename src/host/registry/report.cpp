#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "host/log.hpp"
#include "host/registry/registry.hpp"

namespace mxlinear {
namespace {

// A dispatch's kernel, or NONE where no kernel can run the layer.
std::string_view kernel_or_none(const Kernel* k) { return k ? kernel_name(k) : "NONE"; }

// The token counts of the report, e.g. "M = 1, 32, 128".
std::string m_list(const ReportRow& r) {
  std::vector<std::int64_t> ms;
  for (const auto& [m, d] : r.per_m) ms.push_back(m);
  return fmt::format("M = {}", fmt::join(ms, ", "));
}

}  // namespace

std::vector<std::string> kernels_run(const ReportRow& r) {
  std::vector<std::string> names;
  for (const auto& [m, d] : r.per_m) {
    if (!d.kernel) continue;
    const std::string name(d.kernel->name());
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

std::string format_report(const std::vector<ReportRow>& rows, const DeviceDescription& device) {
  std::string s = fmt::format("mxlinear select on {}", device.to_string());
  if (!rows.empty()) s += fmt::format(", {}", describe(rows.front().selection.layer.operand));
  if (!rows.empty() && rows.front().selection.layer.batch_invariant) {
    s +=
        ", batch-invariant mode (each layer: one K order, on its kernel's configs that keep it and "
        "those of kernels that join it)";
  }
  s += "\n";
  std::vector<std::string> runs;
  std::size_t runs_width = std::string_view("runs").size();
  for (const ReportRow& r : rows) {
    const std::vector<std::string> names = kernels_run(r);
    runs.push_back(names.empty() ? "NONE" : fmt::format("{}", fmt::join(names, ",")));
    runs_width = std::max(runs_width, runs.back().size());
  }
  s += fmt::format("{:<30} {:>12} {:>5}  {:<{}}  {:<10} {}\n", "layer", "N x K", "count", "runs",
                   runs_width, "selected", "rejected (reason)");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const ReportRow& r = rows[i];
    std::string rejected;
    for (const Rejection& j : r.selection.rejected) {
      rejected += fmt::format("{}{}: {}", rejected.empty() ? "" : "; ", j.kernel, j.reason);
    }
    s += fmt::format("{:<30} {:>12} {:>5}  {:<{}}  {:<10} {}\n", detail::for_display(r.layer.name),
                     fmt::format("{} x {}", r.layer.n, r.layer.k), r.layer.count, runs[i],
                     runs_width, kernel_or_none(r.selection.kernel),
                     rejected.empty() ? "-" : rejected);
  }
  if (!rows.empty()) {
    s += fmt::format(
        "runs: the kernels the layer's calls run on at {} (the per-M dispatch below)\n"
        "selected: the kernel that claims the layer; a tuned row or the cost model may hand an "
        "M to another kernel\n",
        m_list(rows.front()));
  }
  s += "\nper-M dispatch, kernel/config (* = from a tuned row, ~ = chosen by the cost model):\n";
  for (const ReportRow& r : rows) {
    s += fmt::format("  {:>12}:", fmt::format("{} x {}", r.layer.n, r.layer.k));
    for (const auto& [m, d] : r.per_m) {
      const char* mark =
          d.estimated_us > 0 ? "~" : (d.why.find("tuned row") != std::string::npos ? "*" : "");
      s += fmt::format("  M={} {}/{}{}", m, kernel_or_none(d.kernel), d.config, mark);
    }
    s += "\n";
  }
  for (const ReportRow& r : rows) {
    for (const std::string& w : r.selection.warnings) s += fmt::format("warning: {}\n", w);
  }
  return s;
}

}  // namespace mxlinear
