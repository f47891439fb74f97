#include "tune_command.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_layer.hpp"
#include "cli_support.hpp"
#include "device_data.hpp"
#include "device_memory.hpp"
#include "exit_codes.hpp"
#include "harness.hpp"
#include "host/log.hpp"
#include "host/registry/registry.hpp"
#include "host/user_file.hpp"
#include "mxlinear/error.hpp"
#include "mxlinear/linear.hpp"
#include "mxlinear/quantize.hpp"
#include "mxlinear/version.hpp"
#include "tune_plan.hpp"

namespace mxlinear::cli {
namespace {

// The bench's correctness guard for a bf16 output: a config above it is never a row.
constexpr double kGuard = 4e-3;

struct TuneOptions {
  std::string model = "builtin:minimax-m3.1-flash-tp4";
  // Every M bucket to 8192: a bucket without a row takes the cost model's choice.
  std::vector<std::int64_t> ms = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
  std::vector<std::string> kernels;  // empty: every GPU kernel
  std::string out;
  std::string timings;  // also every config's time, appended to this CSV
  int replays = 5;
  bool restart = false;
  std::string activation = "mx";  // the mode whose kernels are tuned: mx (W8A8) or bf16 (W8A16)
  bool w8a16() const { return activation == "bf16"; }
};

void cuda(cudaError_t e, const char* what) { cuda_or_throw(e, what); }

// A config that may serve M rows of the layer: one of the chosen kernels, worth timing at M,
// and able to run it.
struct Candidate {
  const Kernel* kernel;
  std::string config;
};
std::vector<Candidate> candidates(const TuneOptions& o, const DeviceDescription& device,
                                  std::int64_t n, std::int64_t k, std::int64_t m) {
  LayerDescription layer;
  layer.n = n;
  layer.k = k;
  if (o.w8a16()) layer.operand = ActivationOperand::kBf16;
  std::vector<Candidate> out;
  for (const auto& kernel : Registry::global().kernels()) {
    const bool chosen = o.kernels.empty() ? !is_cpu_reference(*kernel)
                                          : std::find(o.kernels.begin(), o.kernels.end(),
                                                      kernel->name()) != o.kernels.end();
    if (!chosen || !kernel->is_supported(device).ok() || !kernel->can_implement(layer).ok()) {
      continue;
    }
    for (const std::string& config : kernel->configs()) {
      if (kernel->worth_sweeping(m, config) && kernel->can_run(m, k, config).ok()) {
        out.push_back({kernel.get(), config});
      }
    }
  }
  return out;
}

// Appends `text` to the file `option` names.
void append(const char* option, const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::app);
  file << text;
  file.close();
  if (!file) {
    throw Error(ErrorCode::kInvalidArgument, option,
                fmt::format("tune: {} is '{}', which could not be written", option,
                            detail::for_display(path)));
  }
}

int run_tune(const TuneOptions& o) {
  for (const std::string& name : o.kernels) {
    const Kernel& kernel = require_kernel("--kernels", name);
    if ((kernel.activation_mode() == ActivationMode::kW8A16) != o.w8a16()) {
      throw Error(ErrorCode::kInvalidArgument, "--kernels",
                  fmt::format("tune: --kernels names '{}', which serves {} calls; --activation {} "
                              "tunes the {} kernels",
                              name, o.w8a16() ? "W8A8" : "W8A16", o.activation,
                              o.w8a16() ? "W8A16 (*_a16)" : "W8A8"));
    }
  }
  // A file an option names, as a run that resumes it finds it: read only where it exists and
  // the run resumes (no --restart), and refused where it could not be read.
  const auto resumed = [&o](std::string_view option, const std::string& path) {
    detail::UserFile file;
    if (require_writable_path(option, path) && !o.restart) {
      file = detail::read_user_file(path, TunedTable::kMaxFileBytes);
      refuse_unreadable_existing(option, path, file.problem);
    }
    return file;
  };
  const detail::UserFile existing = resumed("--out", o.out);
  const detail::UserFile old_timings =
      o.timings.empty() ? detail::UserFile{} : resumed("--timings", o.timings);
  const std::vector<ModelLayer> layers = load_model(o.model);
  const std::vector<TuneFigure> figures = tune_figures(layers, o.ms);
  if (!gpu_available()) {
    fmt::print(stderr, "mxlinear tune: SKIPPED: no sm_90 GPU; nothing to time\n");
    return kExitSkipped;
  }
  const DeviceDescription device = DeviceDescription::current();
  const TableContext context = table_context(Registry::global().kernels());
  // Resume: the rows an earlier run of the same table wrote are kept and not timed again.
  std::set<FigureKey> done;
  if (!o.restart && existing.problem.empty() && !existing.text.empty()) {
    done = figures_in_table(existing.text, device.arch, device.sms, o.w8a16(), context);
  } else {
    std::ofstream(o.out, std::ios::binary | std::ios::trunc).close();
    append("--out", o.out,
           tuned_table_header(
               fmt::format("mxlinear tune --model {} --activation {} on one {} ({} SMs), "
                           "mxlinear {}",
                           o.model, o.activation, device.name, device.sms, mxlinear::version())));
  }
  if (!o.timings.empty() &&
      (o.restart || !old_timings.problem.empty() || old_timings.text.empty())) {
    std::ofstream(o.timings, std::ios::binary | std::ios::trunc).close();
    append("--timings", o.timings, timings_header());
  }
  // Each figure still to time, with the configs it times.
  std::vector<std::pair<TuneFigure, std::vector<Candidate>>> todo;
  std::int64_t total = 0;
  for (const TuneFigure& f : figures) {
    if (done.count({f.n, f.k, f.m_column()}) == 0) {
      todo.emplace_back(f, candidates(o, device, f.n, f.k, f.m));
      total += static_cast<std::int64_t>(todo.back().second.size()) + 1;  // + the untuned choice
    }
  }
  fmt::print("mxlinear tune: {} figures, {} already in {}, {} configs to time\n", figures.size(),
             figures.size() - todo.size(), detail::for_display(o.out), total);
  std::fflush(stdout);

  cudaDeviceProp prop{};
  int ordinal = 0;
  cuda(cudaGetDevice(&ordinal), "device");
  cuda(cudaGetDeviceProperties(&prop, ordinal), "properties");
  cudaStream_t stream;
  cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const bench::Timing timing{o.replays, 0.0};
  // The choice without any table, made among the same kernel instances as the candidates: what
  // the tuned row is measured against.
  const Registry untuned_registry(Registry::global().kernels(), TunedTable{},
                                  Environment::from_process());
  const auto start = std::chrono::steady_clock::now();
  std::int64_t timed = 0;
  std::vector<TuneOutcome> outcomes;
  std::unique_ptr<LayerWeights> w;
  std::uint64_t seed = 1;
  for (const auto& [f, cs] : todo) {
    if (!w || w->n != f.n || w->k != f.k) {
      w.reset();
      w = std::make_unique<LayerWeights>(f.n, f.k, static_cast<std::size_t>(prop.l2CacheSize),
                                         seed++, stream);
    }
    const std::int64_t m = f.m, n = f.n, k = f.k;
    const FigureBuffers b(m, n, k, stream);
    cuda(cudaStreamSynchronize(stream), "sync");
    const ReferenceRows ref =
        o.w8a16() ? reference_rows_w8a16(*w, b.x, m) : reference_rows(*w, b.xq, b.xs, m);
    const LinearOptions options{.activation =
                                    o.w8a16() ? ActivationMode::kW8A16 : ActivationMode::kW8A8};
    // The full linear from bf16 with this kernel and config: checked, then timed; nullopt where
    // its output fails the guard.
    auto measure = [&](const Kernel& kernel,
                       const std::string& config) -> std::optional<std::pair<double, double>> {
      const auto call = [&](int i) {
        linear_with(kernel, config, b.xv, w->view(i), std::nullopt, b.ov, stream, b.work(),
                    options);
      };
      const double err = checked_first_run(
          b, [&] { call(0); }, ref, stream);
      ++timed;
      if (!(err <= kGuard)) {
        fmt::print(stderr, "mxlinear tune: {}/{} failed the check at {} x {} x {} ({:.2e})\n",
                   kernel.name(), config, m, n, k, err);
        if (!o.timings.empty()) {
          append("--timings", o.timings,
                 timing_line(f, std::string(kernel.name()), config, 0, err / kGuard, false));
        }
        return std::nullopt;
      }
      const double us = bench::summarize(bench::time_graph(call, bench::rotation_calls(w->copies),
                                                           2, timing, stream))
                            .median;
      if (!o.timings.empty()) {
        append("--timings", o.timings,
               timing_line(f, std::string(kernel.name()), config, us, err / kGuard, true));
      }
      return std::make_pair(us, err);
    };
    LayerDescription layer;
    layer.n = n;
    layer.k = k;
    if (o.w8a16()) layer.operand = ActivationOperand::kBf16;
    // No kernel at all where the environment disables every one that could run the layer.
    const Dispatch untuned =
        untuned_registry.dispatch(untuned_registry.select(layer, device), device, m);
    std::optional<std::pair<double, double>> untuned_time;
    if (untuned.kernel) untuned_time = measure(*untuned.kernel, untuned.config);
    std::optional<Candidate> best;
    double best_us = 0, best_err = 0;
    for (const Candidate& c : cs) {
      const auto t = measure(*c.kernel, c.config);
      if (t && (!best || t->first < best_us)) {
        best = c;
        best_us = t->first;
        best_err = t->second;
      }
    }
    // The untuned choice is one of the candidates, timed twice: its faster time counts, so
    // clock drift between the two never makes the row slower than the choice it replaces.
    const auto untuned_candidate = std::find_if(cs.begin(), cs.end(), [&](const Candidate& c) {
      return c.kernel == untuned.kernel && c.config == untuned.config;
    });
    if (untuned_time && untuned_candidate != cs.end() && (!best || untuned_time->first < best_us)) {
      best = *untuned_candidate;
      best_us = untuned_time->first;
      best_err = untuned_time->second;
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!best) {
      fmt::print(stderr, "mxlinear tune: {} x {} M = {}: no config passed the check\n", n, k, m);
      continue;
    }
    append("--out", o.out,
           tuned_row(device.arch, device.sms, f, std::string(best->kernel->name()), best->config,
                     best_us, best_err / kGuard, context));
    const std::string best_name = fmt::format("{}/{}", best->kernel->name(), best->config);
    const std::string untuned_name =
        untuned.kernel ? fmt::format("{}/{}", untuned.kernel->name(), untuned.config) : "none";
    if (untuned_time)
      outcomes.push_back({f, best_name, best_us, untuned_name, untuned_time->first});
    fmt::print("[{}/{} configs, ETA {}] {} x {} M = {}: {} {:.2f} us (untuned {} {})\n", timed,
               total, duration_text(eta_seconds(elapsed, timed, total)), n, k, f.m_column(),
               best_name, best_us, untuned_name,
               untuned_time ? fmt::format("{:.2f} us", untuned_time->first) : "failed");
    std::fflush(stdout);
  }
  cudaStreamDestroy(stream);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("{}tuned in {}; load the table with MXLINEAR_TUNED_TABLES={}\n",
             tune_summary(outcomes), duration_text(elapsed), detail::for_display(o.out));
  return kExitOk;
}

}  // namespace

void add_tune_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<TuneOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tune",
      "Time every config that can run each layer shape and M on this GPU and write the fastest "
      "as a tuned table; rerun with the same --out to resume");
  cmd->add_option("--model", o->model, "builtin:<name> or a CSV of name,N,K,count");
  cmd->add_option("--m", o->ms,
                  "token counts: a power of two gives a row for its bucket, another M a row for "
                  "that M only")
      ->delimiter(',')
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  cmd->add_option("--kernels", o->kernels,
                  "only these kernels' configs (default: every GPU kernel)")
      ->delimiter(',');
  cmd->add_option("--out", o->out, "the tuned table (CSV) to write, or to resume")->required();
  cmd->add_option("--timings", o->timings,
                  "also append every config's time to this CSV (layer,n,k,m,kernel,config,us,"
                  "error_ratio; us empty for a config that failed the check)");
  cmd->add_option("--replays", o->replays, "timed graph replays per config")
      ->check(CLI::Range(3, 1000));
  cmd->add_flag("--restart", o->restart, "start --out afresh instead of resuming it");
  cmd->add_option("--activation", o->activation,
                  "the mode to tune: mx (W8A8) or bf16 (W8A16, its *_a16 kernels); one table "
                  "can hold rows of both")
      ->check(CLI::IsMember({"mx", "bf16"}));
  cmd->callback([o, &exit_code] { exit_code = run_tune(*o); });
}

}  // namespace mxlinear::cli
