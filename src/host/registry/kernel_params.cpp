#include "host/registry/kernel_params.hpp"

#include <fmt/format.h>

#include <cstdint>

#include "host/cuda_check.hpp"
#include "host/validate.hpp"

namespace mxlinear::detail {
namespace {

device::OutType out_type(DType d) {
  return d == DType::kBF16 ? device::OutType::kBF16
                           : (d == DType::kF16 ? device::OutType::kF16 : device::OutType::kF32);
}

}  // namespace

device::GemmParams gemm_params(const KernelCall& call) {
  device::GemmParams p;
  p.a = static_cast<const std::uint8_t*>(call.x.data.data);
  p.a_scales = static_cast<const std::uint8_t*>(call.x.scales.data);
  p.w = static_cast<const std::uint8_t*>(call.weight.data.data);
  p.w_scales = static_cast<const std::uint8_t*>(call.weight.scales.data);
  p.ld_a = call.x.data.row_stride();
  p.ld_a_scales = call.x.scales.row_stride();
  p.ld_w = call.weight.data.row_stride();
  p.ld_w_scales = call.weight.scales.row_stride();
  p.out = call.out.data;
  p.ld_out = call.out.row_stride();
  p.m = static_cast<int>(call.shape.m);
  p.n = static_cast<int>(call.shape.n);
  p.k = static_cast<int>(call.shape.k);
  p.out_type = out_type(call.out.dtype);
  if (call.activation == ActivationForm::kUnquantized || call.activation == ActivationForm::kAsIs) {
    p.x = call.x_unquantized.data;
    p.ld_x = call.x_unquantized.row_stride();
    p.x_is_f16 = call.x_unquantized.dtype == DType::kF16;
    p.x_as_is = call.activation == ActivationForm::kAsIs;
  }
  if (call.bias) {
    p.bias = call.bias->data;
    p.bias_type =
        call.bias->dtype == DType::kF32 ? device::BiasType::kF32 : device::BiasType::kBF16;
  }
  return p;
}

Verdict needs_sm90a(const DeviceDescription& device) {
  if (!device.is_gpu) return {"needs a GPU; this machine has none"};
  if (device.arch != "sm_90a") {
    return {fmt::format("needs an sm_90a (Hopper) GPU; this is {}", device.arch)};
  }
  return {};
}

void copy_rows(const TensorView& from, const TensorView& to, cudaStream_t stream) {
  const std::size_t elem = element_size(from.dtype);
  check_cuda(cudaMemcpy2DAsync(to.data, static_cast<std::size_t>(to.row_stride()) * elem, from.data,
                               static_cast<std::size_t>(from.row_stride()) * elem,
                               static_cast<std::size_t>(from.cols()) * elem,
                               static_cast<std::size_t>(from.rows()), cudaMemcpyDefault, stream),
             "prepare_weights: copy");
}

void copy_weight(const MxWeight& in, const MxWeight& out, cudaStream_t stream) {
  check_mx_pair("prepare_weights", "in", in.data, in.scales, in.data.location);
  check_mx_pair("prepare_weights", "out", out.data, out.scales, out.data.location);
  if (in.data.rows() != out.data.rows() || in.data.cols() != out.data.cols()) {
    fail(ErrorCode::kInvalidArgument, "prepare_weights", "out.data",
         fmt::format("has shape {}; expected the shape of in.data {}", out.data.shape_string(),
                     in.data.shape_string()));
  }
  copy_rows(in.data, out.data, stream);
  copy_rows(in.scales, out.scales, stream);
}

}  // namespace mxlinear::detail
