// The card's ceilings and the activation quantizer's rate, measured by `mxlinear bench` beside
// its figures.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "anchors.hpp"
#include "harness.hpp"

namespace mxlinear::cli {

struct Ceilings {
  double read_bytes_per_s = 0, bf16_flops = 0, fp8_flops = 0;
};

// Read bandwidth over 2 GiB, and the cuBLAS bf16 / cuBLASLt FP8 rates at 8192^3.
Ceilings measure_ceilings(bench::Anchors& anchors, double warm_seconds, cudaStream_t stream);

// The activation quantizer alone, its bf16 inputs rotating through copies worth >= 3x L2 like
// the weights (the quantizer's goal: >= 80% of read bandwidth for M >= 512), and a plain copy of
// the same bytes.
nlohmann::json bench_quantize(std::int64_t m, std::int64_t k, std::size_t l2, const Ceilings& ceil,
                              const bench::Timing& timing, cudaStream_t stream);

}  // namespace mxlinear::cli
