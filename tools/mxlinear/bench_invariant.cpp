#include "bench_invariant.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "device_memory.hpp"
#include "mxlinear/linear.hpp"
#include "report.hpp"

namespace mxlinear::cli {
namespace {

using nlohmann::json;

// The bf16 bits of `rows` rows of a [*, n] output from row `first`.
std::vector<std::uint16_t> download_rows(const void* out, std::int64_t first, std::int64_t rows,
                                         std::int64_t n) {
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(rows * n));
  cuda_or_throw(cudaMemcpy(bits.data(), static_cast<const std::uint8_t*>(out) + first * n * 2,
                           bits.size() * 2, cudaMemcpyDeviceToHost),
                "download");
  return bits;
}

// Whether the M-row call's output (in the figure's output buffer) has, in its first min(M, 8)
// rows and its last as many, the bits of the same x rows run alone as one call of that many rows
// from a buffer of their own (so the last rows move to the start of the batch).
bool rows_alone_equal(const FigureInputs& in, const LinearOptions& options) {
  const FigureBuffers& b = in.buffers;
  const std::int64_t m = b.m, n = b.n, k = b.k, rows = std::min<std::int64_t>(m, 8);
  std::vector<std::pair<std::int64_t, std::vector<std::uint16_t>>> expected;
  expected.emplace_back(0, download_rows(b.out.ptr, 0, rows, n));
  if (m > rows) expected.emplace_back(m - rows, download_rows(b.out.ptr, m - rows, rows, n));
  const DeviceMemory x(static_cast<std::size_t>(rows * k) * 2),
      out(static_cast<std::size_t>(rows * n) * 2), workspace(linear_workspace_bytes(rows, k));
  const TensorView xv = TensorView::contiguous(x.ptr, {rows, k}, DType::kBF16, Location::kDevice);
  const TensorView ov = TensorView::contiguous(out.ptr, {rows, n}, DType::kBF16, Location::kDevice);
  bool equal = true;
  for (const auto& [first, bits] : expected) {
    cuda_or_throw(
        cudaMemcpyAsync(x.ptr, b.x.bytes() + first * k * 2, static_cast<std::size_t>(rows * k) * 2,
                        cudaMemcpyDeviceToDevice, in.stream),
        "copy rows");
    cuda_or_throw(cudaMemsetAsync(out.ptr, 0xFF, static_cast<std::size_t>(rows * n) * 2, in.stream),
                  "poison");
    linear(xv, in.weights.view(0), std::nullopt, ov, in.stream,
           Workspace{workspace.ptr, linear_workspace_bytes(rows, k)}, options);
    cuda_or_throw(cudaStreamSynchronize(in.stream), "sync");
    equal = equal && download_rows(out.ptr, 0, rows, n) == bits;
  }
  return equal;
}

// One mode's figure; keys are "<prefix>_us", "check_<prefix>" and so on, and "<prefix>_default_us":
// the same call in the default mode, its graph replayed in alternation with the mode's, which is
// what the mode's ratio divides by (linear_us and w8a16_us were timed apart, earlier). Returns
// whether its rows run alone gave the same bits, or nullopt where its call was refused.
std::optional<bool> add_mode(json& row, const FigureInputs& in, ActivationMode mode,
                             const ReferenceRows& reference, const std::string& prefix) {
  const FigureBuffers& b = in.buffers;
  const LinearOptions options{mode, true};
  bool ok = false;
  std::optional<bool> rows_equal;
  if (const auto refusal = refusal_of([&] {
        const double err = checked_first_run(
            b,
            [&] {
              linear(b.xv, in.weights.view(0), std::nullopt, b.ov, in.stream, b.work(), options);
            },
            reference, in.stream);
        ok = err <= in.tolerance;
        row["check_" + prefix + "_rel_error"] = err;
        rows_equal = rows_alone_equal(in, options);
      })) {
    // A layer no kernel serves in this mode: the figure fails its check.
    row[prefix + "_error"] = *refusal;
  }
  row["check_" + prefix] = ok ? "ok" : "WRONG";
  if (ok) {
    // The full linear with the workspace, from the same rotation and graph as linear_us, in
    // alternation with the default mode's.
    const Workspace workspace = b.work();
    const LinearOptions default_options{mode, false};
    const auto [by_default, full] = in.median_pair(
        [&](int i) {
          linear(b.xv, in.weights.view(i), std::nullopt, b.ov, in.stream, workspace,
                 default_options);
        },
        [&](int i) {
          linear(b.xv, in.weights.view(i), std::nullopt, b.ov, in.stream, workspace, options);
        });
    row[prefix + "_us"] = full.median;
    row[prefix + "_spread"] = full.spread();
    row[prefix + "_default_us"] = by_default.median;
    row[prefix + "_default_spread"] = by_default.spread();
  }
  return rows_equal;
}

// "12.30 us (x1.05 of invariant_default_us) ok", "- WRONG", with the refusal where there was one.
std::string mode_text(const json& row, const std::string& prefix, const char* timed_apart) {
  const std::string check = "check_" + prefix;
  if (!row.contains(check)) return "-";
  const double us = bench::value_or_nan(row, (prefix + "_us").c_str());
  std::string s = std::isnan(us)
                      ? std::string("-")
                      : fmt::format("{:.2f} us (x{:.2f} of {})", us,
                                    bench::invariant_over_default(row, prefix, timed_apart),
                                    bench::invariant_default_key(row, prefix, timed_apart));
  s += fmt::format(" {}", row[check].get<std::string>());
  if (const std::string error = prefix + "_error"; row.contains(error)) {
    s += fmt::format(" ({})", row[error].get<std::string>());
  }
  return s;
}

}  // namespace

void add_invariant_figures(json& row, const FigureInputs& in) {
  std::optional<bool> equal = add_mode(row, in, ActivationMode::kW8A8, in.reference, "invariant");
  const std::optional<bool> equal_w8a16 =
      add_mode(row, in, ActivationMode::kW8A16, in.reference_w8a16, "invariant_w8a16");
  if (equal_w8a16) equal = equal.value_or(true) && *equal_w8a16;
  if (equal) row["invariant_rows_equal"] = *equal;
}

std::string invariant_text(const json& row) {
  if (!row.contains("check_invariant") && !row.contains("check_invariant_w8a16")) return "";
  const auto kernel = [&](const char* key) {
    return row.contains(key) ? row[key].get<std::string>() : std::string("-");
  };
  const std::string rows_alone =
      !row.contains("invariant_rows_equal")
          ? "not run"
          : (row["invariant_rows_equal"].get<bool>() ? "the same bits" : "DIFFERENT BITS");
  return fmt::format("  batch-invariant: W8A8 {}, W8A16 {}; rows run alone: {}  {}, {}\n",
                     mode_text(row, "invariant", "linear_us"),
                     mode_text(row, "invariant_w8a16", "w8a16_us"), rows_alone,
                     kernel("kernel_invariant"), kernel("kernel_invariant_w8a16"));
}

}  // namespace mxlinear::cli
