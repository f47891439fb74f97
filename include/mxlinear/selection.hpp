// Which kernel serves a layer, and which config per M: the selection report (the CLI's
// `select`). A device has an ordered kernel list: tuned Hopper kernels first, then a general GPU
// kernel, then the CPU reference. A layer gets the first kernel that supports the device and
// can implement the layer; a tuned kernel can implement only shapes its tuned table has rows
// for. Per call, a tuned row for the call's M may hand the call to another kernel and config
// (e.g. the general kernel where it is faster); where no row covers the call, the cost model
// chooses among every kernel's configs.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mxlinear/linear_types.hpp"
#include "mxlinear/models.hpp"
#include "mxlinear/tensor.hpp"

namespace mxlinear {

// A kernel of the library (its interface is internal); kernel_name() gives its name.
class Kernel;

// The kernel's name, as tuned tables and MXLINEAR_BACKEND spell it; "" for null.
std::string_view kernel_name(const Kernel* kernel);

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
  // What the calls multiply: the MX activation (W8A8) or a 16-bit one as it is (W8A16). A kernel
  // implements one of the two.
  ActivationOperand operand = ActivationOperand::kMx;
  // W8A16: bytes, the largest power of two dividing the 16-bit x's address and row stride, which
  // a kernel that reads x directly needs to be 16.
  int x_alignment = 256;
  // The batch-invariant mode: the calls run only on configs that keep a fixed K order
  // (Kernel::keeps_k_order), all of one kernel, whatever M.
  bool batch_invariant = false;
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
  // "tuned row <source>", "cost model, <estimate> us estimated" (no tuned row for the shape and
  // M) or "default config"
  std::string why;
  // The cost model's estimate of the call in microseconds where it chose the config, else 0.
  double estimated_us = 0;
};

struct ReportRow {
  ModelLayer layer;
  LayerSelection selection;
  std::vector<std::pair<std::int64_t, Dispatch>> per_m;  // dispatch at each M of the report
};

// The token counts a selection report shows unless its caller names others: one per regime, from
// a decode step to a long prefill.
inline constexpr std::array<std::int64_t, 6> kReportTokenCounts{1, 32, 128, 512, 2048, 8192};

// Token counts named in any order, a count named twice once, as a report takes them: ascending.
inline std::vector<std::int64_t> report_token_counts(std::span<const std::int64_t> any_order) {
  std::vector<std::int64_t> ms(any_order.begin(), any_order.end());
  std::sort(ms.begin(), ms.end());
  ms.erase(std::unique(ms.begin(), ms.end()), ms.end());
  return ms;
}

// The selection for every layer on `device` with `out_dtype` output and `operand`, and its dispatch
// at each M of `ms` (ascending, each >= 1; anything else throws Error naming 'ms'): the built-in
// kernels, the shipped tuned tables and the process environment (docs/TUNED_TABLES.md), as
// linear() uses them. `batch_invariant`: the selection of the batch-invariant mode.
std::vector<ReportRow> selection_report(const std::vector<ModelLayer>& layers,
                                        const DeviceDescription& device,
                                        DType out_dtype = DType::kBF16,
                                        ActivationOperand operand = ActivationOperand::kMx,
                                        bool batch_invariant = false,
                                        std::span<const std::int64_t> ms = kReportTokenCounts);

// The kernels a layer's calls run on, in the order its per-M dispatch first uses them. It can
// leave out the selected kernel: a tuned row may hand every M of the layer to another kernel.
std::vector<std::string> kernels_run(const ReportRow& row);

// The report as text (the CLI's `select`; `select --json` writes the same as JSON).
std::string format_report(const std::vector<ReportRow>& rows, const DeviceDescription& device);

}  // namespace mxlinear
