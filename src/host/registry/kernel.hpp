// The interface every kernel in the registry implements, and what a call hands it. The contract
// is one way: a kernel says what a call needs (plan()), the linear provides it, then run() reads
// it. The linear knows no kernel by name.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "host/registry/cost_model.hpp"
#include "mxlinear/linear_types.hpp"
#include "mxlinear/selection.hpp"

namespace mxlinear {

// Ok, or the reason not.
struct Verdict {
  std::string reason;
  bool ok() const { return reason.empty(); }
};

// A run of 32-bit words in a kernel's scratch (KernelCall::workspace): byte offset and count.
struct ScratchWords {
  std::size_t offset = 0;
  std::size_t count = 0;
};

// How the activation reaches a kernel's run().
enum class ActivationForm : std::uint8_t {
  // e4m3 data and E8M0 scales (KernelCall::x): the caller's, or written by the linear's
  // quantization pass (RCEIL).
  kQuantized,
  // x dequantized to bf16 (W8A8), or a bf16 x as it is (W8A16), in the prefill GEMM's permuted
  // layout (activation_bf16.hpp), at the start of the kernel's scratch, and the plan's
  // zero_words zeroed, both by the linear's activation pass, which then writes nothing else
  // (KernelCall::x holds no data).
  kDequantized,
  // The caller's bf16/fp16 x itself (KernelCall::x_unquantized): the kernel quantizes it with
  // RCEIL, the same bytes as the quantize kernel, and the linear runs no pass of its own.
  kUnquantized,
  // W8A16: the caller's bf16/fp16 x itself (KernelCall::x_unquantized), multiplied as it is; the
  // linear runs no pass of its own.
  kAsIs,
};

// One call as a kernel plans for it.
struct Problem {
  LinearShape shape;
  // The activation as the caller passes it: bf16, fp16 or fp32 to the linear's 16-bit entry
  // point, e4m3 (with scales) to its pre-quantized one.
  DType x_dtype = DType::kBF16;
  // x is bf16 or fp16 with 16-byte aligned rows (base and stride), as a kernel that quantizes
  // it itself reads it with 16-byte loads and TMA boxes.
  bool x_self_quantizable = false;
  DType out_dtype = DType::kBF16;
  int sms = 0;  // the device's multiprocessors (0: no GPU)
  // What the kernel multiplies: the MX activation (W8A8), or x as it is (W8A16, x_dtype bf16 or
  // fp16).
  ActivationOperand operand = ActivationOperand::kMx;
};

// What a call needs, as the kernel plans it for a problem and config.
struct CallPlan {
  // W8A8: kDequantized and kUnquantized only for an x_dtype the linear quantizes (not e4m3), and
  // kUnquantized only where x_self_quantizable. W8A16: kAsIs, or kDequantized for a bf16 x.
  ActivationForm activation = ActivationForm::kQuantized;
  std::size_t scratch_bytes = 0;  // KernelCall::workspace, 256-byte aligned
  // Words of the scratch that must be zero when the kernel starts: the linear's pass zeroes them
  // where it writes the kDequantized activation; otherwise run() sees to it.
  ScratchWords zero_words;
};

// One call after validation.
struct KernelCall {
  QuantizedActivation x;
  MxWeight weight;
  std::optional<TensorView> bias;
  TensorView out;
  LinearShape shape;
  cudaStream_t stream = nullptr;
  Workspace workspace;                                     // at least the plan's scratch_bytes
  ActivationForm activation = ActivationForm::kQuantized;  // what the linear provides
  TensorView x_unquantized = {};                       // the caller's x, for kUnquantized and kAsIs
  ActivationOperand operand = ActivationOperand::kMx;  // kBf16 or kF16: W8A16
  // The SMs the call was planned for (Problem::sms); 0: the current device's. run() lays out
  // its scratch for these, as plan() did.
  int sms = 0;
};

struct LaunchFootprint {
  std::int64_t ctas = 0;           // CTAs the launch has
  std::int64_t resident_ctas = 0;  // CTAs the device can hold at once for this launch
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual std::string_view name() const = 0;
  // The mode of the calls the kernel serves (it implements only layers of that mode's operand);
  // tuned rows naming it are rows for that mode. The CPU reference serves both and says W8A8.
  virtual ActivationMode activation_mode() const { return ActivationMode::kW8A8; }
  // The config names run() accepts; tuned rows must name one of them.
  virtual std::vector<std::string> configs() const = 0;
  virtual Verdict is_supported(const DeviceDescription& device) const = 0;
  virtual Verdict can_implement(const LayerDescription& layer) const = 0;
  // Whether `config` (one of configs()) can run M rows of a layer with this K: K splits and
  // shared memory. dispatch() hands a call only to a config that can, whether a tuned row or
  // the cost model names it; run() refuses the same calls with the same reason.
  virtual Verdict can_run(std::int64_t m, std::int64_t k, std::string_view config) const {
    (void)m;
    (void)k;
    (void)config;
    return {};
  }
  // Whether `config` sums each output element's K products of a layer with this K in the one
  // order that K alone fixes for this kernel: the same at every M, at every place of the row in
  // the batch, and in every other config of this kernel that keeps it (no K split or alternating
  // stages that the config chooses). The batch-invariant mode runs a layer's calls on such
  // configs of one kernel only.
  virtual bool keeps_k_order(std::string_view config, std::int64_t k) const {
    (void)config;
    (void)k;
    return false;
  }
  // The kernels whose configs that keep the K order share one order, bit for bit, name the same
  // family: the name of the kernel the batch-invariant mode selects for a layer (its anchor).
  // A kernel of another's family joins that kernel's calls in the mode: the cost model or a
  // tuned row may give it an M (the GEMV's k-parts configs join the prefill kernel). Default:
  // the kernel's own name.
  virtual std::string_view k_order_family() const { return name(); }
  // A tuned kernel claims a layer only where the tuned table has rows for its (N, K).
  virtual bool needs_tuned_rows() const { return false; }
  // Whether a tuning sweep should time this config at M, and the cost model consider it (the
  // decode kernel is built for small M; it runs any M correctly, but one token tile after
  // another).
  virtual bool worth_sweeping(std::int64_t m, std::string_view config) const {
    (void)m;
    (void)config;
    return true;
  }
  // The config for M when no tuned row names one and the cost model is off.
  virtual std::string default_config(std::int64_t m) const = 0;
  // The work of `config` on a call of this shape, as the cost model prices it (cost_model.hpp),
  // for a config that can run the call (can_run() is asked first). nullopt: the kernel has no
  // model, and the cost model never chooses it.
  virtual std::optional<detail::WorkShape> work_shape(const LinearShape& shape,
                                                      std::string_view config) const {
    (void)shape;
    (void)config;
    return std::nullopt;
  }
  // Layout preprocessing: a pure rewrite of `in` into `out` (same shapes). Whether its result
  // may be stored by a weight cache and reloaded without running it again.
  virtual void prepare_weights(const MxWeight& in, const MxWeight& out,
                               cudaStream_t stream) const = 0;
  virtual bool prepared_weights_cacheable() const = 0;
  // What a call of this problem with `config` (one of configs()) needs: the activation's form,
  // scratch and zeroed scratch words. run() expects exactly that.
  virtual CallPlan plan(const Problem& problem, std::string_view config) const = 0;
  // A bound on plan().scratch_bytes over every N, config, activation and output for calls of
  // `rows` x K on `device` that can_run() accepts: what linear_workspace_bytes() reserves.
  virtual std::size_t max_scratch_bytes(std::int64_t rows, std::int64_t k,
                                        const DeviceDescription& device) const = 0;
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

  // The scratch run() needs for a call of this shape on a pre-quantized activation on the
  // current device: what a caller that runs the kernel directly (a KernelCall of the e4m3
  // activation, sms 0) allocates.
  std::size_t workspace_bytes(const LinearShape& shape, const std::string& config) const;
};

// Whether `kernel` serves `anchor`'s K order in the batch-invariant mode: it is `anchor`, or it
// names `anchor` as its family (Kernel::k_order_family).
bool in_k_order_of(const Kernel& kernel, const Kernel& anchor);

// The batch-invariant mode's parts of K (device::batch_invariant_parts); none for a K outside
// 1 .. INT_MAX, which no kernel runs.
std::optional<int> batch_invariant_parts_of(std::int64_t k);

// The current CUDA device's multiprocessors, 0 where there is none.
int current_sms();

// The problem of a call of `shape` on activation `x` (the 16-bit entry point's; e4m3 for the
// pre-quantized one) on a device of `sms` multiprocessors.
Problem make_problem(const LinearShape& shape, const TensorView& x, DType out_dtype, int sms);

}  // namespace mxlinear
