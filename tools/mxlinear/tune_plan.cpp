#include "tune_plan.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <utility>

namespace mxlinear::cli {

std::string TuneFigure::m_column() const {
  const bool power_of_two = m > 0 && (m & (m - 1)) == 0;
  return power_of_two ? std::to_string(m) : fmt::format("={}", m);
}

std::vector<TuneFigure> tune_figures(const std::vector<ModelLayer>& layers,
                                     const std::vector<std::int64_t>& ms) {
  std::vector<TuneFigure> figures;
  std::set<std::pair<std::int64_t, std::int64_t>> seen;
  for (const ModelLayer& l : layers) {
    if (!seen.insert({l.n, l.k}).second) continue;
    for (const std::int64_t m : ms) figures.push_back({l.name, l.n, l.k, m});
  }
  return figures;
}

std::set<FigureKey> figures_in_table(const std::string& text, const std::string& arch, int sms,
                                     bool w8a16, const TableContext& context) {
  TunedTable table;
  table.add(text, "resume", context);
  std::set<FigureKey> keys;
  for (const auto& [key, value] : table.rows()) {
    if (key.arch != arch || key.sms != sms || key.w8a16 != w8a16) continue;
    keys.insert({key.n, key.k, key.exact_m ? fmt::format("={}", key.m) : std::to_string(key.m)});
  }
  return keys;
}

std::string tuned_table_header(const std::string& how_made) {
  return fmt::format(
      "# {}\narch,sms,n,k,m,kernel,config,us,error_ratio,mxlinear_version,"
      "cuda_version\n",
      how_made);
}

std::string tuned_row(const std::string& arch, int sms, const TuneFigure& f,
                      const std::string& kernel, const std::string& config, double us,
                      double error_ratio, const TableContext& context) {
  return fmt::format("{},{},{},{},{},{},{},{:.2f},{:.3f},{},{}\n", arch, sms, f.n, f.k,
                     f.m_column(), kernel, config, us, error_ratio, context.library_version,
                     context.cuda_version);
}

std::string timings_header() { return "layer,n,k,m,kernel,config,us,error_ratio\n"; }

std::string timing_line(const TuneFigure& f, const std::string& kernel, const std::string& config,
                        double us, double error_ratio, bool passed) {
  return fmt::format("{},{},{},{},{},{},{},{:.3f}\n", f.layer, f.n, f.k, f.m, kernel, config,
                     passed ? fmt::format("{:.2f}", us) : std::string(), error_ratio);
}

double eta_seconds(double elapsed, std::int64_t done, std::int64_t total) {
  if (done >= total) return 0;
  if (done <= 0) return -1;
  return elapsed / static_cast<double>(done) * static_cast<double>(total - done);
}

std::string duration_text(double seconds) {
  if (seconds < 0 || !std::isfinite(seconds)) return "unknown";
  const auto s = static_cast<long long>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{} h {:02} min", s / 3600, s % 3600 / 60);
  if (s >= 60) return fmt::format("{} min {:02} s", s / 60, s % 60);
  return fmt::format("{} s", s);
}

std::string tune_summary(const std::vector<TuneOutcome>& outcomes) {
  if (outcomes.empty()) return "tuned nothing: every figure already had its row\n";
  std::string text = fmt::format("{:<28} {:>12} {:>6}  {:>9} {:>9} {:>6}  {}\n", "layer", "NxK",
                                 "M", "tuned", "untuned", "gain", "tuned config / untuned");
  double log_sum = 0;
  const TuneOutcome* largest = nullptr;
  for (const TuneOutcome& o : outcomes) {
    const double gain = o.untuned_us / o.best_us;
    log_sum += std::log(gain);
    if (!largest || gain > largest->untuned_us / largest->best_us) largest = &o;
    text += fmt::format("{:<28} {:>12} {:>6}  {:>9.2f} {:>9.2f} {:>6.2f}  {} / {}\n",
                        o.figure.layer, fmt::format("{}x{}", o.figure.n, o.figure.k), o.figure.m,
                        o.best_us, o.untuned_us, gain, o.best, o.untuned);
  }
  text += fmt::format(
      "gain over the cost model's choice: geomean {:.3f}x over {} figures; largest {:.2f}x "
      "({} x {}, M = {})\n",
      std::exp(log_sum / static_cast<double>(outcomes.size())), outcomes.size(),
      largest->untuned_us / largest->best_us, largest->figure.n, largest->figure.k,
      largest->figure.m);
  return text;
}

}  // namespace mxlinear::cli
