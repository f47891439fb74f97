// A random MXFP8 layer in host memory, for the CLI's check and example jobs.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mxlinear/linear_types.hpp"

namespace mxlinear::cli {

struct LayerSpec {
  std::int64_t m = 64;
  std::int64_t n = 1024;
  std::int64_t k = 2048;
  DType out_dtype = DType::kBF16;
  bool bias = false;
  std::uint64_t seed = 0;
};

struct HostLayer {
  LayerSpec spec;
  std::vector<std::uint16_t> x_bf16;   // [M, K] activations as bf16 bits
  std::vector<float> w_f32;            // [N, K] the unquantized weights
  std::vector<std::uint8_t> w_data;    // [N, K] e4m3
  std::vector<std::uint8_t> w_scales;  // [N, K/32] e8m0
  std::vector<std::uint8_t> x_data;    // [M, K] e4m3 (RCEIL), for the pre-quantized path
  std::vector<std::uint8_t> x_scales;  // [M, K/32]
  std::vector<float> bias_f32;         // [N] or empty

  MxWeight weight_view();
  QuantizedActivation activation_view();
  TensorView x_view();
  std::optional<TensorView> bias_view();
};

// Activations ~ N(0, 1), weights ~ N(0, 1/sqrt(K)), bias ~ N(0, 1); rounded to bf16 and then
// quantized with the default scale rule.
HostLayer make_random_layer(const LayerSpec& spec);

struct ErrorStats {
  double relative_frobenius = 0;  // ||out - ref|| / ||ref||
  double max_abs = 0;
  std::int64_t nan_count = 0;   // outputs that are NaN where the reference is not
  std::size_t worst_index = 0;  // row-major index of the largest absolute error
  // Outputs off by more than 1e-3 of the reference's RMS: a correct kernel has none, so they
  // locate a broken tile.
  std::vector<std::size_t> outliers;
};

// Compares out (row-major [M, N] of spec.out_dtype) with the fp64 reference.
ErrorStats compare_with_f64(const void* out, DType dtype, const std::vector<double>& ref);

}  // namespace mxlinear::cli
