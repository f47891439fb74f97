#include "layer_data.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <random>

#include "host/numeric.hpp"
#include "mxlinear/quantize.hpp"

namespace mxlinear::cli {
namespace {

std::uint16_t to_bf16_bits(float v) {
  const __nv_bfloat16 b = __float2bfloat16_rn(v);
  std::uint16_t bits;
  static_assert(sizeof bits == sizeof b);
  std::memcpy(&bits, &b, sizeof bits);
  return bits;
}

}  // namespace

MxWeight HostLayer::weight_view() {
  return {TensorView::contiguous(w_data.data(), {spec.n, spec.k}, DType::kE4M3, Location::kHost),
          TensorView::contiguous(w_scales.data(), {spec.n, spec.k / 32}, DType::kE8M0,
                                 Location::kHost)};
}

QuantizedActivation HostLayer::activation_view() {
  return {
      TensorView::contiguous(x_data.data(), {spec.m, spec.k}, DType::kE4M3, Location::kHost),
      TensorView::contiguous(x_scales.data(), {spec.m, spec.k / 32}, DType::kE8M0, Location::kHost),
      DType::kBF16};
}

TensorView HostLayer::x_view() {
  return TensorView::contiguous(x_bf16.data(), {spec.m, spec.k}, DType::kBF16, Location::kHost);
}

std::optional<TensorView> HostLayer::bias_view() {
  if (bias_f32.empty()) return std::nullopt;
  return TensorView::contiguous(bias_f32.data(), {spec.n}, DType::kF32, Location::kHost);
}

HostLayer make_random_layer(const LayerSpec& spec) {
  HostLayer layer;
  layer.spec = spec;
  std::mt19937_64 rng(spec.seed);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  const auto mk = static_cast<std::size_t>(spec.m * spec.k);
  const auto nk = static_cast<std::size_t>(spec.n * spec.k);
  layer.x_bf16.resize(mk);
  for (auto& v : layer.x_bf16) v = to_bf16_bits(unit(rng));
  const float w_std = 1.0f / std::sqrt(static_cast<float>(spec.k));
  layer.w_f32.resize(nk);
  for (auto& v : layer.w_f32) v = unit(rng) * w_std;
  if (spec.bias) {
    layer.bias_f32.resize(static_cast<std::size_t>(spec.n));
    for (auto& v : layer.bias_f32) v = unit(rng);
  }
  layer.w_data.resize(nk);
  layer.w_scales.resize(nk / 32);
  const TensorView w =
      TensorView::contiguous(layer.w_f32.data(), {spec.n, spec.k}, DType::kF32, Location::kHost);
  MxWeight wv = layer.weight_view();
  quantize_rows(w, wv.data, wv.scales);
  layer.x_data.resize(mk);
  layer.x_scales.resize(mk / 32);
  QuantizedActivation xq = layer.activation_view();
  quantize_rows(layer.x_view(), xq.data, xq.scales);
  return layer;
}

ErrorStats compare_with_f64(const void* out, DType dtype, const std::vector<double>& ref) {
  ErrorStats stats;
  double err2 = 0;
  double ref2 = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double got = detail::load_as_float(out, dtype, static_cast<std::int64_t>(i));
    if (std::isnan(got) && !std::isnan(ref[i])) {
      ++stats.nan_count;
      continue;
    }
    const double e = got - ref[i];
    err2 += e * e;
    ref2 += ref[i] * ref[i];
    if (std::fabs(e) > stats.max_abs) {
      stats.max_abs = std::fabs(e);
      stats.worst_index = i;
    }
  }
  stats.relative_frobenius = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  const double outlier = 1e-3 * std::sqrt(ref2 / static_cast<double>(ref.size() ? ref.size() : 1));
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double got = detail::load_as_float(out, dtype, static_cast<std::int64_t>(i));
    if (!std::isnan(got) && std::fabs(got - ref[i]) > outlier) stats.outliers.push_back(i);
  }
  return stats;
}

}  // namespace mxlinear::cli
