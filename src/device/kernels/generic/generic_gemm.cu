#include <array>

#include "device/common/launch_util.hpp"
#include "device/kernels/generic/generic_gemm.cuh"
#include "device/kernels/generic/generic_gemm.hpp"

namespace mxlinear::device {
namespace {

// The only instances compiled: one per M regime. Names list every axis.
using TileSmall = GenericTile<16, 32, 16, 16, 4, 8, 2>;    // decode: 4 K warps, deep pipeline
using TileMedium = GenericTile<64, 64, 32, 32, 2, 4, 1>;   // M in the tens to hundreds
using TileLarge = GenericTile<128, 128, 64, 32, 1, 4, 1>;  // prefill

template <class Tile>
constexpr GenericConfigInfo info(std::string_view name) {
  return {name, Tile::kBM, Tile::kBN, Tile::kThreads, Tile::kStages, Tile::kSmemBytes};
}

constexpr std::array<GenericConfigInfo, 3> kConfigs = {
    info<TileSmall>("bm16_bn32_wm16_wn16_wk4_s8"),
    info<TileMedium>("bm64_bn64_wm32_wn32_wk2_s4"),
    info<TileLarge>("bm128_bn128_wm64_wn32_wk1_s4"),
};

template <class Tile>
cudaError_t launch(const GemmParams& p, cudaStream_t stream) {
  if (cudaError_t e = ensure_max_dynamic_smem<generic_gemm_kernel<Tile>>(Tile::kSmemBytes);
      e != cudaSuccess)
    return e;
  const dim3 grid((p.n + Tile::kBN - 1) / Tile::kBN, (p.m + Tile::kBM - 1) / Tile::kBM);
  if (grid.y > 65535u) return cudaErrorInvalidConfiguration;  // host code checks M first
  generic_gemm_kernel<Tile><<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

std::span<const GenericConfigInfo> generic_gemm_configs() { return kConfigs; }

bool scales_allow_cp_async(const GemmParams& p) {
  auto aligned = [](const std::uint8_t* base, std::int64_t ld) {
    return reinterpret_cast<std::uintptr_t>(base) % 4 == 0 && ld % 4 == 0;
  };
  return aligned(p.a_scales, p.ld_a_scales) && aligned(p.w_scales, p.ld_w_scales);
}

cudaError_t launch_generic_gemm(const GemmParams& p, int config, cudaStream_t stream) {
  switch (config) {
    case 0:
      return launch<TileSmall>(p, stream);
    case 1:
      return launch<TileMedium>(p, stream);
    case 2:
      return launch<TileLarge>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace mxlinear::device
