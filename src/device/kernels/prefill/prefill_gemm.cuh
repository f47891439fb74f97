// The Hopper scale-folded GEMM ("prefill"): the MX scales folded into bf16 operands, then a
// plain bf16 wgmma main loop with fp32 accumulation over all of K (no per-block promotion).
// Large tiles serve M >= 256; small ones with split-K serve the middle (M = 16..128).
//
// Design (docs/PERFORMANCE.md, "The kernels and why they are built so"):
// - Swap A and B: weight rows on wgmma's M side, one to three consumer warpgroups of 64 rows
//   each; tokens on the N side (32, 64, 128, 160, 192 or 256 per CTA).
// - Weights stay e4m3 in memory (half of bf16's bytes). Each consumer thread loads its fragment
//   bytes from the TMA tile (one 8-byte load per row and MX block), and widens them exactly to
//   bf16 times the block's scale into wgmma's register A operand.
// - Activations come dequantized to bf16 by a pre-pass (activation_bf16.cu), with K permuted
//   inside every block to match the fragments; TMA loads them straight into the layout wgmma's
//   B descriptor reads.
// - e4m3 * 2^(s-127) is exact in bf16 down to bf16's subnormal range: a dequantized operand
//   below 2^-126 is rounded to the 2^-133 grid (the flush bound MXFP8.md allows; tested).
// - Optional split-K over a thread-block cluster (split_k.cuh), as in the decode kernel, or met in
//   memory where a cluster would not hold the CTAs one to an SM (split_in_memory.cuh).
// - The tile and its main loop are in prefill_mainloop.cuh; the persistent and stream-K walks
//   over the output tiles in prefill_walk.cuh.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "device/common/gemm_params.hpp"
#include "device/common/grid_walk.hpp"
#include "device/common/ring_smem.cuh"
#include "device/common/split_k.cuh"
#include "device/common/timeline.cuh"
#include "device/kernels/prefill/prefill_mainloop.cuh"
#include "device/kernels/prefill/prefill_walk.cuh"
#include "device/kernels/prefill/share_tile.cuh"
#include "device/kernels/prefill/split_in_memory.cuh"
#include "device/kernels/prefill/tile_store_16bit.cuh"
#include "device/ptx/hopper_ptx.cuh"

namespace mxlinear::device {

namespace prefill_detail {

// The cluster's splits meet, after every CTA's tile is in its ring: the consumer threads add
// and store, between two cluster barriers that every thread of every CTA takes part in (the
// producer's share is only the barriers: the code after setmaxnreg.dec gets 40 registers, and the
// reduction's loads there spilled).
// In a timeline build the reduced stamp marks the first barrier's end: every split's tile is
// ready, so reduced - main loop is the wait for the slowest split of the cluster and stored -
// reduced the meeting itself.
template <class Tile>
__device__ __forceinline__ void reduce_in_cluster(const GemmParams& p, std::uint32_t smem, int n0,
                                                  int t0, int split, int splits,
                                                  timeline::Stamps& stamps) {
  hopper::cluster_sync();
  stamps.mark(timeline::kReduced);
  reduce_shares_and_store(p, smem + Tile::kReduceOffset, n0, t0, split, splits,
                          typename Tile::Shares(splits), static_cast<int>(threadIdx.x),
                          Tile::kConsumerThreads);
  // No CTA may leave while a peer still reads its tile.
  hopper::cluster_sync();
}

}  // namespace prefill_detail

// Grid: x = kRows-row weight tiles, y = K splits (= the cluster size), z = token tiles; or,
// persistent, x = at most one CTA per SM and y = z = 1. K % 128 == 0.
template <class Tile>
__global__ void __launch_bounds__(Tile::kThreads, 1)
    prefill_gemm_kernel(const __grid_constant__ CUtensorMap w_map,
                        const __grid_constant__ CUtensorMap a_map, const GemmParams p) {
  using namespace prefill_detail;
  timeline::Stamps stamps;  // thread 0: a consumer thread of warpgroup 0
  stamps.mark(timeline::kEntry);
  const auto [smem, smem_ptr, full, empty] = ring_smem<Tile>();
  const int tid = static_cast<int>(threadIdx.x);

  // Full and weights full: the producer's expect_tx arrival; empty: one arrival per warp that
  // consumes a stage.
  if (tid == 0) {
    for (int s = 0; s < Tile::kStages; ++s) {
      hopper::mbarrier_init(smem + Tile::kWeightsFullOffset + 8 * s, 1);
    }
    hopper::init_ring(full, empty, Tile::kStages, 1, 4 * Tile::kRowGroups);  // fences all inits
  }
  __syncthreads();
  // A walking CTA lets the next kernel launch at once (it holds its SM to the end anyway); a
  // tile CTA once its main loop ended (below).
  if constexpr (Tile::kPersistent) hopper::allow_dependent_launch();

  // The role as a warp-uniform value ptxas can see, so wgmma is not treated as divergent code.
  // Each role runs to its end inside its own branch (setmaxnreg needs that).
  const int warpgroup = __shfl_sync(0xFFFFFFFFu, tid / 128, 0);
  if constexpr (Tile::kPersistent) {
    walk_tiles<Tile>(&w_map, &a_map, p, smem, smem_ptr, full, empty, warpgroup, stamps);
  } else {
    const auto [n0, t0, split, splits, c_begin, chunks] =
        split_tile<Tile::kRows, Tile::kTokens>(p.k);
    if (warpgroup == Tile::kConsumerGroups) {
      if constexpr (Tile::kMovesRegisters) hopper::setmaxnreg_dec<Tile::kProducerRegisters>();
      // The ring fills from the first cycle.
      if (tid == Tile::kConsumerThreads) {
        hopper::prefetch_tensor_map(&w_map);
        hopper::prefetch_tensor_map(&a_map);
        produce<Tile>(&w_map, &a_map, smem, full, empty, c_begin, chunks * Tile::kStagesPerChunk,
                      n0, t0);
      }
      if (splits > 1 && p.split_tiles == nullptr) {
        // The output may still be read by the kernel before us.
        hopper::wait_prerequisite_grids();
        __syncwarp();  // the producer warp's lanes meet again before the aligned cluster barrier
        hopper::cluster_sync();  // the consumers' reduce_in_cluster
        hopper::cluster_sync();
      }
    } else {
      if constexpr (Tile::kMovesRegisters) hopper::setmaxnreg_inc<Tile::kConsumerRegisters>();
      float acc[Tile::kAccRegs];
#pragma unroll
      for (int i = 0; i < Tile::kAccRegs; ++i) acc[i] = 0.0f;
      const int scale_row_bytes = prefill_scale_row_bytes(chunks);
      stage_scales<Tile>(p, smem + Tile::kScaleOffset, n0, c_begin, chunks, warpgroup,
                         scale_row_bytes);
      stamps.mark(timeline::kPrologue);
      consume<Tile>(acc, smem, smem_ptr, full, empty, chunks, warpgroup, scale_row_bytes, p, n0,
                    c_begin);
      stamps.mark(timeline::kMainLoop);
      // The next kernel may launch now (CUTLASS's sm90 point). Measured against it (the
      // GEMM alone at M = 32 and 128): at entry, as before, 1-6% slower at M = 32 and level at
      // 128; after the producer's wait no better; at exit 1-15% slower. The first thread of a
      // CTA to get here counts for the CTA.
      hopper::allow_dependent_launch();
      // The output may still be read by the kernel before us.
      hopper::wait_prerequisite_grids();
      stamps.mark(timeline::kWaited);
      // The tile goes into the ring, once every consumer warpgroup's last wgmma has finished
      // reading it (the producer's copies all landed before the consumers' last wait); from there
      // it is stored row-contiguous, or met by the other splits.
      auto* tile = reinterpret_cast<float*>(smem_ptr + Tile::kReduceOffset);
      hopper::named_barrier_sync(1, Tile::kConsumerThreads);
      // A whole unsplit tile in a 16-bit type is staged in its output layout from the registers
      // (tile_store_16bit.cuh); an alternating tile's two sums meet in fp32 first.
      using Tile16 = Tile16Bit<Tile::kRows, Tile::kTokens>;
      if (!Tile::kAlternating && splits == 1 && takes_16bit_tile_store<Tile16>(p, n0, t0)) {
        stage_16bit_tile<Tile16>(smem + Tile::kReduceOffset, acc, p, n0, 64 * warpgroup);
        hopper::named_barrier_sync(1, Tile::kConsumerThreads);
        stamps.mark(timeline::kReduced);
        store_16bit_tile<Tile16, Tile::kConsumerThreads>(p, smem_ptr + Tile::kReduceOffset, n0, t0,
                                                         tid);
      } else {
        // Splits met in memory exchange whole tiles (one share); over a cluster each split
        // reduces its share of every split's tile.
        const int shares = p.split_tiles != nullptr ? 1 : splits;
        if constexpr (Tile::kAlternating) {
          // The odd stages' sum first, then the even ones' added to it: the same order every run.
          if (warpgroup == 1) write_accumulator_shares(tile, acc, 0, typename Tile::Shares(shares));
          hopper::named_barrier_sync(1, Tile::kConsumerThreads);
          if (warpgroup == 0) add_accumulator_shares(tile, acc, 0, typename Tile::Shares(shares));
        } else {
          write_accumulator_shares(tile, acc, 64 * warpgroup, typename Tile::Shares(shares));
        }
        if (splits == 1) {
          hopper::named_barrier_sync(1, Tile::kConsumerThreads);
          stamps.mark(timeline::kReduced);
          store_accumulator_tile<typename Tile::ReduceTile, Tile::kConsumerThreads>(p, tile, n0, t0,
                                                                                    tid);
        } else if (!Tile::kSplitsInMemory || p.split_tiles == nullptr) {
          reduce_in_cluster<Tile>(p, smem, n0, t0, split, splits, stamps);
        } else if constexpr (Tile::kSplitsInMemory) {
          // The scale bytes are read: a word of theirs carries the arrival count.
          meet_in_memory<Tile>(p, tile,
                               reinterpret_cast<std::uint32_t*>(smem_ptr + Tile::kScaleOffset), n0,
                               t0, split, splits, stamps);
        }
      }
      stamps.mark(timeline::kStored);
      stamps.flush();
    }
  }
}

}  // namespace mxlinear::device
