#include "device/common/grid_walk.hpp"
#include "device/common/launch_util.hpp"
#include "device/common/mx_convert.cuh"
#include "device/kernels/prefill/activation_bf16.hpp"
#include "device/ptx/hopper_ptx.cuh"

namespace mxlinear::device {
namespace {

constexpr int kThreads = 256;

// Bytes 8t..8t+7 of block b of a row become bf16 pairs at logical positions 2t, 8 + 2t (bytes
// 0-3) and 16 + 2t, 24 + 2t (bytes 4-7) of the block. A grid of one resident wave walks these
// 8-byte groups row-major, one grid-stride at a time, by a fixed (rows, groups) step
// (GroupWalk): no division per group. Each thread loads its next group before converting the
// current one, so a load is always in flight (a load-then-store loop waits out a memory round
// trip per group).
//
// Two ways to store a block's 64 output bytes (four 16-byte pieces, piece i holding pair i of
// groups 0-3), chosen per call by activation_bf16_quad_stores():
// - in place: each lane stores its group's four words, four stores of 4 bytes 16 apart;
// - by quads: the four groups of a block sit in four neighbouring lanes (a lane's group index and
//   its lane index agree mod 4, since the stride and K / 8 are multiples of 4), so the quad
//   transposes its 4 x 4 words and each lane stores one whole piece: a warp's store is 512
//   contiguous bytes.
struct PrePassGroup {
  uint2 bytes;
  std::uint8_t scale;
};

__device__ __forceinline__ PrePassGroup load_group(const ActivationBf16Params& p,
                                                   GroupPosition at) {
  if (at.row >= p.m) return {};
  const std::int64_t r = at.row;
  return {*reinterpret_cast<const uint2*>(p.q + r * p.ld_q + 8 * at.group),
          p.scales[r * p.ld_scales + at.group / 4]};
}

// Lane t of a quad holds row t of a 4 x 4 matrix of words (group t's pairs 0-3); afterwards it
// holds column t (pair t of groups 0-3). Two exchanges: the off-diagonal 2 x 2 blocks with the
// lane two away, then each 2 x 2 block's off-diagonal words with the neighbouring lane. Every
// lane of a quad takes part: the walk keeps a block's four groups together.
// Trades a pair of words with the lane `lane_xor` away: the pair (y0, y1) where `trade_y`,
// else (x0, x1). Both lanes of an exchange trade the same positions' counterparts.
__device__ __forceinline__ void trade_pair(std::uint32_t& x0, std::uint32_t& x1, std::uint32_t& y0,
                                           std::uint32_t& y1, bool trade_y, unsigned lanes,
                                           int lane_xor) {
  const std::uint32_t got0 = __shfl_xor_sync(lanes, trade_y ? y0 : x0, lane_xor);
  const std::uint32_t got1 = __shfl_xor_sync(lanes, trade_y ? y1 : x1, lane_xor);
  if (trade_y) {
    y0 = got0;
    y1 = got1;
  } else {
    x0 = got0;
    x1 = got1;
  }
}

__device__ __forceinline__ void transpose_in_quad(std::uint32_t (&w)[4], int t) {
  const unsigned quad = 0xFu << (static_cast<int>(threadIdx.x) & 28);
  trade_pair(w[0], w[1], w[2], w[3], t < 2, quad, 2);
  trade_pair(w[0], w[2], w[1], w[3], (t & 1) == 0, quad, 1);
}

template <bool kQuadStores>
__global__ void __launch_bounds__(kThreads) activation_bf16_kernel(const ActivationBf16Params p) {
  // The prefill GEMM launched next (a programmatic dependent) may start its prologue at once:
  // it reads what this pass writes only after its own wait. Letting it launch here rather than
  // past this pass's wait starts its CTAs and their weight copies while the GEMM before still
  // runs: the GEMM alone at M = 32 and 128 took 3-11% less.
  hopper::allow_dependent_launch();
  // Launched as a programmatic dependent itself: the previous kernel (the producer of the
  // activation, or the previous layer's GEMM, which may still read the scratch written here)
  // must finish first; only the launch and the CTAs' start overlap its tail.
  hopper::wait_prerequisite_grids();
  p.zero_for_next.zero();
  const int stride = static_cast<int>(gridDim.x) * kThreads;
  const int first = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  GroupWalk walk(first, stride, p.k / 8);
  PrePassGroup current = load_group(p, walk.at);
  while (walk.at.row < p.m) {
    const GroupPosition at = walk.at;
    walk.advance();
    const PrePassGroup next = load_group(p, walk.at);
    const int block = at.group / 4, t = at.group % 4;
    const float scale = mx::scale_from_byte(current.scale);
    std::uint32_t w[4];
    mx::e4m3x4_scaled_to_bf16x2x2(current.bytes.x, scale, w[0], w[1]);
    mx::e4m3x4_scaled_to_bf16x2x2(current.bytes.y, scale, w[2], w[3]);
    auto* block_out = static_cast<std::uint16_t*>(p.out) +
                      static_cast<std::int64_t>(at.row) * p.ld_out + 32 * block;
    if constexpr (kQuadStores) {
      transpose_in_quad(w, t);
      *reinterpret_cast<uint4*>(block_out + 8 * t) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        *reinterpret_cast<std::uint32_t*>(block_out + 2 * t + 8 * i) = w[i];
    }
    current = next;
  }
}

template <bool kQuadStores>
cudaError_t launch(const ActivationBf16Params& p, std::int64_t threads, cudaStream_t stream) {
  dim3 grid;
  if (cudaError_t e = one_wave_grid<activation_bf16_kernel<kQuadStores>>(threads, kThreads, grid);
      e != cudaSuccess) {
    return e;
  }
  return launch_programmatic(activation_bf16_kernel<kQuadStores>, grid, dim3(kThreads), 0, stream,
                             0, p);
}

}  // namespace

// Measured on the H200 (the pre-pass alone):
// the quads' stores took the pass at K = 6144 from 45.7 to 42.5 us at M = 8192 and from 10.5 to
// 9.5 us at M = 2048, but were 3-13% slower at K = 768, 2048 and 3072 with M >= 2048, 1-8%
// slower at M = 128 (K = 6144: 2.0 -> 2.2 us) and within 4% either way at M = 32. So they run
// only where they were measured faster; M between 128 and 2048 keeps the in-place stores until
// it is measured.
bool activation_bf16_quad_stores(int m, int k) { return k >= 4096 && m >= 2048; }

cudaError_t launch_activation_bf16(const ActivationBf16Params& p, cudaStream_t stream) {
  // The quads' stores write 16-byte pieces; one contract for both styles.
  if (reinterpret_cast<std::uintptr_t>(p.out) % 16 != 0 || p.ld_out % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  const std::int64_t threads = static_cast<std::int64_t>(p.m) * (p.k / 8);
  if (threads == 0) return cudaSuccess;
  return activation_bf16_quad_stores(p.m, p.k) ? launch<true>(p, threads, stream)
                                               : launch<false>(p, threads, stream);
}

}  // namespace mxlinear::device
