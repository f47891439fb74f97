// The kernel registry: per-layer selection and per-call dispatch over an ordered kernel list
// (mxlinear/selection.hpp describes the order), the environment switches, and the checks that
// decide whether a kernel may serve a call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "host/registry/kernel.hpp"
#include "mxlinear/error.hpp"
#include "mxlinear/linear_types.hpp"
#include "mxlinear/models.hpp"
#include "mxlinear/selection.hpp"
#include "mxlinear/tuned_table.hpp"

namespace mxlinear {

// Environment switches (docs/TUNED_TABLES.md): MXLINEAR_DISABLED_KERNELS=a,b,
// MXLINEAR_BACKEND=auto|<kernel>, MXLINEAR_LOG=warn|info|debug, MXLINEAR_TUNED_TABLES=p1:p2,
// MXLINEAR_COST_MODEL=1|0, MXLINEAR_ACTIVATION=mx|bf16, MXLINEAR_BATCH_INVARIANT=1|0.
struct Environment {
  std::vector<std::string> disabled;
  std::string backend = "auto";
  std::string log = "warn";
  std::vector<std::string> tuned_tables;
  // MXLINEAR_COST_MODEL: 1 (default), a call no tuned row covers takes the config the cost model
  // rates fastest; 0, it keeps the selected kernel's default config. Any other value is kept
  // here for the registry's warning, and the default applies.
  bool cost_model = true;
  std::string cost_model_invalid;
  // MXLINEAR_ACTIVATION: mx (W8A8, the default) or bf16 (W8A16), the mode of linear() calls
  // that do not choose one. Any other value is kept here for the registry's warning, and the
  // default applies.
  ActivationMode activation = ActivationMode::kW8A8;
  std::string activation_invalid;
  // MXLINEAR_BATCH_INVARIANT: 1, linear() calls that do not choose run in the batch-invariant
  // mode; 0 (default), they do not. Any other value is kept for the registry's warning.
  bool batch_invariant = false;
  std::string batch_invariant_invalid;
  // Reads the variables through `get` (getenv by default).
  static Environment from(const std::map<std::string, std::string>& vars);
  static Environment from_process();
};

// Whether a kernel may serve a call, and if not why: the reason as linear_with() reports it
// ("is 'gemv', which cannot run this 1 x 262144 layer: ..."), the argument it is about
// ("kernel" or "config") and the error code.
struct CallVerdict {
  std::string reason;
  std::string argument;
  ErrorCode code = ErrorCode::kUnsupported;
  bool ok() const { return reason.empty(); }
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
                                const DeviceDescription& device, DType out_dtype,
                                ActivationOperand operand = ActivationOperand::kMx,
                                bool batch_invariant = false,
                                std::span<const std::int64_t> ms = kReportTokenCounts) const;

  // Whether `kernel` can serve an M-row call of `layer` on `device` with `config`: it implements
  // the layer, knows the config, the config runs this M and K, keeps a fixed K order where the
  // layer asks for the batch-invariant mode, and the kernel runs on the device, in that order.
  // dispatch() takes a tuned row only where it can, and linear_with() refuses a kernel that cannot.
  // `kernel` need not be one of kernels().
  CallVerdict runnable(const Kernel& kernel, std::string_view config, const LayerDescription& layer,
                       std::int64_t m, const DeviceDescription& device) const;

  // Whether linear() may serve calls on `device` (CUDA device `ordinal`): where no kernel but
  // the CPU reference runs there, only MXLINEAR_BACKEND=reference lets the reference serve them
  // (it copies through the host and synchronizes the stream, so it is slow and cannot be
  // captured in a graph). The reason is phrased about linear()'s argument 'x' and names the
  // device.
  Verdict check_device(const DeviceDescription& device, int ordinal) const;

  // The most scratch any kernel plans for a call of `rows` x K on `device`.
  std::size_t max_scratch_bytes(std::int64_t rows, std::int64_t k,
                                const DeviceDescription& device) const;

  // Warnings from reading the environment and the tables.
  const std::vector<std::string>& warnings() const { return warnings_; }
  const std::vector<std::shared_ptr<const Kernel>>& kernels() const { return kernels_; }
  const TunedTable& table() const { return table_; }
  const Environment& environment() const { return env_; }
  // The kernel of that name, or nullptr.
  const Kernel* find(std::string_view name) const;

 private:
  std::vector<std::shared_ptr<const Kernel>> kernels_;
  // Each kernel's configs() as a set, asked once: dispatch() checks a row's config per call.
  std::map<const Kernel*, std::set<std::string, std::less<>>> configs_;
  TunedTable table_;
  Environment env_;
  std::vector<std::string> warnings_;

  // The config the cost model rates fastest for M rows of the selection's layer among the
  // kernels that may serve it (the forced backend alone where it claims the layer), or nullopt
  // where no modelled config can run.
  std::optional<Dispatch> modelled(const LayerSelection& selection, const DeviceDescription& device,
                                   std::int64_t m) const;
  // The batch-invariant mode's choice for M rows: a tuned row of the selected kernel with a
  // config that keeps the K order, else the cost model's among those configs, else the first
  // that runs M.
  Dispatch invariant_dispatch(const LayerSelection& selection, const DeviceDescription& device,
                              std::int64_t m) const;
  // The first kernel of the layer's mode that needs no tuned rows (the generic kernel) and may
  // serve it: not disabled, supported, able, and the forced backend where it claims the layer;
  // or nullptr.
  const Kernel* untuned_fallback(const LayerSelection& selection,
                                 const DeviceDescription& device) const;
  // The cost model's choices, made once per layer, device and M: pricing every config takes
  // ~0.1 ms of host time, far more than a call may spend. Shared by copies of the registry.
  struct ModelCache;
  std::shared_ptr<ModelCache> model_cache_;
};

// Whether `kernel` is the CPU reference, the kernel of last resort: on device memory it copies
// through the host and synchronizes the stream.
bool is_cpu_reference(const Kernel& kernel);

// The log lines of a selection and of a dispatch, as linear() and `mxlinear select` write them:
// "layer N x K (<out> out) on <device>: <kernel>" and "M x N x K: <kernel>/<config> (<why>)".
std::string selection_log_line(std::int64_t n, std::int64_t k, DType out,
                               const DeviceDescription& device, std::string_view kernel);
std::string dispatch_log_line(std::int64_t m, std::int64_t n, std::int64_t k, const Dispatch& d);

// The cost model's estimate, in microseconds, of an M-row call of `layer` on `device` with
// `kernel` and `config`, the activation as most callers pass it (16-bit, 16-byte aligned rows);
// nullopt where the config cannot run M and K or describes no work to price. What the registry
// ranks configs by where no tuned row covers a call, and what `mxlinear bench --all-configs`
// records beside each config's time.
std::optional<double> estimated_call_us(const Kernel& kernel, const std::string& config,
                                        const LayerDescription& layer, std::int64_t m,
                                        const DeviceDescription& device);

// The built-in kernels in preference order, and the context their tuned rows are parsed with.
std::vector<std::shared_ptr<const Kernel>> builtin_kernels();
TableContext table_context(const std::vector<std::shared_ptr<const Kernel>>& kernels);

// linear() on a bf16/fp16 activation with this kernel and config instead of the registry's
// choice, through the same path: the activation reaches the kernel in the form its plan()
// asks for. For tuners, which must time a config the way callers will run it. Throws
// kUnsupported when the kernel cannot run the layer (Registry::runnable()), and what the kernel's
// run() throws.
void linear_with(const Kernel& kernel, const std::string& config, const TensorView& x,
                 const MxWeight& weight, const std::optional<TensorView>& bias,
                 const TensorView& out, cudaStream_t stream, const Workspace& workspace = {},
                 const LinearOptions& options = {});

// linear_workspace_bytes() for `device` instead of the current one.
std::size_t linear_workspace_bytes(std::int64_t rows, std::int64_t k,
                                   const DeviceDescription& device);

}  // namespace mxlinear
