#include <array>
#include <iterator>

#include "device/gemv_gemm.cuh"
#include "device/gemv_gemm.hpp"
#include "device/launch_util.hpp"

namespace mxlinear::device {
namespace {

// The only instances compiled: one and two tokens per CTA.
using Tile1 = GemvTile<1>;
using Tile2 = GemvTile<2>;

template <class Tile>
constexpr GemvInstanceInfo info() {
  return {Tile::kTokens, Tile::kRowsPerCta};
}

constexpr std::array<GemvInstanceInfo, 2> kInstances = {info<Tile1>(), info<Tile2>()};

template <class Tile>
cudaError_t launch(const GemmParams& p, cudaStream_t stream) {
  if (cudaError_t e = ensure_max_dynamic_smem<gemv_gemm_kernel<Tile>>(kGemvMaxSmemBytes);
      e != cudaSuccess)
    return e;
  const int smem = Tile::smem_bytes(p.k);
  if (smem > kGemvMaxSmemBytes) return cudaErrorInvalidValue;
  const dim3 grid((p.n + Tile::kRowsPerCta - 1) / Tile::kRowsPerCta,
                  (p.m + Tile::kTokens - 1) / Tile::kTokens);
  if (grid.y > 65535u) return cudaErrorInvalidConfiguration;  // host code checks M first
  return launch_programmatic(gemv_gemm_kernel<Tile>, grid, dim3(Tile::kThreads),
                             static_cast<std::size_t>(smem), stream, 0, p);
}

}  // namespace

std::span<const GemvInstanceInfo> gemv_gemm_instances() { return kInstances; }

int gemv_gemm_smem_bytes(int instance, int k) {
  switch (instance) {
    case 0:
      return Tile1::smem_bytes(k);
    case 1:
      return Tile2::smem_bytes(k);
    default:
      return 0;
  }
}

std::string_view gemv_gemm_unsupported(const GemmParams& p) {
  auto aligned = [](const void* base, std::int64_t ld, std::int64_t rows, std::uintptr_t a) {
    return reinterpret_cast<std::uintptr_t>(base) % a == 0 &&
           (rows <= 1 || static_cast<std::uintptr_t>(ld) % a == 0);
  };
  if (p.k % 32 != 0) return "K must be a multiple of 32";
  if (!aligned(p.w, p.ld_w, p.n, 16)) return "e4m3 weight rows must be 16-byte aligned";
  if (p.x == nullptr && !aligned(p.a, p.ld_a, p.m, 4)) {
    return "e4m3 activation rows must be 4-byte aligned";
  }
  if (p.x != nullptr && !aligned(p.x, p.ld_x * 2, p.m, 16)) {
    return "bf16/fp16 activation rows must be 16-byte aligned";
  }
  return {};
}

cudaError_t launch_gemv_gemm(const GemmParams& p, int instance, cudaStream_t stream) {
  using Launcher = cudaError_t (*)(const GemmParams&, cudaStream_t);
  constexpr Launcher kLaunchers[] = {launch<Tile1>, launch<Tile2>};  // in kInstances' order
  static_assert(std::size(kLaunchers) == kInstances.size());
  if (instance < 0 || instance >= static_cast<int>(kInstances.size())) {
    return cudaErrorInvalidValue;
  }
  return kLaunchers[instance](p, stream);
}

}  // namespace mxlinear::device
