// What `mxlinear tune` decides without a GPU: the figures a run times, which of them an earlier,
// interrupted run already wrote, the rows it writes, its ETA and its closing summary.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "mxlinear/models.hpp"
#include "mxlinear/tuned_table.hpp"

namespace mxlinear::cli {

// One (layer shape, M) the tuner times: a row of the table it writes.
struct TuneFigure {
  std::string layer;  // the first model layer of this shape
  std::int64_t n = 0, k = 0, m = 0;
  // The row's M column: M itself where it is a power of two (a bucket row), else "=M" (a row for
  // that M only), as docs/TUNED_TABLES.md defines them.
  std::string m_column() const;
};

// Every distinct (N, K) of the model (in the model's order) at each M.
std::vector<TuneFigure> tune_figures(const std::vector<ModelLayer>& layers,
                                     const std::vector<std::int64_t>& ms);

using FigureKey = std::tuple<std::int64_t, std::int64_t, std::string>;  // n, k, M column
// The figures a table's text already has rows for on this device (`arch`, `sms`): the rows an
// interrupted run wrote before it stopped. Rows the parser refuses do not count.
std::set<FigureKey> figures_in_table(const std::string& text, const std::string& arch, int sms,
                                     bool w8a16, const TableContext& context);

// The table's first lines: a comment saying how it was made, then the column header.
std::string tuned_table_header(const std::string& how_made);
// One row; error_ratio = measured error / the correctness guard (<= 1 for any row written).
std::string tuned_row(const std::string& arch, int sms, const TuneFigure& f,
                      const std::string& kernel, const std::string& config, double us,
                      double error_ratio, const TableContext& context);

// Every config's time, as `--timings` writes it: a header, then one line per config timed
// (M as the call's token count; us empty where the config failed the correctness check).
std::string timings_header();
std::string timing_line(const TuneFigure& f, const std::string& kernel, const std::string& config,
                        double us, double error_ratio, bool passed);

// Seconds left when `done` of `total` configs took `elapsed` seconds (the mean so far); 0 when
// nothing is left, -1 while nothing has been timed.
double eta_seconds(double elapsed, std::int64_t done, std::int64_t total);
// "1 h 02 min", "3 min 05 s", "12 s", or "unknown" for a negative value.
std::string duration_text(double seconds);

// What one figure's tuning found: the fastest config, and the config the cost model chooses
// without a table, both timed in the same run.
struct TuneOutcome {
  TuneFigure figure;
  std::string best;  // kernel/config
  double best_us = 0;
  std::string untuned;  // kernel/config
  double untuned_us = 0;
};

// The closing summary: per outcome its gain over the untuned choice, the geomean gain and the
// largest one.
std::string tune_summary(const std::vector<TuneOutcome>& outcomes);

}  // namespace mxlinear::cli
