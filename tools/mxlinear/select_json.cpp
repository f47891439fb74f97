#include "select_json.hpp"

#include <nlohmann/json.hpp>

#include <string>

#include "host/registry/registry.hpp"

namespace mxlinear::cli {

std::string select_report_json(const std::vector<ReportRow>& rows,
                               const DeviceDescription& device) {
  nlohmann::json layers = nlohmann::json::array();
  for (const ReportRow& r : rows) {
    nlohmann::json rejected = nlohmann::json::array();
    for (const Rejection& j : r.selection.rejected) {
      rejected.push_back({{"kernel", j.kernel}, {"reason", j.reason}});
    }
    nlohmann::json per_m = nlohmann::json::array();
    for (const auto& [m, d] : r.per_m) {
      nlohmann::json entry = {{"m", m},
                              {"kernel", std::string(kernel_name(d.kernel))},
                              {"config", d.config},
                              {"source", d.why},
                              {"estimated_us", nullptr}};
      if (d.estimated_us > 0) entry["estimated_us"] = d.estimated_us;
      per_m.push_back(std::move(entry));
    }
    // kernels_run: what the calls run on (per_m says which M goes where); selected_kernel: the
    // kernel that claims the layer, which a tuned row may leave with no M at all.
    layers.push_back({{"layer", r.layer.name},
                      {"n", r.layer.n},
                      {"k", r.layer.k},
                      {"count", r.layer.count},
                      {"kernels_run", kernels_run(r)},
                      {"selected_kernel", std::string(kernel_name(r.selection.kernel))},
                      {"rejected", rejected},
                      {"per_m", per_m},
                      {"warnings", r.selection.warnings}});
  }
  nlohmann::json doc = {
      {"device",
       {{"name", device.name},
        {"arch", device.arch},
        {"sms", device.sms},
        {"is_gpu", device.is_gpu}}},
      {"activation",
       describe(rows.empty() ? ActivationOperand::kMx : rows.front().selection.layer.operand)},
      {"batch_invariant", !rows.empty() && rows.front().selection.layer.batch_invariant},
      {"layers", layers}};
  // A layer name from a user's model CSV need not be UTF-8: replace such bytes, never throw.
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace mxlinear::cli
