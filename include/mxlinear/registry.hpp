// Kernel registry and per-layer selection. A device has an ordered kernel list: Hopper tuned
// kernels first, then the generic GPU kernel, then the CPU reference. A layer gets the first
// kernel that supports the device and can implement the layer; a tuned kernel can implement only
// shapes its tuned table has rows for. Per call, a tuned row for the call's M may hand the call to
// another kernel and config (e.g. the generic kernel where it is faster).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxlinear/linear_types.hpp"
#include "mxlinear/models.hpp"
#include "mxlinear/tuned_table.hpp"

namespace mxlinear {

// The device selection is made for: the current GPU, the CPU, or a described (fake) one.
struct DeviceDescription {
  std::string name = "cpu";
  std::string arch = "cpu";  // "sm_90a" for compute capability 9.0
  int sms = 0;
  bool is_gpu = false;

  // The current CUDA device, or the CPU when there is none.
  static DeviceDescription current();
  // "cpu", or "<arch>:<sms>" such as "sm_90a:132" (for reports and tests without that GPU).
  static DeviceDescription parse(const std::string& spec);
  std::string to_string() const;
};

// What a kernel needs to know of a layer to say whether it can run it.
struct LayerDescription {
  std::int64_t n = 0, k = 0;
  DType out_dtype = DType::kBF16;
  std::optional<DType> bias_dtype;
  int alignment = 16;  // bytes: the largest power of two dividing every data address and stride
  int scale_alignment = 4;  // bytes: the same for the scale matrices
};

// A run of 32-bit words in a kernel's scratch (KernelCall::workspace): byte offset and count.
struct ScratchWords {
  std::size_t offset = 0;
  std::size_t count = 0;
};

// Ok, or the reason not.
struct Verdict {
  std::string reason;
  bool ok() const { return reason.empty(); }
};

// One call after validation; every kernel runs on an already quantized activation (the linear
// quantizes bf16 input first), so every kernel serves both entry points.
struct KernelCall {
  QuantizedActivation x;
  MxWeight weight;
  std::optional<TensorView> bias;
  TensorView out;
  LinearShape shape;
  cudaStream_t stream = nullptr;
  Workspace workspace;  // at least the kernel's workspace_bytes() for this call
  // The workspace already starts with x dequantized to bf16 in the prefill kernel's layout, and
  // its scratch_words_to_zero() are zero (both done by the linear's quantization pass for
  // kernels that take_dequantized_activation()).
  bool x_dequantized_in_workspace = false;
  // The caller's bf16/fp16 activation, for a kernel that quantizes it itself
  // (quantizes_activation()); x then holds no data (the linear skipped its quantization).
  std::optional<TensorView> x_unquantized = std::nullopt;
};

struct LaunchFootprint {
  std::int64_t ctas = 0;           // CTAs the launch has
  std::int64_t resident_ctas = 0;  // CTAs the device can hold at once for this launch
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual std::string_view name() const = 0;
  // The config names run() accepts; tuned rows must name one of them.
  virtual std::vector<std::string> configs() const = 0;
  virtual Verdict is_supported(const DeviceDescription& device) const = 0;
  virtual Verdict can_implement(const LayerDescription& layer) const = 0;
  // Whether `config` (one of configs()) can run M rows of a layer with this K: K splits and
  // shared memory. dispatch() hands a call only to a config that can, so a row borrowed from
  // another shape never names one that would refuse it; run() refuses the same calls with the
  // same reason.
  virtual Verdict can_run(std::int64_t m, std::int64_t k, std::string_view config) const {
    (void)m;
    (void)k;
    (void)config;
    return {};
  }
  // A tuned kernel claims a layer only where the tuned table has rows for its (N, K).
  virtual bool needs_tuned_rows() const { return false; }
  // Whether a tuning sweep should time this config at M (the decode kernel is built for small
  // M; it runs any M correctly, but one token tile after another).
  virtual bool worth_sweeping(std::int64_t m, std::string_view config) const {
    (void)m;
    (void)config;
    return true;
  }
  // The config for M when no tuned row names one.
  virtual std::string default_config(std::int64_t m) const = 0;
  // Layout preprocessing: a pure rewrite of `in` into `out` (same shapes). Whether its result
  // may be stored by a weight cache and reloaded without running it again.
  virtual void prepare_weights(const MxWeight& in, const MxWeight& out,
                               cudaStream_t stream) const = 0;
  virtual bool prepared_weights_cacheable() const = 0;
  // Device scratch a call with this shape and config needs (KernelCall::workspace).
  virtual std::size_t workspace_bytes(const LinearShape& shape, const std::string& config) const {
    (void)shape;
    (void)config;
    return 0;
  }
  // Words of the scratch this config needs zeroed before it runs (the prefill kernel's stream-K
  // flags). The pass that writes its dequantized activation zeroes them; run() zeroes them itself
  // otherwise. None by default.
  virtual ScratchWords scratch_words_to_zero(const LinearShape& shape,
                                             const std::string& config) const {
    (void)shape;
    (void)config;
    return {};
  }
  // Whether this config reads the activation dequantized to bf16 (activation_bf16.hpp's layout)
  // from the start of its workspace: the linear's bf16 entry point then writes it in the same
  // pass as the quantization and sets KernelCall::x_dequantized_in_workspace.
  virtual bool takes_dequantized_activation(const std::string& config) const {
    (void)config;
    return false;
  }
  // Whether this config quantizes the linear's bf16/fp16 activation `x` itself (RCEIL, the
  // same bytes as the quantize kernel): the linear's bf16 entry point then skips its
  // quantization and passes x as KernelCall::x_unquantized.
  virtual bool quantizes_activation(const std::string& config, const TensorView& x) const {
    (void)config;
    (void)x;
    return false;
  }
  // The launch `run()` would make for this shape and config: its CTAs, and how many of them the
  // current device can hold at once (whole clusters where the config launches clusters). A grid
  // with more CTAs than that runs in more than one wave. nullopt where the kernel does not say.
  virtual std::optional<LaunchFootprint> launch_footprint(const LinearShape& shape,
                                                          const std::string& config) const {
    (void)shape;
    (void)config;
    return std::nullopt;
  }
  virtual void run(const KernelCall& call, const std::string& config) const = 0;
};

struct Rejection {
  std::string kernel;
  std::string reason;
};

// The selection for one layer on one device.
struct LayerSelection {
  LayerDescription layer;
  const Kernel* kernel = nullptr;  // null only if every kernel refused (see rejected)
  std::vector<Rejection> rejected;
  std::vector<std::string> warnings;
};

// The kernel and config serving one call.
struct Dispatch {
  const Kernel* kernel = nullptr;
  std::string config;
  // "tuned row <source>", "tuned row <source> of the nearest tuned shape N x K" (a shape with
  // no rows of its own) or "default config"
  std::string why;
  // The nearest tuned shape whose row this is ({0, 0}: the layer's own row, or none).
  std::int64_t borrowed_n = 0, borrowed_k = 0;
};

// Environment switches (docs/TUNED_TABLES.md): MXLINEAR_DISABLED_KERNELS=a,b,
// MXLINEAR_BACKEND=auto|<kernel>, MXLINEAR_LOG=warn|info|debug, MXLINEAR_TUNED_TABLES=p1:p2,
// MXLINEAR_NEAREST_ROWS=1|0.
struct Environment {
  std::vector<std::string> disabled;
  std::string backend = "auto";
  std::string log = "warn";
  std::vector<std::string> tuned_tables;
  // MXLINEAR_NEAREST_ROWS: 1 (default), a shape without rows borrows the nearest tuned shape's;
  // 0, it keeps the fallback kernel's default configs. Any other value is kept here for the
  // registry's warning, and the default applies.
  bool nearest_rows = true;
  std::string nearest_rows_invalid;
  // Reads the variables through `get` (getenv by default).
  static Environment from(const std::map<std::string, std::string>& vars);
  static Environment from_process();
};

struct ReportRow {
  ModelLayer layer;
  LayerSelection selection;
  std::vector<std::pair<std::int64_t, Dispatch>> per_m;  // dispatch at M = 1, 32, ..., 8192
};

class Registry {
 public:
  // kernels in preference order (tuned kernels first).
  Registry(std::vector<std::shared_ptr<const Kernel>> kernels, TunedTable table,
           Environment environment);

  // The process-wide registry: built-in kernels, the shipped tables under configs/, the
  // tables of MXLINEAR_TUNED_TABLES and the process environment. Warnings go to the log once.
  static const Registry& global();

  LayerSelection select(const LayerDescription& layer, const DeviceDescription& device) const;
  Dispatch dispatch(const LayerSelection& selection, const DeviceDescription& device,
                    std::int64_t m) const;
  std::vector<ReportRow> report(const std::vector<ModelLayer>& layers,
                                const DeviceDescription& device, DType out_dtype) const;

  // Warnings from reading the environment and the tables.
  const std::vector<std::string>& warnings() const { return warnings_; }
  const std::vector<std::shared_ptr<const Kernel>>& kernels() const { return kernels_; }
  const TunedTable& table() const { return table_; }
  const Environment& environment() const { return env_; }

 private:
  const Kernel* find(std::string_view name) const;
  std::vector<std::shared_ptr<const Kernel>> kernels_;
  TunedTable table_;
  Environment env_;
  std::vector<std::string> warnings_;
};

// The built-in kernels in preference order, and the context their tuned rows are parsed with.
std::vector<std::shared_ptr<const Kernel>> builtin_kernels();
TableContext table_context(const std::vector<std::shared_ptr<const Kernel>>& kernels);

// linear() on a bf16/fp16 activation with this kernel and config instead of the registry's
// choice, through the same path: the kernel quantizes x itself, reads it dequantized from the
// quantization pass, or takes the e4m3 activation, as it declares. For tuners, which must time
// a config the way callers will run it. Throws kUnsupported when the kernel cannot run the
// layer, and what the kernel's run() throws for a config it does not know.
void linear_with(const Kernel& kernel, const std::string& config, const TensorView& x,
                 const MxWeight& weight, const std::optional<TensorView>& bias,
                 const TensorView& out, cudaStream_t stream, const Workspace& workspace = {});

// Pretty and JSON forms of a report (the CLI's `select`).
std::string format_report(const std::vector<ReportRow>& rows, const DeviceDescription& device);
std::string report_json(const std::vector<ReportRow>& rows, const DeviceDescription& device);

}  // namespace mxlinear
