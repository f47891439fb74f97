#include "bench_layer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>

#include "device_data.hpp"
#include "harness.hpp"
#include "mxlinear/error.hpp"
#include "mxlinear/quantize.hpp"
#include "mxlinear/reference.hpp"

namespace mxlinear::cli {

LayerWeights::LayerWeights(std::int64_t n_, std::int64_t k_, std::size_t l2, std::uint64_t seed,
                           cudaStream_t stream)
    : n(n_),
      k(k_),
      copies(bench::rotation_copies(static_cast<std::size_t>(n_ * k_), l2)),
      data_bytes(static_cast<std::size_t>(n_ * k_)),
      scale_bytes(data_bytes / 32),
      data(data_bytes * static_cast<std::size_t>(copies)),
      scales(scale_bytes * static_cast<std::size_t>(copies)),
      bf16(data_bytes * 2 * static_cast<std::size_t>(copies)) {
  bench::fill_e4m3(data.bytes(), data_bytes * static_cast<std::size_t>(copies), seed, stream);
  bench::fill_scales(scales.bytes(), scale_bytes * static_cast<std::size_t>(copies), seed + 1, 117,
                     124, stream);
  bench::fill_bf16(bf16.ptr, data_bytes * static_cast<std::size_t>(copies), seed + 2, stream);
}

FigureBuffers::FigureBuffers(std::int64_t m_, std::int64_t n_, std::int64_t k_, cudaStream_t stream)
    : m(m_),
      n(n_),
      k(k_),
      padded_m(bench::pad16(m_)),
      x(static_cast<std::size_t>(padded_m * k) * 2),
      xq(static_cast<std::size_t>(padded_m * k)),
      xs(static_cast<std::size_t>(padded_m * k / 32)),
      out(static_cast<std::size_t>(padded_m * n) * 2),
      workspace(linear_workspace_bytes(m, k)),
      xv(TensorView::contiguous(x.ptr, {m, k}, DType::kBF16, Location::kDevice)),
      qv(TensorView::contiguous(xq.ptr, {m, k}, DType::kE4M3, Location::kDevice)),
      sv(TensorView::contiguous(xs.ptr, {m, k / 32}, DType::kE8M0, Location::kDevice)),
      ov(TensorView::contiguous(out.ptr, {m, n}, DType::kBF16, Location::kDevice)) {
  bench::fill_bf16(x.ptr, static_cast<std::size_t>(padded_m * k),
                   static_cast<std::uint64_t>(m * 31 + n), stream);
  cuda_or_throw(cudaMemsetAsync(xq.ptr, 0, static_cast<std::size_t>(padded_m * k), stream),
                "zero pad");
  quantize(xv, qv, sv, stream);
  poison_output(stream);
}

void FigureBuffers::poison_output(cudaStream_t stream) const {
  cuda_or_throw(cudaMemsetAsync(out.ptr, 0xFF, static_cast<std::size_t>(padded_m * n) * 2, stream),
                "poison");
}

MxWeight LayerWeights::view(int copy) const {
  const std::size_t c = static_cast<std::size_t>(copy % copies);
  return {TensorView::contiguous(data.bytes() + c * data_bytes, {n, k}, DType::kE4M3,
                                 Location::kDevice),
          TensorView::contiguous(scales.bytes() + c * scale_bytes, {n, k / 32}, DType::kE8M0,
                                 Location::kDevice)};
}

const void* LayerWeights::bf16_copy(int copy) const {
  return bf16.bytes() + static_cast<std::size_t>(copy % copies) * data_bytes * 2;
}

namespace {

// A copy of the first weight copy on the host, for the CPU reference.
struct HostWeight {
  std::vector<std::uint8_t> data, scales;
  MxWeight view;

  explicit HostWeight(const LayerWeights& w) : data(w.data_bytes), scales(w.scale_bytes) {
    cuda_or_throw(cudaMemcpy(data.data(), w.data.ptr, data.size(), cudaMemcpyDeviceToHost),
                  "download");
    cuda_or_throw(cudaMemcpy(scales.data(), w.scales.ptr, scales.size(), cudaMemcpyDeviceToHost),
                  "download");
    view = {TensorView::contiguous(data.data(), {w.n, w.k}, DType::kE4M3, Location::kHost),
            TensorView::contiguous(scales.data(), {w.n, w.k / 32}, DType::kE8M0, Location::kHost)};
  }
  // view points into this object's vectors.
  HostWeight(const HostWeight&) = delete;
  HostWeight& operator=(const HostWeight&) = delete;
};

// The rows a figure is checked on: the first, the last and two between.
std::set<std::int64_t> checked_rows(std::int64_t m) { return {0, m - 1, m / 2, m / 3}; }

}  // namespace

ReferenceRows reference_rows(const LayerWeights& w, const DeviceMemory& xq, const DeviceMemory& xs,
                             std::int64_t m) {
  const std::int64_t n = w.n, k = w.k;
  const HostWeight host_w(w);
  ReferenceRows ref;
  for (std::int64_t r : checked_rows(m)) {
    std::vector<std::uint8_t> qd(static_cast<std::size_t>(k)), qs(static_cast<std::size_t>(k / 32));
    cuda_or_throw(cudaMemcpy(qd.data(), xq.bytes() + r * k, qd.size(), cudaMemcpyDeviceToHost),
                  "download");
    cuda_or_throw(cudaMemcpy(qs.data(), xs.bytes() + r * k / 32, qs.size(), cudaMemcpyDeviceToHost),
                  "download");
    const QuantizedActivation a{
        TensorView::contiguous(qd.data(), {1, k}, DType::kE4M3, Location::kHost),
        TensorView::contiguous(qs.data(), {1, k / 32}, DType::kE8M0, Location::kHost),
        DType::kBF16};
    ref.rows.push_back(r);
    ref.values.emplace_back(static_cast<std::size_t>(n));
    reference_linear_f64(a, host_w.view, std::nullopt, ref.values.back().data());
  }
  return ref;
}

ReferenceRows reference_rows_w8a16(const LayerWeights& w, const DeviceMemory& x, std::int64_t m) {
  const std::int64_t n = w.n, k = w.k;
  const HostWeight host_w(w);
  ReferenceRows ref;
  for (std::int64_t r : checked_rows(m)) {
    std::vector<std::uint16_t> row(static_cast<std::size_t>(k));
    cuda_or_throw(
        cudaMemcpy(row.data(), x.bytes() + r * k * 2, row.size() * 2, cudaMemcpyDeviceToHost),
        "download");
    ref.rows.push_back(r);
    ref.values.emplace_back(static_cast<std::size_t>(n));
    reference_linear_w8a16_f64(
        TensorView::contiguous(row.data(), {1, k}, DType::kBF16, Location::kHost), host_w.view,
        std::nullopt, ref.values.back().data());
  }
  return ref;
}

double checked_first_run(const FigureBuffers& b, const std::function<void()>& run,
                         const ReferenceRows& reference, cudaStream_t stream) {
  b.poison_output(stream);
  run();
  cuda_or_throw(cudaStreamSynchronize(stream), "sync");
  return check_rows(reference, b.out, b.n);
}

std::optional<std::string> refusal_of(const std::function<void()>& attempt) {
  try {
    attempt();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kCudaError) throw;
    return e.what();
  }
  return std::nullopt;
}

double check_rows(const ReferenceRows& ref, const DeviceMemory& out, std::int64_t n) {
  double worst = 0;
  std::vector<std::uint16_t> got(static_cast<std::size_t>(n));
  for (std::size_t j = 0; j < ref.rows.size(); ++j) {
    cuda_or_throw(cudaMemcpy(got.data(), out.bytes() + ref.rows[j] * n * 2, got.size() * 2,
                             cudaMemcpyDeviceToHost),
                  "download");
    double e2 = 0, r2 = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const std::uint32_t bits = static_cast<std::uint32_t>(got[i]) << 16;
      float v;
      std::memcpy(&v, &bits, 4);
      const double d = static_cast<double>(v) - ref.values[j][i];
      e2 += std::isnan(d) ? 1e300 : d * d;
      r2 += ref.values[j][i] * ref.values[j][i];
    }
    worst = std::max(worst, std::sqrt(e2 / r2));
  }
  return worst;
}

}  // namespace mxlinear::cli
