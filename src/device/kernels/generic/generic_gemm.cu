#include <array>

#include "device/common/launch_util.hpp"
#include "device/kernels/generic/generic_gemm.cuh"
#include "device/kernels/generic/generic_gemm.hpp"

namespace mxlinear::device {
namespace {

// The only instances compiled: one per M regime.
// Few tokens: 4 K warps, a deep pipeline.
using TileSmall = GenericTile<GenericShape{
    .bm = 16, .bn = 32, .wm = 16, .wn = 16, .warps_k = 4, .stages = 8, .min_blocks_per_sm = 2}>;
// M in the tens to hundreds.
using TileMedium = GenericTile<GenericShape{.bm = 64, .bn = 64, .wm = 32, .wn = 32, .warps_k = 2}>;
// Prefill.
using TileLarge = GenericTile<GenericShape{.bm = 128, .bn = 128, .wm = 64, .wn = 32}>;

template <class Tile>
constexpr GenericConfigInfo info() {
  return {Tile::kBM,     Tile::kBN,      Tile::kWM,     Tile::kWN,
          Tile::kWarpsK, Tile::kThreads, Tile::kStages, Tile::kSmemBytes};
}

constexpr std::array<GenericConfigInfo, 3> kConfigs = {info<TileSmall>(), info<TileMedium>(),
                                                       info<TileLarge>()};

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
