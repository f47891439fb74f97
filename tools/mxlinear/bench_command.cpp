#include "bench_command.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness.hpp"
#include "mxlinear/error.hpp"
#include "mxlinear/linear.hpp"
#include "mxlinear/models.hpp"
#include "mxlinear/reference.hpp"
#include "mxlinear/registry.hpp"

namespace mxlinear::cli {
namespace {

// The project brief's H200 ceilings, until `bench --ceilings` measures them (docs/TARGETS.md).
constexpr double kBriefBandwidth = 4.36e12;
constexpr double kBriefBf16Peak = 790e12;

struct BenchOptions {
  std::string model = "builtin:minimax-m3.1-flash-tp4";
  std::vector<std::int64_t> ms = {1, 32, 128, 512, 2048, 8192};
  std::string anchors;
  std::string json;
  int replays = 10;
};

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw Error(ErrorCode::kCudaError, "",
                fmt::format("bench: {}: {}", what, cudaGetErrorString(e)));
  }
}

struct DeviceMemory {
  void* ptr = nullptr;
  explicit DeviceMemory(std::size_t bytes) {
    cuda(cudaMalloc(&ptr, std::max<std::size_t>(bytes, 1)), "cudaMalloc");
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { cudaFree(ptr); }
  std::uint8_t* bytes() const { return static_cast<std::uint8_t*>(ptr); }
};

// tri_mx and friends from the brief, keyed by (n, k, m).
std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, double> load_tri_mx(
    const std::string& path) {
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, double> table;
  if (path.empty()) return table;
  std::ifstream in(path);
  if (!in)
    throw Error(ErrorCode::kInvalidArgument, "anchors",
                fmt::format("bench: argument 'anchors' is '{}', which cannot be opened", path));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.rfind("layer,", 0) == 0) continue;
    std::stringstream ss(line);
    std::string field;
    std::vector<std::string> f;
    while (std::getline(ss, field, ',')) f.push_back(field);
    if (f.size() < 8) continue;
    table[{std::stoll(f[1]), std::stoll(f[2]), std::stoll(f[3])}] = std::stod(f[7]);
  }
  return table;
}

// A layer's weights, rotated through enough copies to defeat L2, plus one host copy for checks.
struct RotatingWeights {
  std::int64_t n, k;
  int copies;
  std::size_t data_bytes, scale_bytes;
  std::unique_ptr<DeviceMemory> data, scales;
  std::vector<std::uint8_t> host_data, host_scales;

  RotatingWeights(std::int64_t n_, std::int64_t k_, std::size_t l2, std::mt19937_64& rng)
      : n(n_), k(k_), data_bytes(static_cast<std::size_t>(n_ * k_)), scale_bytes(data_bytes / 32) {
    copies = bench::rotation_copies(data_bytes + scale_bytes, l2);
    host_data.resize(data_bytes);
    host_scales.resize(scale_bytes);
    std::uint64_t state = rng();
    auto next = [&state] {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      return state;
    };
    for (auto& b : host_data) {
      std::uint8_t v = static_cast<std::uint8_t>(next() >> 56);
      if ((v & 0x7F) == 0x7F) v = 0x3F;
      b = v;
    }
    for (auto& s : host_scales) s = static_cast<std::uint8_t>(117 + (next() >> 61));
    data = std::make_unique<DeviceMemory>(data_bytes * static_cast<std::size_t>(copies));
    scales = std::make_unique<DeviceMemory>(scale_bytes * static_cast<std::size_t>(copies));
    for (int c = 0; c < copies; ++c) {
      cuda(cudaMemcpy(data->bytes() + c * data_bytes, host_data.data(), data_bytes,
                      cudaMemcpyHostToDevice),
           "upload");
      cuda(cudaMemcpy(scales->bytes() + c * scale_bytes, host_scales.data(), scale_bytes,
                      cudaMemcpyHostToDevice),
           "upload");
    }
  }
  MxWeight view(int copy) const {
    return {TensorView::contiguous(data->bytes() + (copy % copies) * data_bytes, {n, k},
                                   DType::kE4M3, Location::kDevice),
            TensorView::contiguous(scales->bytes() + (copy % copies) * scale_bytes, {n, k / 32},
                                   DType::kE8M0, Location::kDevice)};
  }
};

// Checks a few rows of out (bf16 [m, n]) against the fp64 reference; returns the worst relative
// Frobenius error over those rows.
double check_rows(const RotatingWeights& w, const std::vector<std::uint8_t>& xq,
                  const std::vector<std::uint8_t>& xs, const DeviceMemory& out, std::int64_t m) {
  const std::int64_t n = w.n, k = w.k;
  std::set<std::int64_t> rows = {0, m - 1, m / 2, m / 3};
  double worst = 0;
  auto wd = w.host_data;
  auto ws = w.host_scales;
  const MxWeight host_w{
      TensorView::contiguous(wd.data(), {n, k}, DType::kE4M3, Location::kHost),
      TensorView::contiguous(ws.data(), {n, k / 32}, DType::kE8M0, Location::kHost)};
  std::vector<std::uint16_t> got(static_cast<std::size_t>(n));
  for (std::int64_t r : rows) {
    auto qd = std::vector<std::uint8_t>(xq.begin() + r * k, xq.begin() + (r + 1) * k);
    auto qs = std::vector<std::uint8_t>(xs.begin() + r * k / 32, xs.begin() + (r + 1) * k / 32);
    const QuantizedActivation a{
        TensorView::contiguous(qd.data(), {1, k}, DType::kE4M3, Location::kHost),
        TensorView::contiguous(qs.data(), {1, k / 32}, DType::kE8M0, Location::kHost),
        DType::kBF16};
    std::vector<double> ref(static_cast<std::size_t>(n));
    reference_linear_f64(a, host_w, std::nullopt, ref.data());
    cuda(cudaMemcpy(got.data(), out.bytes() + r * n * 2, static_cast<std::size_t>(n) * 2,
                    cudaMemcpyDeviceToHost),
         "download");
    double e2 = 0, r2 = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint32_t bits = static_cast<std::uint32_t>(got[static_cast<std::size_t>(i)]) << 16;
      float v;
      std::memcpy(&v, &bits, 4);
      const double d = static_cast<double>(v) - ref[static_cast<std::size_t>(i)];
      e2 += std::isnan(d) ? 1e300 : d * d;
      r2 += ref[static_cast<std::size_t>(i)] * ref[static_cast<std::size_t>(i)];
    }
    worst = std::max(worst, std::sqrt(e2 / r2));
  }
  return worst;
}

int run_bench(const BenchOptions& o) {
  if (!gpu_available()) {
    fmt::print(stderr, "mxlinear bench: no sm_90 GPU; nothing to time\n");
    return 2;
  }
  cudaDeviceProp prop{};
  int device = 0;
  cuda(cudaGetDevice(&device), "device");
  cuda(cudaGetDeviceProperties(&prop, device), "properties");
  const auto l2 = static_cast<std::size_t>(prop.l2CacheSize);
  const auto tri_mx = load_tri_mx(o.anchors);
  const std::vector<ModelLayer> layers = load_model(o.model);
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes;
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> shape_names;
  for (const auto& l : layers) {
    if (!shape_names.count({l.n, l.k})) {
      shapes.push_back({l.n, l.k});
      shape_names[{l.n, l.k}] = l.name;
    }
  }
  cudaStream_t stream;
  cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  std::mt19937_64 rng(12345);
  nlohmann::json rows = nlohmann::json::array();
  fmt::print(
      "mxlinear bench on {} ({} SMs, L2 {} MiB); floor uses the brief's {} TB/s and {} TFLOP/s "
      "(bf16)\n",
      prop.name, prop.multiProcessorCount, l2 >> 20, kBriefBandwidth / 1e12, kBriefBf16Peak / 1e12);
  fmt::print("{:<28} {:>11} {:>5} {:>10} {:>10} {:>8} {:>8} {:>9} {:>9} {:>9} {:>7}  {}\n", "layer",
             "NxK", "M", "linear_us", "gemm_us", "TB/s", "TFLOP/s", "floor_us", "tri_mx", "x_tri",
             "check", "kernel/config");
  for (const auto& [n, k] : shapes) {
    RotatingWeights w(n, k, l2, rng);
    for (std::int64_t m : o.ms) {
      // Activation: bf16 ~ N(0, 1), and its quantized form for the GEMM-only timing.
      std::vector<std::uint16_t> x(static_cast<std::size_t>(m * k));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (auto& v : x) {
        float f = normal(rng);
        std::uint32_t bits;
        std::memcpy(&bits, &f, 4);
        v = static_cast<std::uint16_t>(bits >> 16);
      }
      DeviceMemory dx(x.size() * 2), xq(static_cast<std::size_t>(m * k)),
          xs(static_cast<std::size_t>(m * k / 32)), out(static_cast<std::size_t>(m * n) * 2),
          ws(linear_workspace_bytes(m, k));
      cuda(cudaMemcpy(dx.ptr, x.data(), x.size() * 2, cudaMemcpyHostToDevice), "upload");
      const TensorView xv = TensorView::contiguous(dx.ptr, {m, k}, DType::kBF16, Location::kDevice);
      const TensorView qv = TensorView::contiguous(xq.ptr, {m, k}, DType::kE4M3, Location::kDevice);
      const TensorView sv =
          TensorView::contiguous(xs.ptr, {m, k / 32}, DType::kE8M0, Location::kDevice);
      const TensorView ov =
          TensorView::contiguous(out.ptr, {m, n}, DType::kBF16, Location::kDevice);
      quantize(xv, qv, sv, stream);
      cuda(cudaMemsetAsync(out.ptr, 0xFF, static_cast<std::size_t>(m * n) * 2, stream), "poison");
      linear(QuantizedActivation{qv, sv, DType::kBF16}, w.view(0), std::nullopt, ov, stream);
      cuda(cudaStreamSynchronize(stream), "sync");
      std::vector<std::uint8_t> hq(static_cast<std::size_t>(m * k)),
          hs(static_cast<std::size_t>(m * k / 32));
      cuda(cudaMemcpy(hq.data(), xq.ptr, hq.size(), cudaMemcpyDeviceToHost), "download");
      cuda(cudaMemcpy(hs.data(), xs.ptr, hs.size(), cudaMemcpyDeviceToHost), "download");
      const double err = check_rows(w, hq, hs, out, m);
      const bool ok = err <= 4e-3;  // bf16 output: a few units of 2^-8 at most
      const DeviceDescription device_desc = DeviceDescription::current();
      LayerDescription layer_desc;
      layer_desc.n = n;
      layer_desc.k = k;
      const Registry& registry = Registry::global();
      const Dispatch dispatch =
          registry.dispatch(registry.select(layer_desc, device_desc), device_desc, m);
      const std::string kernel_name =
          dispatch.kernel ? fmt::format("{}/{}", dispatch.kernel->name(), dispatch.config) : "none";
      nlohmann::json row = {{"layer", shape_names[{n, k}]},
                            {"n", n},
                            {"k", k},
                            {"m", m},
                            {"kernel", kernel_name},
                            {"check_rel_error", err},
                            {"check", ok ? "ok" : "WRONG"}};
      double linear_us = NAN, gemm_us = NAN;
      if (ok) {
        const int calls = std::max(w.copies, 8);
        const Workspace workspace{ws.ptr, linear_workspace_bytes(m, k)};
        const auto full = bench::summarize(bench::time_graph(
            [&](int i) { linear(xv, w.view(i), std::nullopt, ov, stream, workspace); }, calls, 2,
            o.replays, stream));
        const auto gemm = bench::summarize(bench::time_graph(
            [&](int i) {
              linear(QuantizedActivation{qv, sv, DType::kBF16}, w.view(i), std::nullopt, ov,
                     stream);
            },
            calls, 2, o.replays, stream));
        linear_us = full.median;
        gemm_us = gemm.median;
        row["linear_us"] = linear_us;
        row["linear_spread"] = full.spread();
        row["gemm_us"] = gemm_us;
        row["gemm_spread"] = gemm.spread();
        row["rotation_copies"] = w.copies;
        row["calls_per_graph"] = calls;
      }
      const bench::Traffic t = bench::count_traffic(m, n, k, 2, false);
      const double floor = bench::floor_us(t, kBriefBandwidth, kBriefBf16Peak);
      row["floor_us"] = floor;
      row["gemm_tb_s"] = t.bytes / gemm_us / 1e6;
      row["gemm_tflop_s"] = t.flops / gemm_us / 1e6;
      const auto anchor = tri_mx.find({n, k, m});
      const double tri = anchor == tri_mx.end() ? NAN : anchor->second;
      if (!std::isnan(tri)) {
        row["tri_mx_us"] = tri;
        row["speedup_vs_tri_mx"] = tri / gemm_us;
      }
      rows.push_back(row);
      fmt::print(
          "{:<28} {:>11} {:>5} {:>10.2f} {:>10.2f} {:>8.2f} {:>8.1f} {:>9.2f} {:>9.1f} {:>8.2f}x "
          "{:>7}  {}\n",
          shape_names[{n, k}], fmt::format("{}x{}", n, k), m, linear_us, gemm_us,
          t.bytes / gemm_us / 1e6, t.flops / gemm_us / 1e6, floor, tri, tri / gemm_us,
          ok ? "ok" : "WRONG", kernel_name);
      std::fflush(stdout);
    }
  }
  cudaStreamDestroy(stream);
  // Geometric mean over shapes of the speed-up against tri_mx, per M (the issues' goal metric).
  fmt::print("\ngeometric mean over shapes of tri_mx_us / gemm_us:");
  for (std::int64_t m : o.ms) {
    double log_sum = 0;
    int count = 0;
    for (const auto& row : rows) {
      if (row["m"] == m && row.contains("speedup_vs_tri_mx")) {
        log_sum += std::log(row["speedup_vs_tri_mx"].get<double>());
        ++count;
      }
    }
    if (count) fmt::print("  M={}: {:.2f}x", m, std::exp(log_sum / count));
  }
  fmt::print("\n");
  if (!o.json.empty()) {
    nlohmann::json doc = {
        {"gpu", prop.name},
        {"sms", prop.multiProcessorCount},
        {"l2_bytes", l2},
        {"method", "rotating weights >= 3x L2, one CUDA graph per figure, median of replays"},
        {"rows", rows}};
    std::ofstream(o.json) << doc.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Time the linear per layer shape and M on the GPU");
  cmd->add_option("--model", o->model, "builtin:<name> or a CSV of name,N,K,count");
  cmd->add_option("--m", o->ms, "token counts")->delimiter(',');
  cmd->add_option("--anchors", o->anchors, "CSV of brief anchors (bench/anchors/*.csv)");
  cmd->add_option("--json", o->json, "write the results as JSON here");
  cmd->add_option("--replays", o->replays, "timed graph replays per figure")
      ->check(CLI::Range(3, 1000));
  cmd->callback([o, &exit_code] { exit_code = run_bench(*o); });
}

}  // namespace mxlinear::cli
