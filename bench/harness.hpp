// The benchmark method (docs/PERFORMANCE.md): weights rotate through copies that exceed L2,
// every figure is the median over replays of one CUDA graph of many calls.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mxlinear::bench {

// Copies of a weight set needed so that one pass over them is at least `factor` times L2.
int rotation_copies(std::size_t weight_bytes, std::size_t l2_bytes, double factor = 3.0);
// Calls one timed graph makes over `copies` rotating copies: at least 8, a whole number of
// rotations, so that a graph replayed back to back reads each copy again only after every other.
int rotation_calls(int copies);

struct Summary {
  double median = 0, min = 0, max = 0;
  double spread() const { return median > 0 ? (max - min) / median : 0; }  // (max-min)/median
};
Summary summarize(std::vector<double> samples);

// Bytes a linear must move at least: weights + weight scales + activation + output, where the
// activation is bf16 (quantized inside) or e4m3 + scales (pre-quantized).
struct Traffic {
  double bytes = 0;
  double flops = 0;
};
Traffic count_traffic(std::int64_t m, std::int64_t n, std::int64_t k, std::size_t out_bytes,
                      bool bf16_activation);

// The floor in microseconds: the larger of bytes / bandwidth and flops / peak.
double floor_us(const Traffic& t, double bandwidth_bytes_per_s, double peak_flops_per_s);

// The smallest multiple of 16 >= m (cuBLASLt FP8 needs it).
std::int64_t pad16(std::int64_t m);

// Geometric mean of the positive values (NaN is not), and how many it counted; 0 for none.
struct Geomean {
  double value = 0;
  std::size_t count = 0;
};
Geomean geomean_of(const std::vector<double>& values);
// geomean_of(values).value.
double geomean(const std::vector<double>& values);
// A geomean for people: "n/a" where geomean() found no values (0), else two decimals.
std::string ratio_text(double geomean_value);

// How a figure is timed: `replays` timed replays of its graph, after replaying it for at least
// `warm_seconds` more (0: only the fixed warmup launches). Warming lets the card's clocks settle
// where a sustained load runs them: the H200 runs large GEMMs under its 700 W power cap at
// 1.4-1.7 GHz, against 1.98 GHz in a short burst (docs/PERFORMANCE.md).
struct Timing {
  int replays = 10;
  double warm_seconds = 0.0;
};

// Captures `calls` invocations of call(i) (i = 0..calls-1) on `stream` into one graph, replays it
// `warmup` times and for timing.warm_seconds, then times timing.replays replays with events.
// Returns microseconds per call for each replay. call() must only enqueue work on the stream.
std::vector<double> time_graph(const std::function<void(int)>& call, int calls, int warmup,
                               const Timing& timing, cudaStream_t stream);

// time_graph for two calls whose times are compared: both graphs captured, then replayed in
// alternation (first, second, first, ...) through warmup, warming and timing, so both run at the
// same clocks and power draw. Timed one after the other, the second of two large GEMMs ran on a
// card the first had brought nearer its power cap. Microseconds per call of each replay of each.
std::array<std::vector<double>, 2> time_graph_pair(const std::function<void(int)>& first,
                                                   const std::function<void(int)>& second,
                                                   int calls, int warmup, const Timing& timing,
                                                   cudaStream_t stream);

}  // namespace mxlinear::bench
