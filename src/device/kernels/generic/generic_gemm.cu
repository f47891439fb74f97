#include <array>

#include "device/common/launch_util.hpp"
#include "device/kernels/generic/generic_gemm.cuh"
#include "device/kernels/generic/generic_gemm.hpp"

namespace mxlinear::device {
namespace {

// The only shapes compiled: one per M regime.
// Few tokens: 4 K warps, a deep pipeline.
constexpr GenericShape kSmall{
    .bm = 16, .bn = 32, .wm = 16, .wn = 16, .warps_k = 4, .stages = 8, .min_blocks_per_sm = 2};
// M in the tens to hundreds.
constexpr GenericShape kMedium{.bm = 64, .bn = 64, .wm = 32, .wn = 32, .warps_k = 2};
// Prefill.
constexpr GenericShape kLarge{.bm = 128, .bn = 128, .wm = 64, .wn = 32};

// The W8A16 instance of a shape: the same tile with as many of its stages as fit in one CTA's
// shared memory (its activation rows take twice the bytes). Every shape above keeps all of its
// stages.
constexpr GenericShape as_is_shape(GenericShape shape) {
  while (shape.stages > 2 && generic_smem_bytes(shape, true) > kSm90MaxSmemPerCta) --shape.stages;
  return shape;
}

template <GenericShape kShape>
struct Instances {
  using W8A8 = GenericTile<kShape>;
  using W8A16BF16 = GenericTile<as_is_shape(kShape), ActivationOperand::kBf16>;
  using W8A16F16 = GenericTile<as_is_shape(kShape), ActivationOperand::kF16>;
};

template <GenericShape kShape>
constexpr GenericConfigInfo info() {
  using W8A8 = typename Instances<kShape>::W8A8;
  using W8A16 = typename Instances<kShape>::W8A16BF16;
  static_assert(W8A16::kSmemBytes == Instances<kShape>::W8A16F16::kSmemBytes);
  return {W8A8::kBM,      W8A8::kBN,     W8A8::kWM,        W8A8::kWN,      W8A8::kWarpsK,
          W8A8::kThreads, W8A8::kStages, W8A8::kSmemBytes, W8A16::kStages, W8A16::kSmemBytes};
}

constexpr std::array<GenericConfigInfo, 3> kConfigs = {info<kSmall>(), info<kMedium>(),
                                                       info<kLarge>()};

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

template <GenericShape kShape>
cudaError_t launch_shape(const GemmParams& p, cudaStream_t stream) {
  using Shape = Instances<kShape>;
  if (!p.x_as_is) return launch<typename Shape::W8A8>(p, stream);
  if (p.x == nullptr) return cudaErrorInvalidValue;
  return p.x_is_f16 ? launch<typename Shape::W8A16F16>(p, stream)
                    : launch<typename Shape::W8A16BF16>(p, stream);
}

}  // namespace

std::span<const GenericConfigInfo> generic_gemm_configs() { return kConfigs; }

int generic_gemm_smem_bytes(int config, bool x_as_is) {
  if (config < 0 || config >= static_cast<int>(kConfigs.size())) return 0;
  const GenericConfigInfo& c = kConfigs[static_cast<std::size_t>(config)];
  return x_as_is ? c.smem_bytes_as_is : c.smem_bytes;
}

bool scales_allow_cp_async(const GemmParams& p) {
  auto aligned = [](const std::uint8_t* base, std::int64_t ld) {
    return reinterpret_cast<std::uintptr_t>(base) % 4 == 0 && ld % 4 == 0;
  };
  // W8A16 reads no activation scales.
  return (p.x_as_is || aligned(p.a_scales, p.ld_a_scales)) && aligned(p.w_scales, p.ld_w_scales);
}

cudaError_t launch_generic_gemm(const GemmParams& p, int config, cudaStream_t stream) {
  switch (config) {
    case 0:
      return launch_shape<kSmall>(p, stream);
    case 1:
      return launch_shape<kMedium>(p, stream);
    case 2:
      return launch_shape<kLarge>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace mxlinear::device
