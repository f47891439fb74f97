#include "timeline_command.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli_support.hpp"
#include "device_data.hpp"
#include "device_memory.hpp"
#include "exit_codes.hpp"
#include "harness.hpp"
#include "host/diagnostics.hpp"
#include "host/registry/registry.hpp"
#include "mxlinear/linear.hpp"
#include "mxlinear/quantize.hpp"

namespace mxlinear::cli {
namespace {

struct TimelineOptions {
  std::string kernel = "decode", config;
  std::int64_t m = 1, n = 2560, k = 6144;
  int calls = 16;
  int slowest = 8;  // CTAs listed one by one
};

// Room for this many CTAs' stamps (the kernels skip any CTA past it).
constexpr std::size_t kMaxCtas = std::size_t{1} << 20;

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// The CTAs that stored last (a call ends with its slowest CTA): their SM, how many of this
// call's CTAs ran on that SM, and each phase's time since the earliest entry.
void print_slowest(const std::vector<std::uint32_t>& host, const std::vector<std::size_t>& ctas,
                   std::uint32_t start, int count) {
  const auto last = [&](std::size_t c) {
    const std::uint32_t* s = &host[c * kTimelineStamps];
    std::uint32_t t = s[0];
    for (std::size_t p = 0; p < std::size(kTimelinePhases); ++p) {
      if (s[p] != 0 && static_cast<std::int32_t>(s[p] - t) > 0) t = s[p];
    }
    return static_cast<std::uint32_t>(t - start);
  };
  std::vector<std::size_t> order = ctas;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return last(a) != last(b) ? last(a) > last(b) : a < b;
  });
  std::vector<int> per_sm;
  for (std::size_t c : ctas) {
    const std::uint32_t sm = host[c * kTimelineStamps + kTimelineSmWord];
    if (sm == 0) continue;
    if (per_sm.size() < sm) per_sm.resize(sm, 0);
    ++per_sm[sm - 1];
  }
  const int shown = std::min(count, static_cast<int>(order.size()));
  if (shown <= 0) return;
  fmt::print("the {} CTAs that ended last (us since the earliest entry):\n{:>8} {:>4} {:>7}", shown,
             "cta", "sm", "on sm");
  for (const char* phase : kTimelinePhases) fmt::print(" {:>9}", phase);
  fmt::print("\n");
  for (int i = 0; i < shown; ++i) {
    const std::size_t c = order[static_cast<std::size_t>(i)];
    const std::uint32_t* s = &host[c * kTimelineStamps];
    const std::uint32_t sm = s[kTimelineSmWord];
    fmt::print("{:>8} {:>4} {:>7}", c, sm == 0 ? std::string("?") : std::to_string(sm - 1),
               sm == 0 ? 0 : per_sm[sm - 1]);
    for (std::size_t p = 0; p < std::size(kTimelinePhases); ++p) {
      if (s[p] == 0) {
        fmt::print(" {:>9}", "-");
      } else {
        fmt::print(" {:>9.2f}", static_cast<std::uint32_t>(s[p] - start) * 1e-3);
      }
    }
    fmt::print("\n");
  }
}

int run_timeline(const TimelineOptions& o) {
  // The kernel and config first: a bad name is refused with or without a GPU.
  require_config("--config", require_kernel("--kernel", o.kernel), o.config);
  note_unused_selection_switches("timeline", fmt::format("--kernel runs {} directly", o.kernel));
  if (!gpu_available()) {
    fmt::print(stderr, "mxlinear timeline: SKIPPED: no sm_90 GPU\n");
    return kExitSkipped;
  }
  if (!timeline_compiled()) {
    throw Error(ErrorCode::kUnsupported, "",
                "timeline: this build records no stamps; configure with -DMXLINEAR_TIMELINE=ON");
  }
  const Kernel* kernel = &registry_kernel(o.kernel);
  const std::string config = o.config.empty() ? kernel->default_config(o.m) : o.config;
  cudaDeviceProp prop{};
  cuda_or_throw(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  // Weights rotate through copies worth >= 3x L2, as in `mxlinear bench`.
  const auto bytes = static_cast<std::size_t>(o.n * o.k);
  const int copies = bench::rotation_copies(bytes, static_cast<std::size_t>(prop.l2CacheSize));
  DeviceMemory w(bytes * static_cast<std::size_t>(copies)),
      ws(bytes / 32 * static_cast<std::size_t>(copies)), x(static_cast<std::size_t>(o.m * o.k) * 2),
      xq(static_cast<std::size_t>(o.m * o.k)), xs(static_cast<std::size_t>(o.m * o.k / 32)),
      out(static_cast<std::size_t>(o.m * o.n) * 2),
      stamps(kMaxCtas * kTimelineStamps * sizeof(std::uint32_t));
  cudaStream_t stream = nullptr;
  cuda_or_throw(cudaStreamCreate(&stream), "cudaStreamCreate");
  bench::fill_e4m3(w.bytes(), bytes * static_cast<std::size_t>(copies), 1, stream);
  bench::fill_scales(ws.bytes(), bytes / 32 * static_cast<std::size_t>(copies), 2, 117, 124,
                     stream);
  bench::fill_bf16(x.ptr, static_cast<std::size_t>(o.m * o.k), 3, stream);
  const TensorView qv = TensorView::contiguous(xq.ptr, {o.m, o.k}, DType::kE4M3, Location::kDevice);
  const TensorView sv =
      TensorView::contiguous(xs.ptr, {o.m, o.k / 32}, DType::kE8M0, Location::kDevice);
  quantize(TensorView::contiguous(x.ptr, {o.m, o.k}, DType::kBF16, Location::kDevice), qv, sv,
           stream);
  const std::size_t workspace_bytes = kernel->workspace_bytes({o.m, o.n, o.k}, config);
  DeviceMemory workspace(workspace_bytes);
  cuda_or_throw(cudaMemsetAsync(stamps.ptr, 0, kMaxCtas * kTimelineStamps * 4, stream), "memset");
  auto* const words = static_cast<std::uint32_t*>(stamps.ptr);
  set_kernel_timeline(o.kernel, words, kMaxCtas);
  // Back to back, as in a model: every call overwrites the stamps, so the last one's remain,
  // with the launch overlap (PDL) of its predecessor.
  for (int i = 0; i < o.calls; ++i) {
    const std::size_t c = static_cast<std::size_t>(i % copies);
    const MxWeight weight{
        TensorView::contiguous(w.bytes() + c * bytes, {o.n, o.k}, DType::kE4M3, Location::kDevice),
        TensorView::contiguous(ws.bytes() + c * bytes / 32, {o.n, o.k / 32}, DType::kE8M0,
                               Location::kDevice)};
    kernel->run(
        KernelCall{QuantizedActivation{qv, sv, DType::kBF16}, weight, std::nullopt,
                   TensorView::contiguous(out.ptr, {o.m, o.n}, DType::kBF16, Location::kDevice),
                   LinearShape{o.m, o.n, o.k}, stream, Workspace{workspace.ptr, workspace_bytes}},
        config);
  }
  cuda_or_throw(cudaStreamSynchronize(stream), "sync");
  set_kernel_timeline(o.kernel, nullptr);
  std::vector<std::uint32_t> host(kMaxCtas * kTimelineStamps);
  cuda_or_throw(cudaMemcpy(host.data(), words, host.size() * 4, cudaMemcpyDeviceToHost),
                "download");
  cudaStreamDestroy(stream);

  // CTAs that recorded an entry; times relative to the earliest entry (modulo 2^32 ns).
  std::vector<std::size_t> ctas;
  for (std::size_t c = 0; c < kMaxCtas; ++c) {
    if (host[c * kTimelineStamps] != 0) ctas.push_back(c);
  }
  if (ctas.empty()) {
    fmt::print(stderr, "mxlinear timeline: no CTA recorded a stamp\n");
    return kExitFailed;
  }
  std::uint32_t start = host[ctas[0] * kTimelineStamps];
  for (std::size_t c : ctas) {
    if (static_cast<std::int32_t>(host[c * kTimelineStamps] - start) < 0) {
      start = host[c * kTimelineStamps];
    }
  }
  fmt::print("{} {} at M = {}, N = {}, K = {}: the last of {} calls back to back, {} CTAs\n",
             o.kernel, config, o.m, o.n, o.k, o.calls, ctas.size());
  if (const auto f = kernel->launch_footprint({o.m, o.n, o.k}, config)) {
    // Whether the grid fits one wave on this device (clusters counted whole).
    fmt::print("launch: {} CTAs; the device holds {} of them at once ({})\n", f->ctas,
               f->resident_ctas, f->ctas <= f->resident_ctas ? "one wave" : "more than one wave");
  }
  // Phases in the kernel's own order (the prefill consumers wait on the previous kernel after
  // their main loop); the last column is per CTA, from its own entry.
  fmt::print("{:<10} {:>9} {:>9} {:>9} {:>9}   {:>14}\n", "phase", "min us", "median", "p90",
             "max us", "median since entry");
  const int phases = static_cast<int>(std::size(kTimelinePhases));
  for (int p = 0; p < phases; ++p) {
    std::vector<double> at, since_entry;
    for (std::size_t c : ctas) {
      const std::uint32_t* s = &host[c * kTimelineStamps];
      if (s[p] == 0) continue;
      at.push_back(static_cast<std::uint32_t>(s[p] - start) * 1e-3);
      since_entry.push_back(static_cast<std::uint32_t>(s[p] - s[0]) * 1e-3);
    }
    if (at.empty()) continue;  // a phase this kernel or config does not mark
    fmt::print("{:<10} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f}   {:>14.2f}\n", kTimelinePhases[p],
               percentile(at, 0), percentile(at, 0.5), percentile(at, 0.9), percentile(at, 1),
               percentile(since_entry, 0.5));
  }
  print_slowest(host, ctas, start, o.slowest);
  return kExitOk;
}

}  // namespace

void add_timeline_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<TimelineOptions>();
  CLI::App* cmd =
      app.add_subcommand("timeline",
                         "Where one decode, gemv or prefill config's CTAs spend their time (a "
                         "-DMXLINEAR_TIMELINE=ON build)");
  cmd->add_option("--kernel", o->kernel, "decode, gemv or prefill")
      ->check(CLI::IsMember({"decode", "gemv", "prefill"}));
  cmd->add_option("--config", o->config, "the kernel's config (default: its default for M)");
  cmd->add_option("-m,--m", o->m, "tokens")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("-n,--n", o->n, "output features")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("-k,--k", o->k, "input features, a multiple of 32")
      ->check(multiple_of_32(std::int64_t{1} << 16));
  cmd->add_option("--calls", o->calls, "calls back to back; the last one's stamps are shown")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--slowest", o->slowest, "CTAs that ended last, listed with their SM")
      ->check(CLI::Range(0, 1 << 20));
  cmd->callback([o, &exit_code] { exit_code = run_timeline(*o); });
}

}  // namespace mxlinear::cli
