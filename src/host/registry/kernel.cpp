#include "host/registry/kernel.hpp"

#include <cstdint>
#include <limits>
#include <optional>

#include "device/common/grid_walk.hpp"
#include "device/common/launch_util.hpp"

namespace mxlinear {

int current_sms() {
  int sms = 0;
  if (device::current_sm_count(sms) != cudaSuccess) {
    (void)cudaGetLastError();  // no device: nothing of a stream's to keep
    return 0;
  }
  return sms;
}

Problem make_problem(const LinearShape& shape, const TensorView& x, DType out_dtype, int sms) {
  Problem p;
  p.shape = shape;
  p.x_dtype = x.dtype;
  const auto base = reinterpret_cast<std::uintptr_t>(x.data);
  p.x_self_quantizable = (x.dtype == DType::kBF16 || x.dtype == DType::kF16) && base % 16 == 0 &&
                         (x.rows() <= 1 || (x.row_stride() * 2) % 16 == 0);
  p.out_dtype = out_dtype;
  p.sms = sms;
  return p;
}

std::size_t Kernel::workspace_bytes(const LinearShape& shape, const std::string& config) const {
  Problem p;
  p.shape = shape;
  p.x_dtype = DType::kE4M3;
  p.sms = current_sms();
  return plan(p, config).scratch_bytes;
}

bool in_k_order_of(const Kernel& kernel, const Kernel& anchor) {
  return &kernel == &anchor || kernel.k_order_family() == anchor.name();
}

std::optional<int> batch_invariant_parts_of(std::int64_t k) {
  if (k < 1 || k > std::numeric_limits<int>::max()) return std::nullopt;
  return device::batch_invariant_parts(static_cast<int>(k));
}

}  // namespace mxlinear
