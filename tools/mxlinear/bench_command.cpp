#include "bench_command.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "anchor_table.hpp"
#include "anchors.hpp"
#include "bench_invariant.hpp"
#include "bench_layer.hpp"
#include "bench_rates.hpp"
#include "bench_step.hpp"
#include "bench_sweep.hpp"
#include "cli_support.hpp"
#include "device_data.hpp"
#include "device_memory.hpp"
#include "exit_codes.hpp"
#include "harness.hpp"
#include "host/diagnostics.hpp"
#include "host/log.hpp"
#include "host/registry/registry.hpp"
#include "mxlinear/error.hpp"
#include "mxlinear/linear.hpp"
#include "mxlinear/models.hpp"
#include "mxlinear/version.hpp"
#include "report.hpp"

namespace mxlinear::cli {
namespace {

using nlohmann::json;

struct BenchOptions {
  std::string model = "builtin:minimax-m3.1-flash-tp4";
  std::vector<std::int64_t> ms = {1, 32, 128, 512, 2048, 8192};
  std::vector<std::int64_t> step_ms = {32, 128};
  std::string anchors;
  std::string json_path;
  std::string markdown_path;
  bool ceilings_only = false;
  bool step = false;
  bool all_configs = false;
  bool batch_invariant = false;            // also time the batch-invariant mode
  std::vector<std::string> sweep_kernels;  // empty: every GPU kernel
  std::string sweep_configs;               // an extended regex; empty: every config
  int replays = 10;
  int warm_ms = 0;  // per figure, before its timed replays (0: a burst figure)
};

void cuda(cudaError_t e, const char* what) { cuda_or_throw(e, what); }

// The kernel/config linear() dispatches an M-row call of the layer to, for the activation operand
// of the mode (kMx: W8A8; kBf16: W8A16 on the bench's bf16 x), in the batch-invariant mode or not.
std::string dispatch_name(std::int64_t n, std::int64_t k, std::int64_t m, ActivationOperand operand,
                          bool batch_invariant = false) {
  const DeviceDescription device = DeviceDescription::current();
  LayerDescription layer;
  layer.n = n;
  layer.k = k;
  layer.operand = operand;
  layer.batch_invariant = batch_invariant;
  const Registry& registry = Registry::global();
  const Dispatch d = registry.dispatch(registry.select(layer, device), device, m);
  return d.kernel ? fmt::format("{}/{}", d.kernel->name(), d.config) : "none";
}

// The bench's correctness guard on a bf16 output: a few units of 2^-8 at most, in relative
// Frobenius error against the fp64 reference rows.
constexpr double kCheckTolerance = 4e-3;

// Times one (layer, M) in both activation modes: our linear in W8A8 (full from bf16 and GEMM only
// on the pre-quantized activation) and in W8A16 (full, the bf16 x as it is), each checked against
// its own fp64 reference rows first, and the anchors; with `batch_invariant`, the full linear of
// both modes in the batch-invariant mode too; with --all-configs, the configs `sweep` takes
// (add_sweep_figures, which also fills `wrong_w8a16_configs`).
json bench_figure(const std::string& name, const LayerWeights& w, std::int64_t m,
                  bench::Anchors& anchors, const Ceilings& ceil, double tri_mx,
                  const bench::Timing& timing, const SweepFilter& sweep, bool batch_invariant,
                  cudaStream_t stream, json& wrong_w8a16_configs) {
  const std::int64_t n = w.n, k = w.k, mp = bench::pad16(m);
  const FigureBuffers b(m, n, k, stream);
  const DeviceMemory &x = b.x, &xq = b.xq, &xs = b.xs, &out = b.out;
  const TensorView &xv = b.xv, &ov = b.ov;
  const QuantizedActivation xa = b.quantized();
  // Each mode named, and not batch-invariant: the environment's MXLINEAR_ACTIVATION and
  // MXLINEAR_BATCH_INVARIANT would otherwise time another mode than the row's kernel names.
  const LinearOptions w8a8{ActivationMode::kW8A8, false}, w8a16{ActivationMode::kW8A16, false};
  linear(xa, w.view(0), std::nullopt, ov, stream, {}, w8a8);
  cuda(cudaStreamSynchronize(stream), "sync");
  const ReferenceRows ref = reference_rows(w, xq, xs, m);
  const double err = check_rows(ref, out, n);
  const bool ok = err <= kCheckTolerance;
  json row = {{"layer", name},
              {"n", n},
              {"k", k},
              {"m", m},
              {"kernel", dispatch_name(n, k, m, ActivationOperand::kMx)},
              {"check_rel_error", err},
              {"check", ok ? "ok" : "WRONG"},
              {"kernel_w8a16", dispatch_name(n, k, m, ActivationOperand::kBf16)}};
  // W8A16 against its own reference: x as it is, where W8A8's reference quantizes it first.
  const ReferenceRows ref_w8a16 = reference_rows_w8a16(w, x, m);
  bool ok_w8a16 = false;
  if (const auto refusal = refusal_of([&] {
        const double err_w8a16 = checked_first_run(
            b, [&] { linear(xv, w.view(0), std::nullopt, ov, stream, b.work(), w8a16); }, ref_w8a16,
            stream);
        ok_w8a16 = err_w8a16 <= kCheckTolerance;
        row["check_w8a16_rel_error"] = err_w8a16;
      })) {
    // A layer no W8A16 kernel serves: the figure fails its check, and the W8A8 figures are
    // still timed.
    row["w8a16_error"] = *refusal;
  }
  row["check_w8a16"] = ok_w8a16 ? "ok" : "WRONG";
  const int calls = bench::rotation_calls(w.copies);
  const MedianOf median = [&](const std::function<void(int)>& f) {
    return bench::summarize(bench::time_graph(f, calls, 2, timing, stream));
  };
  const MedianPairOf median_pair = [&](const std::function<void(int)>& first,
                                       const std::function<void(int)>& second) {
    auto [first_us, second_us] = bench::time_graph_pair(first, second, calls, 2, timing, stream);
    return std::array<bench::Summary, 2>{bench::summarize(std::move(first_us)),
                                         bench::summarize(std::move(second_us))};
  };
  const FigureInputs inputs{w, b, ref, ref_w8a16, kCheckTolerance, median, median_pair, stream};
  const bench::Traffic t = bench::count_traffic(m, n, k, 2, false);
  row["floor_us"] = bench::floor_us(t, ceil.read_bytes_per_s, ceil.bf16_flops);
  {
    // A plain kernel that only reads the e4m3 weight bytes, launched the same way: the time that
    // launch gaps, the DRAM ramp and the tail leave at this size, which floor_us does not see.
    DeviceMemory sink(16);
    row["weight_stream_us"] = median([&](int i) {
                                bench::stream_read(w.view(i).data.data, w.data_bytes,
                                                   static_cast<unsigned*>(sink.ptr), stream);
                              }).median;
    // The same reads with each launch overlapping the one before (programmatic dependents that
    // wait for nothing): the per-call bar for the decode goals once launch gaps are hidden.
    row["weight_stream_overlapped_us"] =
        median([&](int i) {
          cuda(bench::stream_read_overlapped(w.view(i).data.data, w.data_bytes,
                                             static_cast<unsigned*>(sink.ptr), stream),
               "overlapped weight read");
        }).median;
    if (n % 64 == 0 && k % 1024 == 0 && k / 8 <= 768) {
      row["weight_tiles_us"] = median([&](int i) {
                                 bench::read_tiles(w.view(i).data.data, n, k, 8,
                                                   static_cast<unsigned*>(sink.ptr), stream);
                               }).median;
    }
  }
  if (ok) {
    // The call from bf16 may run another kernel (one that quantizes its tokens itself): it is
    // checked against the same reference before it is timed (the GPU quantizer is byte-exact).
    const double err_linear = checked_first_run(
        b, [&] { linear(xv, w.view(0), std::nullopt, ov, stream, b.work(), w8a8); }, ref, stream);
    row["check_linear_rel_error"] = err_linear;
    row["check_linear"] = err_linear <= kCheckTolerance ? "ok" : "WRONG";
  }
  if (ok && row["check_linear"] == "ok") {
    const Workspace workspace = b.work();
    const auto full =
        median([&](int i) { linear(xv, w.view(i), std::nullopt, ov, stream, workspace, w8a8); });
    // With the workspace, as an engine's captured hot path calls it. Without one the prefill
    // kernel's scratch would be allocated and freed on the stream around every call (graph
    // memory nodes), and timed with it.
    const auto gemm =
        median([&](int i) { linear(xa, w.view(i), std::nullopt, ov, stream, workspace, w8a8); });
    row["linear_us"] = full.median;
    row["linear_spread"] = full.spread();
    row["gemm_us"] = gemm.median;
    row["gemm_spread"] = gemm.spread();
    row["gemm_tb_s"] = t.bytes / gemm.median / 1e6;
    row["gemm_tflop_s"] = t.flops / gemm.median / 1e6;
    if (m >= 8) {
      // The prefill kernel's activation pre-pass alone: part of every prefill gemm_us.
      DeviceMemory prepass_out(static_cast<std::size_t>(mp * k) * 2);
      row["prefill_prepass_us"] =
          median([&](int) { run_prefill_activation_prepass(xa, prepass_out.ptr, stream); }).median;
    }
  }
  if (ok_w8a16) {
    // The full W8A16 linear with the workspace, as linear_us: it reads the bf16 x, not the
    // e4m3 one, so its traffic counts a 16-bit activation.
    const Workspace workspace = b.work();
    const auto full =
        median([&](int i) { linear(xv, w.view(i), std::nullopt, ov, stream, workspace, w8a16); });
    row["w8a16_us"] = full.median;
    row["w8a16_spread"] = full.spread();
    row["w8a16_tb_s"] = bench::count_traffic(m, n, k, 2, true).bytes / full.median / 1e6;
  }
  if (batch_invariant) {
    row["kernel_invariant"] = dispatch_name(n, k, m, ActivationOperand::kMx, true);
    row["kernel_invariant_w8a16"] = dispatch_name(n, k, m, ActivationOperand::kBf16, true);
    add_invariant_figures(row, inputs);
  }
  if (ok || ok_w8a16 || row.contains("invariant_us") || row.contains("invariant_w8a16_us")) {
    row["rotation_copies"] = w.copies;
    row["calls_per_graph"] = calls;
  }
  try {
    const auto bf16 = median([&](int i) {
      anchors.bf16_gemm(x.ptr, w.bf16_copy(i), out.ptr, static_cast<int>(m), static_cast<int>(n),
                        static_cast<int>(k), stream);
    });
    row["cublas_bf16_us"] = bf16.median;
    const auto fp8 = median([&](int i) {
      anchors.fp8_gemm(xq.ptr, w.view(i).data.data, out.ptr, static_cast<int>(mp),
                       static_cast<int>(n), static_cast<int>(k), stream);
    });
    row["cublaslt_fp8_tensor_us"] = fp8.median;
    row["fp8_m_padded_to"] = mp;
  } catch (const std::exception& e) {
    row["anchor_error"] = e.what();
    (void)cudaGetLastError();
  }
  try {
    // The first call builds cuBLASLt's plan and its scale buffers, which capture forbids.
    anchors.fp8_block_gemm(xq.ptr, w.view(0).data.data, out.ptr, static_cast<int>(mp),
                           static_cast<int>(n), static_cast<int>(k), stream);
    const auto block = median([&](int i) {
      anchors.fp8_block_gemm(xq.ptr, w.view(i).data.data, out.ptr, static_cast<int>(mp),
                             static_cast<int>(n), static_cast<int>(k), stream);
    });
    row["cublaslt_fp8_block_us"] = block.median;
  } catch (const std::exception& e) {
    row["fp8_block_error"] = e.what();
    (void)cudaGetLastError();
  }
  if (sweep.all_configs && (ok || ok_w8a16)) {
    add_sweep_figures(row, sweep, inputs, ok, ok_w8a16, wrong_w8a16_configs);
  }
  if (!std::isnan(tri_mx)) row["tri_mx_us"] = tri_mx;
  return row;
}

// Writes `text` to `path`; an error names the option.
void write_output(std::string_view option, const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) {
    throw Error(ErrorCode::kInvalidArgument, std::string(option),
                fmt::format("bench: {} is '{}', which could not be written", option,
                            detail::for_display(path)));
  }
}

int run_bench(const BenchOptions& o) {
  SweepFilter sweep{o.all_configs, o.sweep_kernels, nullptr, o.batch_invariant};
  if (!o.sweep_configs.empty()) {
    sweep.configs = std::make_unique<ConfigPattern>(o.sweep_configs);
    if (!sweep.configs->error().empty()) {
      fmt::print(stderr,
                 "mxlinear bench: --sweep-configs is '{}', not a valid regex (POSIX extended): "
                 "{}\n",
                 detail::for_display(o.sweep_configs), sweep.configs->error());
      return kExitInvalid;
    }
  }
  for (const std::string& name : o.sweep_kernels) (void)require_kernel("--sweep-kernels", name);
  // The inputs and outputs first: a bad one is reported with or without a GPU.
  if (!o.json_path.empty()) require_writable_path("--json", o.json_path);
  if (!o.markdown_path.empty()) require_writable_path("--markdown", o.markdown_path);
  const auto tri_mx = bench::load_tri_mx(o.anchors);
  const std::vector<ModelLayer> layers = load_model(o.model);
  if (!gpu_available()) {
    fmt::print(stderr, "mxlinear bench: SKIPPED: no sm_90 GPU; nothing to time\n");
    return kExitSkipped;
  }
  cudaDeviceProp prop{};
  int device = 0;
  cuda(cudaGetDevice(&device), "device");
  cuda(cudaGetDeviceProperties(&prop, device), "properties");
  const auto l2 = static_cast<std::size_t>(prop.l2CacheSize);
  cudaStream_t stream;
  cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  bench::Anchors anchors;
  const bench::Timing timing{o.replays, o.warm_ms / 1000.0};
  const Ceilings ceil = measure_ceilings(anchors, timing.warm_seconds, stream);
  json timing_doc = json::object();
  timing_doc["replays"] = o.replays;
  timing_doc["warm_ms"] = o.warm_ms;
  json timing_holder = json::object();
  timing_holder["timing"] = timing_doc;
  fmt::print(
      "mxlinear bench on {} ({} SMs, L2 {} MiB); cuBLASLt FP8 runs with M padded to 16\n"
      "{}\n"
      "ceilings: read {:.2f} TB/s, cuBLAS bf16 "
      "{:.0f} TFLOP/s, cuBLASLt FP8 {:.0f} TFLOP/s\n",
      prop.name, prop.multiProcessorCount, l2 >> 20, bench::timing_note(timing_holder),
      ceil.read_bytes_per_s / 1e12, ceil.bf16_flops / 1e12, ceil.fp8_flops / 1e12);
  int driver = 0, runtime = 0;
  cuda(cudaDriverGetVersion(&driver), "driver version");
  cuda(cudaRuntimeGetVersion(&runtime), "runtime version");
  json doc = {{"gpu", prop.name},
              {"versions",
               {{"driver_cuda", fmt::format("{}.{}", driver / 1000, (driver % 1000) / 10)},
                {"cuda_runtime", fmt::format("{}.{}", runtime / 1000, (runtime % 1000) / 10)},
                {"cublas", bench::cublas_version()},
                {"mxlinear", std::string(mxlinear::version())}}},
              {"sms", prop.multiProcessorCount},
              {"l2_bytes", l2},
              {"method",
               "weights rotate through copies >= 3x L2; one CUDA graph of >= 8 calls per "
               "figure; median of replays; our calls with a workspace; cuBLASLt FP8 with M "
               "padded to 16"},
              {"timing", timing_doc},
              {"ceilings",
               {{"read_tb_s", ceil.read_bytes_per_s / 1e12},
                {"bf16_tflop_s", ceil.bf16_flops / 1e12},
                {"fp8_tflop_s", ceil.fp8_flops / 1e12}}},
              // false until the run ends: a report written after each figure holds the figures
              // timed so far.
              {"complete", false},
              {"rows", json::array()},
              {"geomeans", json::array()}};
  auto write_json = [&] {
    if (!o.json_path.empty()) write_output("--json", o.json_path, doc.dump(2) + "\n");
  };
  // The W8A16 configs of the sweep that failed their check, by the index of their figure's row.
  std::map<std::size_t, json> w8a16_configs_wrong;
  if (!o.ceilings_only) {
    std::vector<std::pair<std::int64_t, std::int64_t>> shapes;
    std::map<std::pair<std::int64_t, std::int64_t>, std::string> names;
    for (const auto& l : layers) {
      if (names.emplace(std::make_pair(l.n, l.k), l.name).second) shapes.push_back({l.n, l.k});
    }
    // W8A8 figures (linear, gemm and the ratios to it), then W8A16's (w8a16 and its ratio to
    // cuBLAS bf16, a16_xbf16); the kernel column names W8A8's kernel/config, then W8A16's.
    fmt::print(
        "{:<28} {:>10} {:>5} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7} {:>7} {:>7} {:>6} {:>9} {:>9} "
        "{:>6}  {}\n",
        "layer", "NxK", "M", "linear", "gemm", "cublas16", "lt_fp8", "tri_mx", "x_bf16", "x_fp8",
        "x_tri", "check", "w8a16", "a16_xbf16", "a16chk",
        "kernel/config, W8A16 kernel/config (times in us)");
    std::uint64_t seed = 1;
    for (const auto& [n, k] : shapes) {
      LayerWeights w(n, k, l2, seed++, stream);
      for (std::int64_t m : o.ms) {
        const auto it = tri_mx.find({n, k, m});
        json wrong_w8a16_configs = json::object();
        json row =
            bench_figure(names[{n, k}], w, m, anchors, ceil, it == tri_mx.end() ? NAN : it->second,
                         timing, sweep, o.batch_invariant, stream, wrong_w8a16_configs);
        const double g = bench::value_or_nan(row, "gemm_us");
        const double a16 = bench::value_or_nan(row, "w8a16_us");
        fmt::print(
            "{:<28} {:>10} {:>5} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>8.1f} {:>7.2f} {:>7.2f} "
            "{:>7.2f} {:>6} {:>9.2f} {:>9.2f} {:>6}  {}, {}{}{}\n",
            names[{n, k}], fmt::format("{}x{}", n, k), m, bench::value_or_nan(row, "linear_us"), g,
            bench::value_or_nan(row, "cublas_bf16_us"),
            bench::value_or_nan(row, "cublaslt_fp8_tensor_us"),
            bench::value_or_nan(row, "tri_mx_us"), bench::value_or_nan(row, "cublas_bf16_us") / g,
            bench::value_or_nan(row, "cublaslt_fp8_tensor_us") / g,
            bench::value_or_nan(row, "tri_mx_us") / g, row["check"].get<std::string>(), a16,
            bench::value_or_nan(row, "cublas_bf16_us") / a16, row["check_w8a16"].get<std::string>(),
            row["kernel"].get<std::string>(), row["kernel_w8a16"].get<std::string>(),
            row.contains("anchor_error")
                ? " anchor error: " + row["anchor_error"].get<std::string>()
                : "",
            row.contains("w8a16_error") ? " W8A16 error: " + row["w8a16_error"].get<std::string>()
                                        : "");
        fmt::print("{}", invariant_text(row));
        if (!wrong_w8a16_configs.empty()) {
          w8a16_configs_wrong[doc["rows"].size()] = wrong_w8a16_configs;
        }
        std::fflush(stdout);
        doc["rows"].push_back(row);
        write_json();  // a run cut short keeps what it timed
      }
    }
    for (std::int64_t m : o.ms) {
      std::vector<double> bf16, bf16_linear, fp8, tri, bf16_w8a16, invariant, invariant_w8a16;
      for (const json& r : doc["rows"]) {
        if (r["m"] != m) continue;
        const double g = bench::value_or_nan(r, "gemm_us");
        bf16.push_back(bench::value_or_nan(r, "cublas_bf16_us") / g);
        // From the bf16 activation, as cuBLAS bf16 starts: the quantization included.
        bf16_linear.push_back(bench::value_or_nan(r, "cublas_bf16_us") /
                              bench::value_or_nan(r, "linear_us"));
        fp8.push_back(bench::value_or_nan(r, "cublaslt_fp8_tensor_us") / g);
        tri.push_back(bench::value_or_nan(r, "tri_mx_us") / g);
        bf16_w8a16.push_back(bench::value_or_nan(r, "cublas_bf16_us") /
                             bench::value_or_nan(r, "w8a16_us"));
        invariant.push_back(bench::invariant_over_default(r, "invariant", "linear_us"));
        invariant_w8a16.push_back(bench::invariant_over_default(r, "invariant_w8a16", "w8a16_us"));
      }
      json g = {{"m", m}, {"rows", bf16.size()}, {"rows_left_out", json::object()}};
      // A ratio's geomean, and how many of the M's rows it lacks (a failed check, an anchor
      // error): a geomean over fewer rows says so instead of passing for the whole set.
      const auto add = [&g](const char* key, const std::vector<double>& values) {
        const bench::Geomean mean = bench::geomean_of(values);
        g[key] = mean.value;
        if (mean.count < values.size()) g["rows_left_out"][key] = values.size() - mean.count;
      };
      const auto text = [&g](const char* key) { return bench::ratio_text(g[key].get<double>()); };
      add("vs_cublas_bf16", bf16);
      add("linear_vs_cublas_bf16", bf16_linear);
      add("vs_cublaslt_fp8", fp8);
      add("vs_tri_mx", tri);
      add("w8a16_vs_cublas_bf16", bf16_w8a16);
      std::string invariant_ratios;
      if (o.batch_invariant) {
        // Above 1: the batch-invariant mode is that much slower than the default one.
        add("invariant_over_default", invariant);
        add("invariant_w8a16_over_default", invariant_w8a16);
        invariant_ratios =
            fmt::format("; batch-invariant / default: W8A8 {}, W8A16 {}",
                        text("invariant_over_default"), text("invariant_w8a16_over_default"));
      }
      doc["geomeans"].push_back(g);
      fmt::print(
          "geomean M={:>5}: x cuBLAS bf16 {} (from bf16 {}), x cuBLASLt FP8 {}, x tri_mx {}; "
          "W8A16 x cuBLAS bf16 {}{}\n",
          m, text("vs_cublas_bf16"), text("linear_vs_cublas_bf16"), text("vs_cublaslt_fp8"),
          text("vs_tri_mx"), text("w8a16_vs_cublas_bf16"), invariant_ratios);
      for (const auto& [key, left_out] : g["rows_left_out"].items()) {
        fmt::print("  {}: {} of {} rows left out (no figure)\n", key, left_out.get<std::size_t>(),
                   bf16.size());
      }
    }
    doc["quantize"] = json::array();
    std::set<std::int64_t> ks;
    for (const auto& [n, k] : shapes) ks.insert(k);
    for (std::int64_t k : ks) {
      for (std::int64_t m : o.ms) {
        // The goal is stated for M >= 512; smaller activations would need thousands of copies
        // to rotate through L2, i.e. graphs of thousands of nodes.
        if (m < 512) continue;
        json q = bench_quantize(m, k, l2, ceil, timing, stream);
        fmt::print(
            "quantize M={:>5} K={:>5}: {:8.2f} us, read {:.2f} TB/s = {:.0f}% of the read "
            "ceiling; read + written {:.2f} TB/s = {:.0f}%; the same bytes copied without "
            "arithmetic {:.2f} us\n",
            m, k, q["us"].get<double>(), q["read_tb_s"].get<double>(),
            100 * q["fraction_of_read_ceiling"].get<double>(), q["moved_tb_s"].get<double>(),
            100 * q["moved_fraction_of_read_ceiling"].get<double>(),
            q["narrowing_copy_us"].get<double>());
        doc["quantize"].push_back(q);
      }
    }
    if (o.step) {
      doc["step"] = json::array();
      for (std::int64_t m : o.step_ms) {
        json row = bench_step(layers, m, anchors, timing, stream);
        fmt::print(
            "decode step M={}: mxlinear {:.3f} ms, cuBLAS bf16 {:.3f} ms, cuBLASLt FP8 {:.3f} "
            "ms, only reading the weights {:.3f} ms ({:.3f} overlapped, {:.3f} waiting for the "
            "previous kernel, {:.3f} with half the reads after the wait) ({} GEMMs){}\n",
            m, bench::value_or_nan(row, "mxlinear_ms"), bench::value_or_nan(row, "cublas_bf16_ms"),
            bench::value_or_nan(row, "cublaslt_fp8_tensor_ms"),
            bench::value_or_nan(row, "weight_stream_ms"),
            bench::value_or_nan(row, "weight_stream_overlapped_ms"),
            bench::value_or_nan(row, "weight_stream_waited_ms"),
            bench::value_or_nan(row, "weight_stream_half_after_wait_ms"), row["gemms"].get<int>(),
            row.contains("anchor_error")
                ? " anchor error: " + row["anchor_error"].get<std::string>()
                : "");
        doc["step"].push_back(row);
      }
    }
  }
  cudaStreamDestroy(stream);
  doc["complete"] = true;
  const std::vector<std::string> problems = bench::schema_errors(doc);
  for (const std::string& p : problems) fmt::print(stderr, "mxlinear bench: report: {}\n", p);
  write_json();
  if (!o.markdown_path.empty() && !o.ceilings_only) {
    write_output("--markdown", o.markdown_path, bench::markdown_report(doc));
  }
  int wrong = 0;
  for (std::size_t i = 0; i < doc["rows"].size(); ++i) {
    const json& r = doc["rows"][i];
    if (r.contains("configs_wrong")) {
      fmt::print(stderr, "mxlinear bench: {} M={}: configs failed the check: {}\n",
                 r["layer"].get<std::string>(), r["m"].get<std::int64_t>(),
                 r["configs_wrong"].dump());
    }
    const auto w8a16_wrong = w8a16_configs_wrong.find(i);
    if (w8a16_wrong != w8a16_configs_wrong.end()) {
      fmt::print(stderr, "mxlinear bench: {} M={}: W8A16 configs failed the check: {}\n",
                 r["layer"].get<std::string>(), r["m"].get<std::int64_t>(),
                 w8a16_wrong->second.dump());
    }
    if (r.contains("invariant_rows_equal") && !r["invariant_rows_equal"].get<bool>()) {
      fmt::print(stderr,
                 "mxlinear bench: {} M={}: batch-invariant mode: rows run alone gave other bits\n",
                 r["layer"].get<std::string>(), r["m"].get<std::int64_t>());
    }
    // Either mode's check, a config of either mode's sweep, or the batch-invariant mode's checks.
    const bool failed =
        r["check"] != "ok" || r["check_w8a16"] != "ok" || r.value("check_linear", "ok") != "ok" ||
        r.contains("configs_wrong") || w8a16_wrong != w8a16_configs_wrong.end() ||
        r.value("check_invariant", "ok") != "ok" ||
        r.value("check_invariant_w8a16", "ok") != "ok" || !r.value("invariant_rows_equal", true);
    wrong += failed ? 1 : 0;
  }
  if (wrong) fmt::print(stderr, "mxlinear bench: {} figures failed the correctness check\n", wrong);
  return problems.empty() && wrong == 0 ? kExitOk : kExitFailed;
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Time the linear per layer shape and M on the GPU in W8A8 and in W8A16 (with "
      "--batch-invariant also in the batch-invariant mode), each mode checked against fp64 first");
  cmd->add_option("--model", o->model, "builtin:<name> or a CSV of name,N,K,count");
  cmd->add_option("--m", o->ms, "token counts")
      ->delimiter(',')
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  cmd->add_flag("--step", o->step, "also time the decode-step replay of every layer instance");
  cmd->add_option("--step-m", o->step_ms, "token counts for --step")
      ->delimiter(',')
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  cmd->add_option("--sweep-kernels", o->sweep_kernels,
                  "with --all-configs: only these kernels' configs (e.g. decode, prefill_a16)")
      ->delimiter(',');
  cmd->add_option("--sweep-configs", o->sweep_configs,
                  "with --all-configs: only the configs whose name this POSIX extended regex "
                  "matches (e.g. 't160|t192', 'overlap$')");
  cmd->add_flag("--all-configs", o->all_configs,
                "also time every config of every GPU kernel per figure (the tuner's sweep, and "
                "with --batch-invariant every config the mode can select): W8A8 kernels' GEMM "
                "alone and as the full linear, W8A16 kernels' (*_a16) as the full linear");
  cmd->add_flag("--batch-invariant", o->batch_invariant,
                "also time each figure's full linear from bf16 in the batch-invariant mode (each "
                "output row's bits independent of M and of the row's place in the batch; one "
                "kernel per layer, K summed in parts that K fixes), W8A8 and W8A16, each checked "
                "against fp64 first (invariant_us, invariant_w8a16_us, against the default "
                "mode's same call, timed in alternation with it: invariant_default_us, "
                "invariant_w8a16_default_us), and check that the first and last min(M, 8) rows "
                "come out with the same bits when run alone (invariant_rows_equal)");
  cmd->add_flag("--ceilings", o->ceilings_only, "only measure read bandwidth and bf16/FP8 peaks");
  cmd->add_option("--anchors", o->anchors,
                  "CSV of anchor figures measured on an H200 (cuBLAS bf16, cuBLASLt FP8 and "
                  "Triton tl.dot_scaled microseconds per layer and M), e.g. "
                  "bench/anchors/h200-2026-11-30.csv; adds the tri_mx column (default: none)");
  cmd->add_option("--json", o->json_path,
                  "write the results as JSON here (rewritten after each figure, with \"complete\": "
                  "false until the run ends)");
  cmd->add_option("--markdown", o->markdown_path, "write a Markdown report here");
  cmd->add_option("--replays", o->replays, "timed graph replays per figure")
      ->check(CLI::Range(3, 1000));
  cmd->add_option("--warm-ms", o->warm_ms,
                  "replay each figure for at least this long before timing it, so the clocks "
                  "settle where a sustained load runs them (0: burst figures)")
      ->check(CLI::Range(0, 60000));
  cmd->callback([o, &exit_code] { exit_code = run_bench(*o); });
}

}  // namespace mxlinear::cli
