// The dynamic shared memory of a kernel fed by a TMA ring: its base aligned to 1024 bytes (the
// 128-byte swizzle atom, which TMA destinations and wgmma descriptors need), and the ring's
// full and empty barriers at Tile::kBarrierOffset, one 8-byte mbarrier per stage each.
#pragma once

#include <cstdint>

#include "device/ptx/hopper_ptx.cuh"

namespace mxlinear::device {

struct RingSmem {
  std::uint32_t base;  // shared-space address
  std::uint8_t* ptr;   // the same byte, generic address
  std::uint32_t full;  // stage s's full barrier: full + 8 * s
  std::uint32_t empty;
};

template <class Tile>
__device__ __forceinline__ RingSmem ring_smem() {
  extern __shared__ std::uint8_t smem_raw[];
  const auto [base, ptr] = hopper::align_smem_1024(smem_raw);
  const std::uint32_t full = base + Tile::kBarrierOffset;
  return {base, ptr, full, full + 8 * Tile::kStages};
}

}  // namespace mxlinear::device
