// One benchmarked layer: its weights in every form the kernels and anchors take, and the fp64
// reference rows every config of a figure is checked against.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "device_memory.hpp"
#include "harness.hpp"
#include "mxlinear/linear.hpp"
#include "mxlinear/linear_types.hpp"

namespace mxlinear::cli {

// One layer shape's weights in every form the kernels and anchors take, rotated through enough
// copies to defeat L2.
struct LayerWeights {
  std::int64_t n, k;
  int copies;
  std::size_t data_bytes, scale_bytes;
  DeviceMemory data, scales, bf16;

  LayerWeights(std::int64_t n_, std::int64_t k_, std::size_t l2, std::uint64_t seed,
               cudaStream_t stream);
  MxWeight view(int copy) const;
  const void* bf16_copy(int copy) const;
};

// One figure's activation and output: a random bf16 x [m, k] (the same for the same m and n),
// its MXFP8 quantization, a bf16 output [m, n] and the linear's workspace. Buffers hold
// pad16(m) rows (cuBLASLt FP8 reads M padded to 16; the padding of the e4m3 rows is zero); the
// views are the first m.
struct FigureBuffers {
  std::int64_t m, n, k, padded_m;
  DeviceMemory x, xq, xs, out, workspace;
  TensorView xv, qv, sv, ov;

  FigureBuffers(std::int64_t m_, std::int64_t n_, std::int64_t k_, cudaStream_t stream);
  QuantizedActivation quantized() const { return {qv, sv, DType::kBF16}; }
  Workspace work() const { return {workspace.ptr, linear_workspace_bytes(m, k)}; }
  // Fills the output with 0xFF bytes (NaN in bf16): a kernel that skips an element fails the
  // check.
  void poison_output(cudaStream_t stream) const;
};

// The fp64 reference of a few output rows (first, last and two between), computed once per
// figure on the CPU: every config of the sweep is checked against the same rows, which would
// otherwise cost a weight download and 4 N K fp64 products per config.
struct ReferenceRows {
  std::vector<std::int64_t> rows;
  std::vector<std::vector<double>> values;  // [row][n]
};

// The reference rows of activation (xq, xs) [m, k] times w (W8A8).
ReferenceRows reference_rows(const LayerWeights& w, const DeviceMemory& xq, const DeviceMemory& xs,
                             std::int64_t m);

// The same rows in W8A16: the bf16 activation x [m, k] as it is, not quantized, times w.
ReferenceRows reference_rows_w8a16(const LayerWeights& w, const DeviceMemory& x, std::int64_t m);

// Worst relative Frobenius error of the reference rows of a bf16 output [m, n].
double check_rows(const ReferenceRows& ref, const DeviceMemory& out, std::int64_t n);

// Runs `run` once on the figure's poisoned output, waits for it and returns check_rows() of the
// output against `reference`: how every call of the bench is checked before it is timed. What
// `run` throws (a call the shape or mode refuses) propagates.
double checked_first_run(const FigureBuffers& b, const std::function<void()>& run,
                         const ReferenceRows& reference, cudaStream_t stream);

// Runs `attempt` (a checked first run, and what follows it) and returns nullopt, or the message
// of the Error it threw where that is a refusal: a call the shape or mode cannot take, which the
// caller counts as a failed check or skips. A CUDA error is no refusal, and would leave the
// device unusable: it propagates.
std::optional<std::string> refusal_of(const std::function<void()>& attempt);

// A figure's timing: the summary of the graph replays of call(i), i the weight copy.
using MedianOf = std::function<bench::Summary(const std::function<void(int)>&)>;
// Two calls timed for their ratio: their graphs replayed in alternation (bench::time_graph_pair).
using MedianPairOf = std::function<std::array<bench::Summary, 2>(const std::function<void(int)>&,
                                                                 const std::function<void(int)>&)>;

// What a figure's extra measurements (the batch-invariant mode, the config sweep) take from it:
// its layer, buffers and reference rows (W8A8 and W8A16), the check's tolerance and its timing.
struct FigureInputs {
  const LayerWeights& weights;
  const FigureBuffers& buffers;
  const ReferenceRows& reference;        // W8A8's
  const ReferenceRows& reference_w8a16;  // W8A16's
  double tolerance;
  const MedianOf& median;
  const MedianPairOf& median_pair;
  cudaStream_t stream;
};

}  // namespace mxlinear::cli
