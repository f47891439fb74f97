#include "host/registry/configured_kernel.hpp"

#include <fmt/format.h>

#include "host/cuda_check.hpp"
#include "host/registry/kernel_params.hpp"
#include "host/validate.hpp"

namespace mxlinear::detail {
namespace {

constexpr std::int64_t kMaxTokenTiles = 65535;  // grid.z (grid.y for the generic kernel)

}  // namespace

Verdict needs_16_byte_rows(const LayerDescription& layer) {
  if (layer.alignment >= 16) return {};
  return {fmt::format("needs 16-byte aligned e4m3 rows; the layer's are {}-byte aligned",
                      layer.alignment)};
}

Verdict needs_operand(const LayerDescription& layer,
                      std::initializer_list<ActivationOperand> operands) {
  for (const ActivationOperand o : operands) {
    if (o == layer.operand) return {};
  }
  std::string takes;
  for (const ActivationOperand o : operands) {
    takes += fmt::format("{}{}", takes.empty() ? "" : " or ", describe(o));
  }
  return {fmt::format("serves {}; the call is {}", takes, describe(layer.operand))};
}

Verdict needs_16_byte_x_rows(const LayerDescription& layer) {
  if (layer.x_alignment >= 16) return {};
  return {fmt::format("needs 16-byte aligned rows of x; the call's are {}-byte aligned",
                      layer.x_alignment)};
}

Verdict needs_whole_blocks(const LayerDescription& layer) {
  if (layer.k % 32 == 0) return {};
  return {fmt::format("needs K % 32 == 0; K is {}", layer.k)};
}

Verdict needs_whole_blocks_in_16_byte_rows(const LayerDescription& layer) {
  if (Verdict v = needs_whole_blocks(layer); !v.ok()) return v;
  return needs_16_byte_rows(layer);
}

Verdict Sm90Kernel::is_supported(const DeviceDescription& device) const {
  return needs_sm90a(device);
}

void Sm90Kernel::prepare_weights(const MxWeight& in, const MxWeight& out,
                                 cudaStream_t stream) const {
  copy_weight(in, out, stream);  // every sm_90a kernel reads the checkpoint layout as it is
}

Verdict Sm90Kernel::not_a_config(std::string_view config) const {
  return {fmt::format("is '{}', not a {} config", config, name_)};
}

Verdict Sm90Kernel::splits_fit(std::string_view config, int splits, std::int64_t k) {
  if (const std::int64_t chunks = (k + 127) / 128; splits > chunks) {
    return {fmt::format("is '{}', {} K splits; K = {} has only {} chunks of 128", config, splits, k,
                        chunks)};
  }
  return {};
}

Verdict Sm90Kernel::smem_exceeded(std::string_view config, int smem, std::string_view where) {
  return {fmt::format("is '{}'; {} needs {} bytes of shared memory per CTA, more than {}", config,
                      where, smem, device::kSm90MaxSmemPerCta)};
}

Verdict Sm90Kernel::needs_mode_operand(const LayerDescription& layer) const {
  return as_is() ? needs_operand(layer, {ActivationOperand::kBf16, ActivationOperand::kF16})
                 : needs_operand(layer, {ActivationOperand::kMx});
}

void Sm90Kernel::require_mode_activation(const KernelCall& call) const {
  if (as_is() != (call.activation == ActivationForm::kAsIs)) {
    fail(ErrorCode::kInternal, name(), "x",
         as_is() ? "is not the caller's 16-bit x (W8A16)" : "is not an MX activation");
  }
}

void Sm90Kernel::require_known(bool known, std::string_view config) const {
  if (known) return;
  fail(ErrorCode::kInvalidArgument, fmt::format("{} kernel", name_), "config",
       fmt::format("is '{}'; expected one of: {}", config, fmt::join(configs(), ", ")));
}

void Sm90Kernel::require(const Verdict& verdict) const {
  if (!verdict.ok()) {
    fail(ErrorCode::kUnsupported, fmt::format("{} kernel", name_), "config", verdict.reason);
  }
}

void Sm90Kernel::require_token_tiles(const LinearShape& shape, std::int64_t tokens,
                                     std::string_view config) const {
  if ((shape.m + tokens - 1) / tokens <= kMaxTokenTiles) return;
  fail(ErrorCode::kUnsupported, "linear", "x",
       fmt::format("has {} rows; expected at most {} for {} config {}", shape.m,
                   kMaxTokenTiles * tokens, name_, config));
}

void Sm90Kernel::require_layer(std::string_view why_not, const LinearShape& shape) const {
  if (why_not.empty()) return;
  fail(ErrorCode::kUnsupported, fmt::format("{} kernel", name_), "layer",
       fmt::format("is {} x {} x {}; {}", shape.m, shape.n, shape.k, why_not));
}

void Sm90Kernel::require_launched(cudaError_t status, std::string_view config) const {
  check_cuda(status, fmt::format("linear: launching {} {}", name_, config));
}

}  // namespace mxlinear::detail
