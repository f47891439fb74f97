#include "bench_step.hpp"

#include <algorithm>
#include <exception>
#include <functional>
#include <memory>
#include <optional>

#include "device_data.hpp"
#include "device_memory.hpp"
#include "mxlinear/linear.hpp"

namespace mxlinear::cli {

using nlohmann::json;

namespace {
// The step runs W8A8 in the default mode whatever MXLINEAR_ACTIVATION and
// MXLINEAR_BATCH_INVARIANT say, as every figure of the bench pins its mode.
const LinearOptions kStepOptions{ActivationMode::kW8A8, false};
}  // namespace

json bench_step(const std::vector<ModelLayer>& layers, std::int64_t m, bench::Anchors& anchors,
                const bench::Timing& timing, cudaStream_t stream) {
  std::int64_t max_n = 0, max_k = 0;
  std::vector<ModelLayer> instances;
  for (const auto& l : layers) {
    for (int c = 0; c < l.count; ++c) instances.push_back(l);
    max_n = std::max(max_n, l.n);
    max_k = std::max(max_k, l.k);
  }
  std::vector<std::unique_ptr<DeviceMemory>> data, scales, bf16;
  double weight_bytes = 0;
  for (std::size_t i = 0; i < instances.size(); ++i) {
    const auto nk = static_cast<std::size_t>(instances[i].n * instances[i].k);
    data.push_back(std::make_unique<DeviceMemory>(nk));
    scales.push_back(std::make_unique<DeviceMemory>(nk / 32));
    bf16.push_back(std::make_unique<DeviceMemory>(nk * 2));
    bench::fill_e4m3(data.back()->bytes(), nk, 100 + i, stream);
    bench::fill_scales(scales.back()->bytes(), nk / 32, 200 + i, 117, 124, stream);
    bench::fill_bf16(bf16.back()->ptr, nk, 300 + i, stream);
    weight_bytes += static_cast<double>(nk) * (1.0 + 1.0 / 32);
  }
  const std::int64_t mp = bench::pad16(m);
  DeviceMemory x(static_cast<std::size_t>(mp * max_k) * 2),
      xq(static_cast<std::size_t>(mp * max_k)), xs(static_cast<std::size_t>(mp * max_k / 32)),
      out(static_cast<std::size_t>(mp * max_n) * 2), ws(linear_workspace_bytes(m, max_k));
  bench::fill_bf16(x.ptr, static_cast<std::size_t>(mp * max_k), 9, stream);
  // The FP8 anchor's e4m3 activation is x quantized, not zeros: zero operands draw less power and
  // would flatter it against the other figures, which multiply random values.
  quantize(TensorView::contiguous(x.ptr, {mp, max_k}, DType::kBF16, Location::kDevice),
           TensorView::contiguous(xq.ptr, {mp, max_k}, DType::kE4M3, Location::kDevice),
           TensorView::contiguous(xs.ptr, {mp, max_k / 32}, DType::kE8M0, Location::kDevice),
           stream);
  const Workspace workspace{ws.ptr, linear_workspace_bytes(m, max_k)};
  const int calls = static_cast<int>(instances.size());
  auto step_ms = [&](const std::function<void(int)>& f) {
    return bench::summarize(bench::time_graph(f, calls, 2, timing, stream)).median * calls / 1000;
  };
  json row = {{"m", m}, {"gemms", calls}, {"weight_bytes", weight_bytes}};
  DeviceMemory sink(16);
  row["weight_stream_ms"] = step_ms([&](int i) {
    const auto& l = instances[static_cast<std::size_t>(i)];
    bench::stream_read(data[static_cast<std::size_t>(i)]->ptr, static_cast<std::size_t>(l.n * l.k),
                       static_cast<unsigned*>(sink.ptr), stream);
  });
  // The same reads overlapped (each kernel lets the next launch at once and waits for nothing):
  // what a step of weight-bound kernels could take at best if one layer's weights streamed while
  // the layer before still ran: the bar for the decode step's goals.
  row["weight_stream_overlapped_ms"] = step_ms([&](int i) {
    const auto& l = instances[static_cast<std::size_t>(i)];
    cuda_or_throw(bench::stream_read_overlapped(data[static_cast<std::size_t>(i)]->ptr,
                                                static_cast<std::size_t>(l.n * l.k),
                                                static_cast<unsigned*>(sink.ptr), stream),
                  "overlapped weight read");
  });
  // The same with a GEMM's dependency (each kernel waits for the one before), all reads issued
  // before the wait and half of them after it: how much of the bar the wait itself costs.
  for (const auto& [key, loads_after_wait] : {std::pair{"weight_stream_waited_ms", 0},
                                              std::pair{"weight_stream_half_after_wait_ms", 2}}) {
    row[key] = step_ms([&, loads_after_wait = loads_after_wait](int i) {
      const auto& l = instances[static_cast<std::size_t>(i)];
      cuda_or_throw(bench::stream_read_dependent(
                        data[static_cast<std::size_t>(i)]->ptr, static_cast<std::size_t>(l.n * l.k),
                        static_cast<unsigned*>(sink.ptr), stream, loads_after_wait),
                    "dependent weight read");
    });
  }
  row["mxlinear_ms"] = step_ms([&](int i) {
    const auto& l = instances[static_cast<std::size_t>(i)];
    linear(TensorView::contiguous(x.ptr, {m, l.k}, DType::kBF16, Location::kDevice),
           MxWeight{TensorView::contiguous(data[static_cast<std::size_t>(i)]->ptr, {l.n, l.k},
                                           DType::kE4M3, Location::kDevice),
                    TensorView::contiguous(scales[static_cast<std::size_t>(i)]->ptr,
                                           {l.n, l.k / 32}, DType::kE8M0, Location::kDevice)},
           std::nullopt, TensorView::contiguous(out.ptr, {m, l.n}, DType::kBF16, Location::kDevice),
           stream, workspace, kStepOptions);
  });
  try {
    row["cublas_bf16_ms"] = step_ms([&](int i) {
      const auto& l = instances[static_cast<std::size_t>(i)];
      anchors.bf16_gemm(x.ptr, bf16[static_cast<std::size_t>(i)]->ptr, out.ptr, static_cast<int>(m),
                        static_cast<int>(l.n), static_cast<int>(l.k), stream);
    });
    row["cublaslt_fp8_tensor_ms"] = step_ms([&](int i) {
      const auto& l = instances[static_cast<std::size_t>(i)];
      anchors.fp8_gemm(xq.ptr, data[static_cast<std::size_t>(i)]->ptr, out.ptr,
                       static_cast<int>(mp), static_cast<int>(l.n), static_cast<int>(l.k), stream);
    });
  } catch (const std::exception& e) {
    row["anchor_error"] = e.what();
    (void)cudaGetLastError();
  }
  return row;
}

}  // namespace mxlinear::cli
