#include "bench_rates.hpp"

#include <algorithm>

#include "device_data.hpp"
#include "device_memory.hpp"
#include "mxlinear/linear.hpp"

namespace mxlinear::cli {

using nlohmann::json;

Ceilings measure_ceilings(bench::Anchors& anchors, double warm_seconds, cudaStream_t stream) {
  const bench::Timing timing{5, warm_seconds};
  Ceilings c;
  const std::size_t bytes = std::size_t{2} << 30;
  {
    DeviceMemory data(bytes), sink(16);
    bench::fill_e4m3(data.bytes(), bytes, 7, stream);
    const auto t = bench::summarize(bench::time_graph(
        [&](int) { bench::read_all(data.ptr, bytes, static_cast<unsigned*>(sink.ptr), stream); }, 3,
        1, timing, stream));
    c.read_bytes_per_s = static_cast<double>(bytes) / (t.median * 1e-6);
  }
  const int n = 8192;
  const std::size_t elems = static_cast<std::size_t>(n) * n;
  DeviceMemory a(elems * 2), b(elems * 2), out(elems * 2);
  bench::fill_bf16(a.ptr, elems, 1, stream);
  bench::fill_bf16(b.ptr, elems, 2, stream);
  const double flops = 2.0 * n * n * n;
  const auto bf16 = bench::summarize(
      bench::time_graph([&](int) { anchors.bf16_gemm(a.ptr, b.ptr, out.ptr, n, n, n, stream); }, 3,
                        1, timing, stream));
  c.bf16_flops = flops / (bf16.median * 1e-6);
  bench::fill_e4m3(a.bytes(), elems, 3, stream);
  bench::fill_e4m3(b.bytes(), elems, 4, stream);
  const auto fp8 = bench::summarize(
      bench::time_graph([&](int) { anchors.fp8_gemm(a.ptr, b.ptr, out.ptr, n, n, n, stream); }, 3,
                        1, timing, stream));
  c.fp8_flops = flops / (fp8.median * 1e-6);
  return c;
}

json bench_quantize(std::int64_t m, std::int64_t k, std::size_t l2, const Ceilings& ceil,
                    const bench::Timing& timing, cudaStream_t stream) {
  const std::size_t bytes = static_cast<std::size_t>(m * k) * 2;
  const int copies = std::min(bench::rotation_copies(bytes, l2), 256);
  DeviceMemory x(bytes * static_cast<std::size_t>(copies)), q(static_cast<std::size_t>(m * k)),
      s(static_cast<std::size_t>(m * k / 32));
  bench::fill_bf16(x.ptr, static_cast<std::size_t>(m * k) * static_cast<std::size_t>(copies), 5,
                   stream);
  const TensorView qv = TensorView::contiguous(q.ptr, {m, k}, DType::kE4M3, Location::kDevice);
  const TensorView sv = TensorView::contiguous(s.ptr, {m, k / 32}, DType::kE8M0, Location::kDevice);
  const auto t = bench::summarize(bench::time_graph(
      [&](int i) {
        quantize(TensorView::contiguous(x.bytes() + static_cast<std::size_t>(i % copies) * bytes,
                                        {m, k}, DType::kBF16, Location::kDevice),
                 qv, sv, stream);
      },
      bench::rotation_calls(copies), 2, timing, stream));
  // The same bytes in and out with no arithmetic: what this traffic allows.
  const auto copy = bench::summarize(bench::time_graph(
      [&](int i) {
        bench::narrowing_copy(x.bytes() + static_cast<std::size_t>(i % copies) * bytes,
                              static_cast<std::size_t>(m * k), q.ptr, s.ptr, stream);
      },
      bench::rotation_calls(copies), 2, timing, stream));
  const double read_per_s = static_cast<double>(bytes) / (t.median * 1e-6);
  // Every byte moved: bf16 in, e4m3 and one scale byte per 32 elements out.
  const double moved = static_cast<double>(bytes) + static_cast<double>(m * k) * (1.0 + 1.0 / 32);
  const double moved_per_s = moved / (t.median * 1e-6);
  return {{"m", m},
          {"k", k},
          {"us", t.median},
          {"read_tb_s", read_per_s / 1e12},
          {"fraction_of_read_ceiling", read_per_s / ceil.read_bytes_per_s},
          {"moved_tb_s", moved_per_s / 1e12},
          {"moved_fraction_of_read_ceiling", moved_per_s / ceil.read_bytes_per_s},
          {"narrowing_copy_us", copy.median},
          {"rotation_copies", copies}};
}

}  // namespace mxlinear::cli
