#include "report.hpp"

#include "harness.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <iterator>

namespace mxlinear::bench {

using nlohmann::json;

double value_or_nan(const json& row, const char* key) {
  return row.contains(key) ? row[key].get<double>() : NAN;
}

std::string invariant_default_key(const json& row, const std::string& prefix,
                                  const char* timed_apart) {
  const std::string paired = prefix + "_default_us";
  return row.contains(paired) ? paired : std::string(timed_apart);
}

double invariant_over_default(const json& row, const std::string& prefix, const char* timed_apart) {
  return value_or_nan(row, (prefix + "_us").c_str()) /
         value_or_nan(row, invariant_default_key(row, prefix, timed_apart).c_str());
}

namespace {

// A row's number with `decimals` decimals, or "-" where the row lacks it: the W8A16 columns of
// reports from before the bench timed W8A16, and of figures whose W8A16 check failed.
std::string number_or_dash(const json& row, const char* key, int decimals) {
  if (!row.contains(key) || !row[key].is_number()) return "-";
  return fmt::format("{:.{}f}", row[key].get<double>(), decimals);
}

// A row's string, or "-" where the row lacks it (reports from before the field).
std::string text_or_dash(const json& row, const char* key) {
  return row.contains(key) && row[key].is_string() ? row[key].get<std::string>() : "-";
}

// numerator / denominator of a row with two decimals, or "-" where either is missing.
std::string ratio_or_dash(const json& row, const char* numerator, const char* denominator) {
  if (!row.contains(numerator) || !row[numerator].is_number() || !row.contains(denominator) ||
      !row[denominator].is_number()) {
    return "-";
  }
  return fmt::format("{:.2f}", row[numerator].get<double>() / row[denominator].get<double>());
}

// Whether any element of `items` has any of `keys`.
bool any_has(const json& items, std::initializer_list<const char*> keys) {
  return std::any_of(items.begin(), items.end(), [&](const json& item) {
    return item.is_object() &&
           std::any_of(keys.begin(), keys.end(), [&](const char* k) { return item.contains(k); });
  });
}

// The batch-invariant mode's figures (`mxlinear bench --batch-invariant`), one line per figure;
// empty for a report without them.
std::string invariant_table(const json& doc) {
  if (!any_has(doc["rows"], {"kernel_invariant", "check_invariant", "kernel_invariant_w8a16",
                             "check_invariant_w8a16"})) {
    return "";
  }
  std::string s =
      "\nThe batch-invariant mode: each output row's bits depend only on that row of x, the "
      "weights and the mode, never on M or on the row's place in the batch (one kernel per "
      "layer, configs that keep one K order). Its full linear from bf16 per activation mode, "
      "checked against the same fp64 reference; x default: its time over the default mode's, "
      "the two calls' graphs replayed in alternation (reports from before that: over linear us "
      "and W8A16 us, timed apart; above 1: slower); rows alone: whether the first and last "
      "min(M, 8) rows came out with the same bits run alone as one call.\n\n"
      "| layer | N x K | M | invariant kernel/config | invariant us | x default | invariant "
      "check | W8A16 invariant kernel/config | W8A16 invariant us | W8A16 x default | W8A16 "
      "invariant check | rows alone |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const json& r : doc["rows"]) {
    const std::string rows_alone =
        r.contains("invariant_rows_equal") && r["invariant_rows_equal"].is_boolean()
            ? (r["invariant_rows_equal"].get<bool>() ? "equal" : "DIFFERENT")
            : "-";
    s += fmt::format("| {} | {}x{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                     r["layer"].get<std::string>(), r["n"].get<std::int64_t>(),
                     r["k"].get<std::int64_t>(), r["m"].get<std::int64_t>(),
                     text_or_dash(r, "kernel_invariant"), number_or_dash(r, "invariant_us", 2),
                     ratio_or_dash(r, "invariant_us",
                                   invariant_default_key(r, "invariant", "linear_us").c_str()),
                     text_or_dash(r, "check_invariant"), text_or_dash(r, "kernel_invariant_w8a16"),
                     number_or_dash(r, "invariant_w8a16_us", 2),
                     ratio_or_dash(r, "invariant_w8a16_us",
                                   invariant_default_key(r, "invariant_w8a16", "w8a16_us").c_str()),
                     text_or_dash(r, "check_invariant_w8a16"), rows_alone);
  }
  // The mode's cost per regime: the geomean of the figures' ratios over decode batches
  // (M <= 128) and prefill (M >= 512), each figure counted once whatever the report's M list.
  s += "\nThe mode's time over the default mode's per regime, geomean over the figures above "
       "(figures without the ratio left out):\n\n"
       "| regime | W8A8 x default | W8A16 x default |\n|---|---|---|\n";
  const auto regime = [&](bool decode, const char* prefix, const char* timed_apart) {
    std::vector<double> ratios;
    for (const json& r : doc["rows"]) {
      const std::int64_t m = r["m"].get<std::int64_t>();
      if (decode ? m <= 128 : m >= 512) {
        ratios.push_back(invariant_over_default(r, prefix, timed_apart));
      }
    }
    const Geomean g = geomean_of(ratios);
    return g.count == 0 ? std::string("-")
                        : fmt::format("{} ({} figures)", ratio_text(g.value), g.count);
  };
  for (const bool decode : {true, false}) {
    s += fmt::format("| {} | {} | {} |\n", decode ? "M <= 128" : "M >= 512",
                     regime(decode, "invariant", "linear_us"),
                     regime(decode, "invariant_w8a16", "w8a16_us"));
  }
  return s;
}

}  // namespace

std::string timing_note(const json& doc) {
  const json* timing =
      doc.contains("timing") && doc["timing"].is_object() ? &doc["timing"] : nullptr;
  const auto field = [&](const char* key) {
    return timing && timing->contains(key) && (*timing)[key].is_number_integer()
               ? (*timing)[key].get<std::int64_t>()
               : std::int64_t{0};
  };
  const std::int64_t warm_ms = field("warm_ms"), replays = field("replays");
  const std::string replayed = replays > 0 ? fmt::format("the median of {} timed replays", replays)
                                           : "the median of replays";
  if (warm_ms <= 0) {
    return fmt::format(
        "Burst figures: {} right after two warmup launches, so a figure can run at boost clocks "
        "that a sustained load would not keep (--warm-ms).",
        replayed);
  }
  return fmt::format(
      "Sustained figures: each figure's graph replayed for at least {} ms before {}, so the clocks "
      "had settled where a sustained load runs them.",
      warm_ms, replayed);
}

std::string markdown_report(const json& doc) {
  // A report written while the bench ran, which then stopped: its figures are those timed so far.
  const bool incomplete =
      doc.contains("complete") && doc["complete"].is_boolean() && !doc["complete"].get<bool>();
  std::string s = fmt::format(
      "# mxlinear bench on {}\n\n{}Ceilings measured in this run: read {:.2f} TB/s, cuBLAS bf16 "
      "{:.0f} TFLOP/s, cuBLASLt FP8 {:.0f} TFLOP/s (8192^3). cuBLASLt FP8 runs with M padded "
      "to 16 (its FP8 kernels need it). {}\n\n"
      "Each figure runs in both activation modes: W8A8 (the bf16 activation quantized to MXFP8; "
      "linear us from bf16, gemm us on the pre-quantized activation) and W8A16 (the bf16 "
      "activation multiplied as it is; W8A16 us from bf16), each checked against its own fp64 "
      "reference. \"-\": not timed (a failed check) or not in this report.\n\n"
      "| layer | N x K | M | kernel/config | W8A16 kernel/config | linear us | gemm us | W8A16 us "
      "| cuBLAS bf16 us | cuBLASLt FP8 us | FP8 1x128/128x128 us | tri_mx us | x bf16 | x fp8 | "
      "x tri_mx | W8A16 x bf16 | floor us | only reading the weights us | the reads overlapped us "
      "| gemm TB/s | gemm TFLOP/s | check | W8A16 check |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
      "---|\n",
      doc["gpu"].get<std::string>(),
      incomplete ? "Incomplete: the run stopped before its end; these are the figures it had "
                   "timed, and the geometric means cover only those.\n\n"
                 : "",
      doc["ceilings"]["read_tb_s"].get<double>(), doc["ceilings"]["bf16_tflop_s"].get<double>(),
      doc["ceilings"]["fp8_tflop_s"].get<double>(), timing_note(doc));
  for (const json& r : doc["rows"]) {
    const double g = value_or_nan(r, "gemm_us");
    const std::string w8a16_vs_bf16 =
        r.contains("w8a16_us")
            ? fmt::format("{:.2f}", value_or_nan(r, "cublas_bf16_us") / value_or_nan(r, "w8a16_us"))
            : std::string("-");
    s += fmt::format(
        "| {} | {}x{} | {} | {} | {} | {:.2f} | {:.2f} | {} | {:.2f} | {:.2f} | {:.2f} | {:.1f} | "
        "{:.2f} | {:.2f} | {:.2f} | {} | {:.2f} | {:.2f} | {:.2f} | {:.1f} | {:.0f} | {} | {} |\n",
        r["layer"].get<std::string>(), r["n"].get<std::int64_t>(), r["k"].get<std::int64_t>(),
        r["m"].get<std::int64_t>(), r["kernel"].get<std::string>(), text_or_dash(r, "kernel_w8a16"),
        value_or_nan(r, "linear_us"), g, number_or_dash(r, "w8a16_us", 2),
        value_or_nan(r, "cublas_bf16_us"), value_or_nan(r, "cublaslt_fp8_tensor_us"),
        value_or_nan(r, "cublaslt_fp8_block_us"), value_or_nan(r, "tri_mx_us"),
        value_or_nan(r, "cublas_bf16_us") / g, value_or_nan(r, "cublaslt_fp8_tensor_us") / g,
        value_or_nan(r, "tri_mx_us") / g, w8a16_vs_bf16, value_or_nan(r, "floor_us"),
        value_or_nan(r, "weight_stream_us"), value_or_nan(r, "weight_stream_overlapped_us"),
        value_or_nan(r, "gemm_tb_s"), value_or_nan(r, "gemm_tflop_s"),
        r["check"].get<std::string>(), text_or_dash(r, "check_w8a16"));
  }
  s += invariant_table(doc);
  // The batch-invariant mode's columns only in reports that timed it.
  const bool invariant =
      any_has(doc["geomeans"], {"invariant_over_default", "invariant_w8a16_over_default"});
  s += fmt::format(
      "\nSpeed-ups are anchor time / our GEMM time on the MXFP8 activation (above 1: we are "
      "faster); 'from bf16' and W8A16: cuBLAS bf16 time / our linear time from the bf16 "
      "activation, as cuBLAS bf16 starts (W8A8: the quantization included){}; geometric means "
      "over shapes:\n\n"
      "| M | x cuBLAS bf16 | from bf16 x cuBLAS bf16 | x cuBLASLt FP8 | x tri_mx | W8A16 x cuBLAS "
      "bf16 |{}\n"
      "|---|---|---|---|---|---|{}\n",
      invariant ? "; the batch-invariant mode's cost is its time / the default mode's (above 1: "
                  "slower)"
                : "",
      invariant ? " batch-invariant / default | W8A16 batch-invariant / default |" : "",
      invariant ? "---|---|" : "");
  // A geomean's ratio, or "-" where the geomean lacks it (reports from before the figure).
  // Where some of the M's rows had no figure, the cell says over how many rows it is taken.
  const auto ratio_of = [](const json& g, const char* key) {
    if (!g.contains(key)) return std::string("-");
    std::string cell = ratio_text(g[key].get<double>());
    if (g.contains("rows") && g.contains("rows_left_out") && g["rows_left_out"].contains(key)) {
      const auto rows = g["rows"].get<std::int64_t>();
      cell +=
          fmt::format(" ({} of {} rows)", rows - g["rows_left_out"][key].get<std::int64_t>(), rows);
    }
    return cell;
  };
  for (const json& g : doc["geomeans"]) {
    // Reports from before W8A16 was timed lack its geomean.
    s += fmt::format("| {} | {} | {} | {} | {} | {} |", g["m"].get<std::int64_t>(),
                     ratio_of(g, "vs_cublas_bf16"), ratio_of(g, "linear_vs_cublas_bf16"),
                     ratio_of(g, "vs_cublaslt_fp8"), ratio_of(g, "vs_tri_mx"),
                     ratio_of(g, "w8a16_vs_cublas_bf16"));
    if (invariant) {
      s += fmt::format(" {} | {} |", ratio_of(g, "invariant_over_default"),
                       ratio_of(g, "invariant_w8a16_over_default"));
    }
    s += "\n";
  }
  if (doc.contains("quantize")) {
    s += "\nActivation quantization alone (bf16 in, inputs rotating over >= 3x L2):\n\n"
         "| M | K | us | read TB/s | of read ceiling | read + written of read ceiling |\n"
         "|---|---|---|---|---|---|\n";
    for (const json& q : doc["quantize"]) {
      // Reports from before the read + written column lack it.
      const std::string moved =
          q.contains("moved_fraction_of_read_ceiling")
              ? fmt::format("{:.0f}%", 100 * q["moved_fraction_of_read_ceiling"].get<double>())
              : std::string("-");
      s += fmt::format("| {} | {} | {:.2f} | {:.2f} | {:.0f}% | {} |\n", q["m"].get<std::int64_t>(),
                       q["k"].get<std::int64_t>(), q["us"].get<double>(),
                       q["read_tb_s"].get<double>(),
                       100 * q["fraction_of_read_ceiling"].get<double>(), moved);
    }
  }
  if (doc.contains("step")) {
    s += "\nDecode-step replay (all layer instances, own weights, one graph), ms per step:\n\n"
         "| M | mxlinear | cuBLAS bf16 | cuBLASLt FP8 | weights read alone | overlapped | "
         "overlapped, "
         "each waiting for the one before | half of each read after the wait |\n"
         "|---|---|---|---|---|---|---|---|\n";
    for (const json& r : doc["step"]) {
      s += fmt::format("| {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} |\n",
                       r["m"].get<std::int64_t>(), value_or_nan(r, "mxlinear_ms"),
                       value_or_nan(r, "cublas_bf16_ms"), value_or_nan(r, "cublaslt_fp8_tensor_ms"),
                       value_or_nan(r, "weight_stream_ms"),
                       value_or_nan(r, "weight_stream_overlapped_ms"),
                       value_or_nan(r, "weight_stream_waited_ms"),
                       value_or_nan(r, "weight_stream_half_after_wait_ms"));
    }
  }
  return s;
}

namespace {

// A figure a row may have (reports from before it lack it): a row with any of `fields` has it,
// and then needs `kernel` and `check` (strings), and `rel_error` and `us` (numbers) where the
// check is "ok"; `numbers` and `strings` are optional fields of their type.
struct OptionalFigure {
  std::vector<const char*> fields;
  const char *kernel, *check, *rel_error, *us;
  std::vector<const char*> numbers, strings;
};

// W8A16's (its refusal, w8a16_error, goes with a WRONG check and alone does not make the figure),
// and the batch-invariant mode's in W8A8 and in W8A16 (`mxlinear bench --batch-invariant`).
const OptionalFigure kOptionalFigures[] = {
    {{"kernel_w8a16", "check_w8a16", "check_w8a16_rel_error", "w8a16_us", "w8a16_spread",
      "w8a16_tb_s"},
     "kernel_w8a16",
     "check_w8a16",
     "check_w8a16_rel_error",
     "w8a16_us",
     {"w8a16_spread", "w8a16_tb_s"},
     {}},
    {{"kernel_invariant", "check_invariant", "check_invariant_rel_error", "invariant_us",
      "invariant_spread", "invariant_error"},
     "kernel_invariant",
     "check_invariant",
     "check_invariant_rel_error",
     "invariant_us",
     {"invariant_spread", "invariant_default_us", "invariant_default_spread"},
     {"invariant_error"}},
    {{"kernel_invariant_w8a16", "check_invariant_w8a16", "check_invariant_w8a16_rel_error",
      "invariant_w8a16_us", "invariant_w8a16_spread", "invariant_w8a16_error"},
     "kernel_invariant_w8a16",
     "check_invariant_w8a16",
     "check_invariant_w8a16_rel_error",
     "invariant_w8a16_us",
     {"invariant_w8a16_spread", "invariant_w8a16_default_us", "invariant_w8a16_default_spread"},
     {"invariant_w8a16_error"}},
};

// A geomean's ratios: those every report has, and those only newer ones have (numbers where
// present). Together, the ones rows_left_out may name.
constexpr const char* kRequiredGeomeans[] = {"vs_cublas_bf16", "vs_cublaslt_fp8", "vs_tri_mx"};
constexpr const char* kOptionalGeomeans[] = {"w8a16_vs_cublas_bf16", "linear_vs_cublas_bf16",
                                             "invariant_over_default",
                                             "invariant_w8a16_over_default"};

void require(const json& j, const char* key, json::value_t type, const std::string& where,
             std::vector<std::string>& errors) {
  if (!j.is_object() || !j.contains(key)) {
    errors.push_back(fmt::format("{}: missing '{}'", where, key));
    return;
  }
  const json& v = j[key];
  const bool number = type == json::value_t::number_float;
  if (number ? !v.is_number() : v.type() != type) {
    errors.push_back(fmt::format("{}: '{}' has the wrong type", where, key));
  }
}

// require() where `j` has `key`; nothing where it does not.
void require_if_present(const json& j, const char* key, json::value_t type,
                        const std::string& where, std::vector<std::string>& errors) {
  if (j.is_object() && j.contains(key)) require(j, key, type, where, errors);
}

// The optional figure `f` of row `r`, where the row has it.
void check_optional_figure(const json& r, const OptionalFigure& f, const std::string& where,
                           std::vector<std::string>& e) {
  using T = json::value_t;
  const bool has = r.is_object() && std::any_of(f.fields.begin(), f.fields.end(),
                                                [&](const char* k) { return r.contains(k); });
  if (!has) return;
  for (const char* k : {f.kernel, f.check}) require(r, k, T::string, where, e);
  if (r.contains(f.check) && r[f.check] == "ok") {
    require(r, f.rel_error, T::number_float, where, e);
    require(r, f.us, T::number_float, where, e);
  } else {
    require_if_present(r, f.rel_error, T::number_float, where, e);
    require_if_present(r, f.us, T::number_float, where, e);
  }
  for (const char* k : f.numbers) require_if_present(r, k, T::number_float, where, e);
  for (const char* k : f.strings) require_if_present(r, k, T::string, where, e);
}

}  // namespace

std::vector<std::string> schema_errors(const json& doc) {
  using T = json::value_t;
  std::vector<std::string> e;
  if (!doc.is_object()) return {"the report is not a JSON object"};
  require(doc, "gpu", T::string, "report", e);
  require(doc, "versions", T::object, "report", e);
  if (doc.contains("versions")) {
    for (const char* k : {"driver_cuda", "cuda_runtime", "cublas", "mxlinear"}) {
      require(doc["versions"], k, T::string, "versions", e);
    }
  }
  require(doc, "ceilings", T::object, "report", e);
  if (doc.contains("ceilings")) {
    for (const char* k : {"read_tb_s", "bf16_tflop_s", "fp8_tflop_s"}) {
      require(doc["ceilings"], k, T::number_float, "ceilings", e);
    }
  }
  // false while the bench runs: the report holds the figures timed so far.
  require_if_present(doc, "complete", T::boolean, "report", e);
  require(doc, "rows", T::array, "report", e);
  if (doc.contains("rows") && doc["rows"].is_array()) {
    for (std::size_t i = 0; i < doc["rows"].size(); ++i) {
      const json& r = doc["rows"][i];
      const std::string where = fmt::format("rows[{}]", i);
      for (const char* k : {"layer", "kernel", "check"}) require(r, k, T::string, where, e);
      for (const char* k : {"n", "k", "m", "floor_us"}) require(r, k, T::number_float, where, e);
      // The call from bf16 has its own check (reports from before it lack the field); both
      // W8A8 times are taken once both checks pass.
      require_if_present(r, "check_linear", T::string, where, e);
      if (r.is_object() && r.contains("check") && r["check"] == "ok" &&
          (!r.contains("check_linear") || r["check_linear"] == "ok")) {
        require(r, "gemm_us", T::number_float, where, e);
        require(r, "linear_us", T::number_float, where, e);
      }
      // The W8A16 and batch-invariant figures, in reports that have them (older reports have
      // none of their fields): each one's kernel and check, and its error and time where the
      // check passed; and whether the batch-invariant rows run alone gave the same bits.
      for (const OptionalFigure& f : kOptionalFigures) check_optional_figure(r, f, where, e);
      require_if_present(r, "invariant_rows_equal", T::boolean, where, e);
    }
  }
  require(doc, "geomeans", T::array, "report", e);
  if (doc.contains("geomeans") && doc["geomeans"].is_array()) {
    for (std::size_t i = 0; i < doc["geomeans"].size(); ++i) {
      const json& g = doc["geomeans"][i];
      const std::string where = fmt::format("geomeans[{}]", i);
      require(g, "m", T::number_float, where, e);
      for (const char* k : kRequiredGeomeans) require(g, k, T::number_float, where, e);
      for (const char* k : kOptionalGeomeans) require_if_present(g, k, T::number_float, where, e);
      // Reports from before the counts lack them.
      require_if_present(g, "rows", T::number_float, where, e);
      require_if_present(g, "rows_left_out", T::object, where, e);
      if (g.contains("rows_left_out") && g["rows_left_out"].is_object()) {
        const json& left_out = g["rows_left_out"];
        // A count: a whole number >= 0 (nlohmann keeps a parsed 8 unsigned, a literal 8 signed).
        const auto is_count = [](const json& v) {
          return v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
        };
        const bool counted = g.contains("rows") && is_count(g["rows"]);
        if (!counted) e.push_back(where + ": 'rows_left_out' without a row count 'rows'");
        std::size_t known = 0;
        const auto check_count = [&](const char* k) {
          if (!left_out.contains(k)) return;
          ++known;
          if (!is_count(left_out[k]) || !g.contains(k) ||
              (counted && left_out[k].get<std::int64_t>() > g["rows"].get<std::int64_t>())) {
            e.push_back(fmt::format("{}: rows_left_out '{}' is not a count of its rows", where, k));
          }
        };
        for (const char* k : kRequiredGeomeans) check_count(k);
        for (const char* k : kOptionalGeomeans) check_count(k);
        if (known != left_out.size()) {
          e.push_back(where + ": rows_left_out names a ratio the report does not have");
        }
      }
    }
  }
  if (doc.contains("quantize")) {
    for (std::size_t i = 0; i < doc["quantize"].size(); ++i) {
      for (const char* k : {"m", "k", "us", "read_tb_s", "fraction_of_read_ceiling"}) {
        require(doc["quantize"][i], k, T::number_float, fmt::format("quantize[{}]", i), e);
      }
    }
  }
  if (doc.contains("step")) {
    for (std::size_t i = 0; i < doc["step"].size(); ++i) {
      for (const char* k : {"m", "gemms", "mxlinear_ms"}) {
        require(doc["step"][i], k, T::number_float, fmt::format("step[{}]", i), e);
      }
    }
  }
  return e;
}

}  // namespace mxlinear::bench
