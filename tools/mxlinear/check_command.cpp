#include "check_command.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cli_support.hpp"
#include "device_memory.hpp"
#include "exit_codes.hpp"
#include "host/log.hpp"
#include "host/registry/registry.hpp"
#include "layer_data.hpp"
#include "mxlinear/error.hpp"
#include "mxlinear/linear.hpp"
#include "mxlinear/reference.hpp"

namespace mxlinear::cli {
namespace {

struct CheckOptions {
  LayerSpec spec;
  std::string out_dtype = "bf16";
  bool prequantized = false;
  bool cpu = false;
  std::string kernel;  // run this kernel and config directly instead of linear()'s selection
  std::string config;
  int repeat = 1;
  bool allow_slow_reference = false;
  std::string activation = "mx";  // mx (W8A8) or bf16 (W8A16)
  bool w8a16() const { return activation == "bf16"; }
};

// Multiply-adds per second of the fp64 reference passes on one CPU core, a ballpark measured on
// an x86 host (check --cpu at M = 512, N = K = 4096: 3 passes in 51 s; small layers run up to
// 3x faster from cache): enough to tell a check of seconds from one of hours.
constexpr double kReferenceMacsPerSecond = 5e8;
// A check whose CPU reference would take longer than this is refused without
// --allow-slow-reference.
constexpr double kReferenceSecondsAllowed = 60;

std::string duration_text(double seconds) {
  if (seconds < 120) return fmt::format("{:.0f} s", seconds);
  if (seconds < 7200) return fmt::format("{:.0f} minutes", seconds / 60);
  if (seconds < 172800) return fmt::format("{:.1f} hours", seconds / 3600);
  return fmt::format("{:.0f} days", seconds / 86400);
}

// Device copies of a host layer's operands and its output.
struct DeviceLayer {
  DeviceMemory x, xq, xs, wd, ws, bias, y;
  std::size_t out_bytes;
  explicit DeviceLayer(const HostLayer& layer, std::size_t out_size)
      : x(layer.x_bf16.size() * 2),
        xq(layer.x_data.size()),
        xs(layer.x_scales.size()),
        wd(layer.w_data.size()),
        ws(layer.w_scales.size()),
        bias(layer.bias_f32.size() * 4),
        y(out_size),
        out_bytes(out_size) {
    const auto up = [](const DeviceMemory& d, const void* h, std::size_t n) {
      cuda_or_throw(cudaMemcpy(d.ptr, h, n, cudaMemcpyHostToDevice), "upload");
    };
    up(x, layer.x_bf16.data(), layer.x_bf16.size() * 2);
    up(xq, layer.x_data.data(), layer.x_data.size());
    up(xs, layer.x_scales.data(), layer.x_scales.size());
    up(wd, layer.w_data.data(), layer.w_data.size());
    up(ws, layer.w_scales.data(), layer.w_scales.size());
    up(bias, layer.bias_f32.data(), layer.bias_f32.size() * 4);
  }
  static TensorView view(const DeviceMemory& d, std::int64_t r, std::int64_t c, DType t) {
    return TensorView::contiguous(d.ptr, {r, c}, t, Location::kDevice);
  }
  // Downloads the output into *out, or with out == nullptr poisons it (NaN in every dtype).
  void poison_and_download(std::vector<std::uint8_t>* out) const {
    if (out) {
      cuda_or_throw(cudaMemcpy(out->data(), y.ptr, out->size(), cudaMemcpyDeviceToHost),
                    "download");
    } else {
      cuda_or_throw(cudaMemset(y.ptr, 0xFF, out_bytes), "poison");
    }
  }
};

// W8A16's --kernel: the kernel and config through linear_with (the bf16 x as it is, laid out as
// the kernel's plan asks), `repeat` times, each on a poisoned output; `out` gets the first run.
// Returns how many later runs differed from it.
int run_kernel_w8a16(const HostLayer& layer, const Kernel& kernel, const CheckOptions& options,
                     std::vector<std::uint8_t>& out) {
  const LayerSpec& s = layer.spec;
  DeviceLayer d(layer, out.size());
  const MxWeight w{DeviceLayer::view(d.wd, s.n, s.k, DType::kE4M3),
                   DeviceLayer::view(d.ws, s.n, s.k / 32, DType::kE8M0)};
  std::optional<TensorView> b;
  if (s.bias) b = TensorView::contiguous(d.bias.ptr, {s.n}, DType::kF32, Location::kDevice);
  const std::string config = options.config.empty() ? kernel.default_config(s.m) : options.config;
  int differing = 0;
  std::vector<std::uint8_t> again(out.size());
  for (int r = 0; r < options.repeat; ++r) {
    d.poison_and_download(nullptr);
    linear_with(kernel, config, DeviceLayer::view(d.x, s.m, s.k, DType::kBF16), w, b,
                DeviceLayer::view(d.y, s.m, s.n, s.out_dtype), nullptr, {},
                LinearOptions{.activation = ActivationMode::kW8A16});
    cuda_or_throw(cudaDeviceSynchronize(), "kernel");
    d.poison_and_download(r == 0 ? &out : &again);
    if (r > 0 && again != out) ++differing;
  }
  return differing;
}

// Runs one kernel and config directly on the pre-quantized activation, `repeat` times, each on
// a poisoned output; `out` gets the first run. Returns how many later runs differed from it.
int run_kernel_directly(const HostLayer& layer, const CheckOptions& options,
                        std::vector<std::uint8_t>& out) {
  const LayerSpec& s = layer.spec;
  const Kernel* kernel = &registry_kernel(options.kernel);
  if (options.w8a16()) return run_kernel_w8a16(layer, *kernel, options, out);
  DeviceLayer d(layer, out.size());
  KernelCall call;
  call.x = QuantizedActivation{DeviceLayer::view(d.xq, s.m, s.k, DType::kE4M3),
                               DeviceLayer::view(d.xs, s.m, s.k / 32, DType::kE8M0), DType::kBF16};
  call.weight = MxWeight{DeviceLayer::view(d.wd, s.n, s.k, DType::kE4M3),
                         DeviceLayer::view(d.ws, s.n, s.k / 32, DType::kE8M0)};
  if (s.bias) call.bias = TensorView::contiguous(d.bias.ptr, {s.n}, DType::kF32, Location::kDevice);
  call.out = DeviceLayer::view(d.y, s.m, s.n, s.out_dtype);
  call.shape = LinearShape{s.m, s.n, s.k};
  const std::string config = options.config.empty() ? kernel->default_config(s.m) : options.config;
  // Scratch the kernel asks for (the prefill kernel's bf16 activation), as linear() provides.
  const std::size_t scratch_bytes = kernel->workspace_bytes(call.shape, config);
  DeviceMemory scratch(scratch_bytes);
  call.workspace = Workspace{scratch.ptr, scratch_bytes};
  int differing = 0;
  std::vector<std::uint8_t> again(out.size());
  for (int r = 0; r < options.repeat; ++r) {
    d.poison_and_download(nullptr);
    kernel->run(call, config);
    cuda_or_throw(cudaDeviceSynchronize(), "kernel");
    d.poison_and_download(r == 0 ? &out : &again);
    if (r > 0 && again != out) ++differing;
  }
  return differing;
}

// Runs the layer through linear() on the GPU; returns the kernel/config that served it.
std::string run_on_gpu(HostLayer& layer, bool prequantized, bool w8a16,
                       std::vector<std::uint8_t>& out) {
  const LayerSpec& s = layer.spec;
  DeviceLayer dev(layer, out.size());
  dev.poison_and_download(nullptr);
  const MxWeight w{DeviceLayer::view(dev.wd, s.n, s.k, DType::kE4M3),
                   DeviceLayer::view(dev.ws, s.n, s.k / 32, DType::kE8M0)};
  std::optional<TensorView> b;
  if (s.bias) b = TensorView::contiguous(dev.bias.ptr, {s.n}, DType::kF32, Location::kDevice);
  const TensorView o = DeviceLayer::view(dev.y, s.m, s.n, s.out_dtype);
  if (prequantized) {
    linear(
        QuantizedActivation{DeviceLayer::view(dev.xq, s.m, s.k, DType::kE4M3),
                            DeviceLayer::view(dev.xs, s.m, s.k / 32, DType::kE8M0), DType::kBF16},
        w, b, o, nullptr);
  } else {
    linear(DeviceLayer::view(dev.x, s.m, s.k, DType::kBF16), w, b, o, nullptr, {},
           LinearOptions{.activation = w8a16 ? ActivationMode::kW8A16 : ActivationMode::kW8A8});
  }
  cuda_or_throw(cudaDeviceSynchronize(), "linear");
  dev.poison_and_download(&out);
  const DeviceDescription device = DeviceDescription::current();
  LayerDescription desc;
  desc.n = s.n;
  desc.k = s.k;
  desc.out_dtype = s.out_dtype;
  if (s.bias) desc.bias_dtype = DType::kF32;
  if (w8a16) desc.operand = ActivationOperand::kBf16;
  const Registry& registry = Registry::global();
  const Dispatch d = registry.dispatch(registry.select(desc, device), device, s.m);
  return d.kernel ? fmt::format("{}/{} on {}", d.kernel->name(), d.config, device.name)
                  : std::string("none");
}

DType parse_out_dtype(const std::string& name) {
  if (name == "bf16") return DType::kBF16;
  if (name == "fp16") return DType::kF16;
  return DType::kF32;
}

// Half an ulp of the output type at 1.0: the rounding a correct kernel may add.
double output_unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return std::ldexp(1.0, -8);
    case DType::kF16:
      return std::ldexp(1.0, -11);
    default:
      return std::ldexp(1.0, -24);
  }
}

// Where a wrong result lives: the worst element and the rows and 64-column tiles of the
// outliers (each list cut at 16), which tells a broken tile or token from scattered rounding.
void print_error_location(const ErrorStats& stats, std::int64_t n) {
  const auto un = static_cast<std::size_t>(n);
  fmt::print("  worst   m={} n={}  outliers {}\n", stats.worst_index / un, stats.worst_index % un,
             stats.outliers.size());
  if (stats.outliers.empty()) return;
  std::set<std::size_t> rows, tiles;
  for (std::size_t i : stats.outliers) {
    rows.insert(i / un);
    tiles.insert(i % un / 64);
  }
  const auto first_16 = [](const std::set<std::size_t>& values) {
    std::vector<std::size_t> v(values.begin(), values.end());
    if (v.size() > 16) v.resize(16);
    return fmt::format("{}{}", fmt::join(v, ","), values.size() > 16 ? ",..." : "");
  };
  fmt::print("  outlier rows m ({}): {}\n", rows.size(), first_16(rows));
  fmt::print("  outlier column tiles n/64 ({}): {}\n", tiles.size(), first_16(tiles));
}

// Refuses, before anything runs, what cannot run: an unknown kernel or config, and a layer
// whose CPU reference would take hours (unless the caller allows it).
void validate(const CheckOptions& options, bool reference_on_cpu) {
  if (options.w8a16() && options.prequantized) {
    throw Error(ErrorCode::kInvalidArgument, "--prequantized",
                "check: --prequantized feeds an MX activation; --activation bf16 (W8A16) "
                "multiplies the bf16 activation as it is");
  }
  if (!options.kernel.empty()) {
    const Kernel& kernel = require_kernel("--kernel", options.kernel);
    require_config("--config", kernel, options.config);
    if ((kernel.activation_mode() == ActivationMode::kW8A16) != options.w8a16()) {
      throw Error(ErrorCode::kInvalidArgument, "--kernel",
                  fmt::format("check: --kernel is '{}', a {} kernel; --activation {} needs a {} "
                              "kernel",
                              options.kernel,
                              kernel.activation_mode() == ActivationMode::kW8A16 ? "W8A16" : "W8A8",
                              options.activation, options.w8a16() ? "W8A16" : "W8A8"));
    }
  }
  const LayerSpec& s = options.spec;
  const double macs =
      static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  // The fp64 result of the MX layer and of the unquantized layer, and the kernel itself where
  // the CPU reference runs it.
  const int passes = reference_on_cpu ? 3 : 2;
  const double seconds = passes * macs / kReferenceMacsPerSecond;
  if (seconds > kReferenceSecondsAllowed && !options.allow_slow_reference) {
    throw Error(
        ErrorCode::kInvalidArgument, "--m",
        fmt::format("check: --m {} --n {} --k {} needs {} CPU passes of M*N*K = {:.2g} "
                    "multiply-adds for its fp64 reference, about {} at ~{:.2g} per second (the "
                    "limit is {:.0f} s); choose a smaller --m, --n or --k, or pass "
                    "--allow-slow-reference to run it anyway",
                    s.m, s.n, s.k, passes, macs, duration_text(seconds), kReferenceMacsPerSecond,
                    kReferenceSecondsAllowed));
  }
}

int run_check(const CheckOptions& options) {
  const bool gpu = gpu_available();
  const bool on_gpu = !options.cpu && gpu;
  validate(options, options.kernel.empty() && !on_gpu);
  if (!options.kernel.empty()) {
    note_unused_selection_switches(
        "check", fmt::format("--kernel runs {} directly", detail::for_display(options.kernel)));
  } else if (!on_gpu) {
    note_unused_selection_switches(
        "check", options.cpu ? "--cpu runs the CPU reference directly"
                             : "with no sm_90 GPU here the CPU reference runs directly");
  }
  if (!options.kernel.empty() && !gpu) {
    fmt::print("mxlinear check: --kernel needs an sm_90 GPU; this machine has none (skipped)\n");
    return kExitSkipped;
  }
  LayerSpec spec = options.spec;
  spec.out_dtype = parse_out_dtype(options.out_dtype);
  if (spec.seed == 0) spec.seed = std::random_device{}();
  HostLayer layer = make_random_layer(spec);
  const auto count = static_cast<std::size_t>(spec.m * spec.n);

  std::vector<double> exact(count);
  if (options.w8a16()) {
    reference_linear_w8a16_f64(layer.x_view(), layer.weight_view(), layer.bias_view(),
                               exact.data());
  } else {
    reference_linear_f64(layer.activation_view(), layer.weight_view(), layer.bias_view(),
                         exact.data());
  }

  std::vector<std::uint8_t> out(count * element_size(spec.out_dtype));
  const TensorView out_view =
      TensorView::contiguous(out.data(), {spec.m, spec.n}, spec.out_dtype, Location::kHost);
  std::string kernel_name = "reference (CPU, fp64 accumulation)";
  int differing_runs = 0;
  if (!options.kernel.empty()) {
    detail::log(detail::LogLevel::kInfo,
                fmt::format("check: {} x {} x {}: {}/{} run directly, without kernel selection",
                            spec.m, spec.n, spec.k, options.kernel,
                            options.config.empty() ? "(its default)" : options.config));
    differing_runs = run_kernel_directly(layer, options, out);
    kernel_name = fmt::format("{}/{} (run directly, {}, {} runs)", options.kernel, options.config,
                              options.w8a16() ? "bf16 activation" : "pre-quantized activation",
                              options.repeat);
  } else if (on_gpu) {
    kernel_name = run_on_gpu(layer, options.prequantized, options.w8a16(), out);
  } else {
    detail::log(
        detail::LogLevel::kInfo,
        fmt::format("check: {} x {} x {}: the CPU reference kernel, run directly ({})", spec.m,
                    spec.n, spec.k, options.cpu ? "--cpu" : "no sm_90 GPU on this machine"));
    if (options.w8a16()) {
      reference_linear_w8a16(layer.x_view(), layer.weight_view(), layer.bias_view(), out_view);
    } else if (options.prequantized) {
      reference_linear(layer.activation_view(), layer.weight_view(), layer.bias_view(), out_view);
    } else {
      reference_linear(layer.x_view(), layer.weight_view(), layer.bias_view(), out_view);
    }
  }
  const ErrorStats kernel = compare_with_f64(out.data(), spec.out_dtype, exact);

  // The unquantized layer (bf16 activations, fp32 weights) in fp64: the cost of MXFP8 itself.
  std::vector<double> unquantized(count, 0.0);
  for (std::int64_t m = 0; m < spec.m; ++m) {
    for (std::int64_t n = 0; n < spec.n; ++n) {
      double acc = layer.bias_f32.empty() ? 0.0 : layer.bias_f32[static_cast<std::size_t>(n)];
      for (std::int64_t k = 0; k < spec.k; ++k) {
        std::uint32_t bits =
            static_cast<std::uint32_t>(layer.x_bf16[static_cast<std::size_t>(m * spec.k + k)])
            << 16;
        float x;
        std::memcpy(&x, &bits, sizeof x);
        acc += static_cast<double>(x) * layer.w_f32[static_cast<std::size_t>(n * spec.k + k)];
      }
      unquantized[static_cast<std::size_t>(m * spec.n + n)] = acc;
    }
  }
  std::vector<float> exact_f32(exact.begin(), exact.end());
  const ErrorStats quantization = compare_with_f64(exact_f32.data(), DType::kF32, unquantized);

  fmt::print("mxlinear check: kernel {}\n", kernel_name);
  fmt::print("  layer   M={} N={} K={} out={} bias={} activation={} seed={}\n", spec.m, spec.n,
             spec.k, to_string(spec.out_dtype), spec.bias ? "fp32" : "none",
             options.w8a16()
                 ? "bf16 as it is (W8A16)"
                 : (options.prequantized ? "pre-quantized e4m3" : "bf16 (quantized inside, RCEIL)"),
             spec.seed);
  fmt::print(
      "  kernel vs fp64 MX result     rel Frobenius {:.3e}  max abs {:.3e}  NaN {}  "
      "(output rounding alone: ~{:.1e})\n",
      kernel.relative_frobenius, kernel.max_abs, kernel.nan_count,
      output_unit_roundoff(spec.out_dtype) / std::sqrt(3.0));
  fmt::print("  {} vs unquantized fp64 rel Frobenius {:.3e}  (the cost of MXFP8 itself)\n",
             options.w8a16() ? "W8A16 layer" : "MX layer", quantization.relative_frobenius);
  // A correct kernel adds its output rounding (about u/sqrt(3) in the Frobenius norm) and the
  // fp32 accumulation error. For bf16/fp16 output one unit roundoff u bounds both; for fp32
  // output the accumulation dominates and docs/MXFP8.md allows a relative Frobenius error of
  // 1e-5, growing like sqrt(K / 8192) beyond 8192 terms (a sum's typical rounding error).
  const double allowed = spec.out_dtype == DType::kF32
                             ? 1e-5 * std::sqrt(std::max(1.0, static_cast<double>(spec.k) / 8192.0))
                             : output_unit_roundoff(spec.out_dtype);
  if (options.repeat > 1) {
    fmt::print("  repeats {} of {} later runs differ from the first bit for bit\n", differing_runs,
               options.repeat - 1);
  }
  const bool ok =
      kernel.nan_count == 0 && kernel.relative_frobenius <= allowed && differing_runs == 0;
  if (!ok) print_error_location(kernel, spec.n);
  fmt::print("  result  {}\n", ok ? "PASS" : "FAIL");
  return ok ? kExitOk : kExitFailed;
}

}  // namespace

void add_check_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<CheckOptions>();
  CLI::App* cmd = app.add_subcommand(
      "check",
      "Run one random layer and print its error vs fp64; it passes within docs/MXFP8.md's bound "
      "(relative Frobenius error: one unit roundoff for a bf16/fp16 output; for fp32 1e-5, times "
      "sqrt(K / 8192) beyond K = 8192) with no NaN");
  cmd->add_option("-m,--m", options->spec.m, "tokens (rows of the activation)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  cmd->add_option("-n,--n", options->spec.n, "output features")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 16));
  cmd->add_option("-k,--k", options->spec.k, "input features, a multiple of 32")
      ->check(multiple_of_32(std::int64_t{1} << 16));
  cmd->add_option("--out-dtype", options->out_dtype, "bf16, fp16 or fp32")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  cmd->add_flag("--bias", options->spec.bias, "add an fp32 bias");
  cmd->add_option("--activation", options->activation,
                  "mx (W8A8: x quantized to MXFP8) or bf16 (W8A16: x as it is)")
      ->check(CLI::IsMember({"mx", "bf16"}));
  cmd->add_flag("--prequantized", options->prequantized,
                "feed the pre-quantized activation entry point");
  cmd->add_option("--seed", options->spec.seed, "random seed (0: a fresh one)")
      ->check(non_negative_integer());
  cmd->add_flag("--cpu", options->cpu, "run the CPU reference kernel even where a GPU is present");
  CLI::Option* kernel = cmd->add_option(
      "--kernel", options->kernel,
      "run this registry kernel directly (e.g. decode) on the pre-quantized activation (W8A8) "
      "or through linear() on the bf16 one (a W8A16 kernel, with --activation bf16); needs an "
      "sm_90a GPU; default: none, the registry selects");
  cmd->add_option("--config", options->config,
                  "with --kernel: the kernel's config (default: its default for M)")
      ->needs(kernel);
  cmd->add_option("--repeat", options->repeat,
                  "with --kernel: runs, each compared bit for bit with the first")
      ->check(CLI::Range(1, 10000))
      ->needs(kernel);
  cmd->add_flag("--allow-slow-reference", options->allow_slow_reference,
                fmt::format("run layers whose fp64 CPU reference would take over {:.0f} s "
                            "(refused by default, with the estimate)",
                            kReferenceSecondsAllowed));
  cmd->callback([options, &exit_code] { exit_code = run_check(*options); });
}

int run_example() {
  CheckOptions options;
  options.spec = LayerSpec{64, 1024, 2048, DType::kBF16, true, 0};
  return run_check(options);
}

}  // namespace mxlinear::cli
