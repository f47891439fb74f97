#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "host/registry/registry.hpp"

namespace mxlinear {

std::string format_report(const std::vector<ReportRow>& rows, const DeviceDescription& device) {
  std::string s = fmt::format("mxlinear select on {}\n", device.to_string());
  s += fmt::format("{:<30} {:>12} {:>5}  {:<10} {}\n", "layer", "N x K", "count", "kernel",
                   "rejected (reason)");
  for (const ReportRow& r : rows) {
    std::string rejected;
    for (const Rejection& j : r.selection.rejected) {
      rejected += fmt::format("{}{}: {}", rejected.empty() ? "" : "; ", j.kernel, j.reason);
    }
    s += fmt::format("{:<30} {:>12} {:>5}  {:<10} {}\n", r.layer.name,
                     fmt::format("{} x {}", r.layer.n, r.layer.k), r.layer.count,
                     r.selection.kernel ? r.selection.kernel->name() : "NONE",
                     rejected.empty() ? "-" : rejected);
  }
  s += "\nper-M dispatch, kernel/config (* = from a tuned row, ~ = from the row of the nearest "
       "tuned shape):\n";
  for (const ReportRow& r : rows) {
    s += fmt::format("  {:>12}:", fmt::format("{} x {}", r.layer.n, r.layer.k));
    for (const auto& [m, d] : r.per_m) {
      const char* mark = d.borrowed_n != 0 ? "~" : (d.why.rfind("tuned", 0) == 0 ? "*" : "");
      s += fmt::format("  M={} {}/{}{}", m, d.kernel ? d.kernel->name() : "NONE", d.config, mark);
    }
    s += "\n";
  }
  for (const ReportRow& r : rows) {
    for (const std::string& w : r.selection.warnings) s += fmt::format("warning: {}\n", w);
  }
  return s;
}

std::string report_json(const std::vector<ReportRow>& rows, const DeviceDescription& device) {
  nlohmann::json layers = nlohmann::json::array();
  for (const ReportRow& r : rows) {
    nlohmann::json rejected = nlohmann::json::array();
    for (const Rejection& j : r.selection.rejected) {
      rejected.push_back({{"kernel", j.kernel}, {"reason", j.reason}});
    }
    nlohmann::json per_m = nlohmann::json::array();
    for (const auto& [m, d] : r.per_m) {
      nlohmann::json entry = {{"m", m},
                              {"kernel", d.kernel ? std::string(d.kernel->name()) : ""},
                              {"config", d.config},
                              {"source", d.why},
                              {"borrowed_from", nullptr}};
      if (d.borrowed_n != 0) entry["borrowed_from"] = {d.borrowed_n, d.borrowed_k};
      per_m.push_back(std::move(entry));
    }
    layers.push_back({{"layer", r.layer.name},
                      {"n", r.layer.n},
                      {"k", r.layer.k},
                      {"count", r.layer.count},
                      {"kernel", r.selection.kernel ? std::string(r.selection.kernel->name()) : ""},
                      {"rejected", rejected},
                      {"per_m", per_m},
                      {"warnings", r.selection.warnings}});
  }
  nlohmann::json doc = {{"device",
                         {{"name", device.name},
                          {"arch", device.arch},
                          {"sms", device.sms},
                          {"is_gpu", device.is_gpu}}},
                        {"layers", layers}};
  return doc.dump(2);
}

}  // namespace mxlinear
