// The decode step as `mxlinear bench --step` times it: every layer instance of a model with its
// own weights, back to back in one CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "anchors.hpp"
#include "harness.hpp"
#include "mxlinear/models.hpp"

namespace mxlinear::cli {

// Milliseconds a step for our linear (bf16 activations, quantized inside), the two anchors, and
// the weight reads alone (plain and overlapped launches).
nlohmann::json bench_step(const std::vector<ModelLayer>& layers, std::int64_t m,
                          bench::Anchors& anchors, const bench::Timing& timing,
                          cudaStream_t stream);

}  // namespace mxlinear::cli
