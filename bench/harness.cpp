#include "harness.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace mxlinear::bench {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

int rotation_copies(std::size_t weight_bytes, std::size_t l2_bytes, double factor) {
  if (weight_bytes == 0) return 1;
  const double needed = factor * static_cast<double>(l2_bytes) / static_cast<double>(weight_bytes);
  return std::max(2, static_cast<int>(std::ceil(needed)));
}

int rotation_calls(int copies) {
  constexpr int kMinCalls = 8;
  copies = std::max(copies, 1);
  return copies * ((kMinCalls + copies - 1) / copies);
}

Summary summarize(std::vector<double> samples) {
  Summary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  s.median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  s.min = samples.front();
  s.max = samples.back();
  return s;
}

Traffic count_traffic(std::int64_t m, std::int64_t n, std::int64_t k, std::size_t out_bytes,
                      bool bf16_activation) {
  const auto md = static_cast<double>(m), nd = static_cast<double>(n), kd = static_cast<double>(k);
  Traffic t;
  const double weights = nd * kd * (1.0 + 1.0 / 32.0);
  const double activation = bf16_activation ? md * kd * 2.0 : md * kd * (1.0 + 1.0 / 32.0);
  t.bytes = weights + activation + md * nd * static_cast<double>(out_bytes);
  t.flops = 2.0 * md * nd * kd;
  return t;
}

double floor_us(const Traffic& t, double bandwidth_bytes_per_s, double peak_flops_per_s) {
  return 1e6 * std::max(t.bytes / bandwidth_bytes_per_s, t.flops / peak_flops_per_s);
}

std::int64_t pad16(std::int64_t m) { return (m + 15) / 16 * 16; }

Geomean geomean_of(const std::vector<double>& values) {
  double log_sum = 0;
  std::size_t count = 0;
  for (double v : values) {
    if (v > 0) {
      log_sum += std::log(v);
      ++count;
    }
  }
  return {count ? std::exp(log_sum / static_cast<double>(count)) : 0.0, count};
}

double geomean(const std::vector<double>& values) { return geomean_of(values).value; }

std::string ratio_text(double geomean_value) {
  return geomean_value > 0 ? fmt::format("{:.2f}", geomean_value) : "n/a";
}

namespace {

// A graph of `calls` invocations of call(i) (i = 0..calls-1) captured from `stream`, instantiated;
// destroyed with it.
class CapturedGraph {
 public:
  CapturedGraph(const std::function<void(int)>& call, int calls, cudaStream_t stream) {
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
    try {
      for (int i = 0; i < calls; ++i) call(i);
    } catch (...) {
      cudaGraph_t broken;
      (void)cudaStreamEndCapture(stream, &broken);
      if (broken) cudaGraphDestroy(broken);
      throw;
    }
    check(cudaStreamEndCapture(stream, &graph_), "end capture");
    if (const cudaError_t e = cudaGraphInstantiate(&exec_, graph_, 0); e != cudaSuccess) {
      cudaGraphDestroy(graph_);
      check(e, "instantiate");
    }
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() {
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
  }
  void launch(cudaStream_t stream, const char* what) const {
    check(cudaGraphLaunch(exec_, stream), what);
  }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Replays `graphs` in turn, `warmup` rounds and then for timing.warm_seconds, and times
// timing.replays rounds: microseconds per call of each graph's replays, in round order. The timed
// replays are queued back to back behind the warmup, one event between each two, and waited for
// once: the host stays ahead of the GPU, so no replay's time includes the host's cost of launching
// it (a replay queued on an idle stream would count it: a few us a graph).
std::vector<std::vector<double>> time_rounds(const std::vector<const CapturedGraph*>& graphs,
                                             int calls, int warmup, const Timing& timing,
                                             cudaStream_t stream) {
  const auto round = [&](const char* what) {
    for (const CapturedGraph* g : graphs) g->launch(stream, what);
  };
  for (int i = 0; i < warmup; ++i) round("warmup");
  cudaEvent_t start;
  check(cudaEventCreate(&start), "event");
  if (timing.warm_seconds > 0) {
    // The host waits for the round before the newest, so the GPU never idles while it checks
    // the time.
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timing.warm_seconds);
    round("warm");
    check(cudaEventRecord(start, stream), "record");
    while (std::chrono::steady_clock::now() < until) {
      round("warm");
      check(cudaEventSynchronize(start), "warm sync");
      check(cudaEventRecord(start, stream), "record");
    }
  }
  const std::size_t replays = static_cast<std::size_t>(timing.replays) * graphs.size();
  std::vector<cudaEvent_t> marks(replays + 1);
  for (cudaEvent_t& e : marks) check(cudaEventCreate(&e), "event");
  check(cudaEventRecord(marks[0], stream), "record");
  for (std::size_t r = 0; r < replays; ++r) {
    graphs[r % graphs.size()]->launch(stream, "replay");
    check(cudaEventRecord(marks[r + 1], stream), "record");
  }
  check(cudaEventSynchronize(marks.back()), "sync");
  std::vector<std::vector<double>> per_call_us(graphs.size());
  for (std::size_t r = 0; r < replays; ++r) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, marks[r], marks[r + 1]), "elapsed");
    per_call_us[r % graphs.size()].push_back(1000.0 * ms / calls);
  }
  for (cudaEvent_t e : marks) cudaEventDestroy(e);
  cudaEventDestroy(start);
  return per_call_us;
}

}  // namespace

std::vector<double> time_graph(const std::function<void(int)>& call, int calls, int warmup,
                               const Timing& timing, cudaStream_t stream) {
  const CapturedGraph graph(call, calls, stream);
  return time_rounds({&graph}, calls, warmup, timing, stream)[0];
}

std::array<std::vector<double>, 2> time_graph_pair(const std::function<void(int)>& first,
                                                   const std::function<void(int)>& second,
                                                   int calls, int warmup, const Timing& timing,
                                                   cudaStream_t stream) {
  const CapturedGraph a(first, calls, stream), b(second, calls, stream);
  std::vector<std::vector<double>> t = time_rounds({&a, &b}, calls, warmup, timing, stream);
  return {std::move(t[0]), std::move(t[1])};
}

}  // namespace mxlinear::bench
