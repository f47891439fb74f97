// The prefill kernel's K splits met in memory (GemmParams::split_tiles) instead of over a
// thread-block cluster, for tiles of one consumer warpgroup. Over a cluster such CTAs went two to
// an SM where two fit, or their clusters did not all fit the GPCs at one an SM; launched plainly
// they spread one to an SM and meet through L2, and their tiles (8-32 KiB) are small enough for
// that (docs/PERFORMANCE.md, "Split-K"; the registry picks where: detail::meets_splits_in_memory).
#pragma once

#include <cstdint>

#include "device/common/gemm_params.hpp"
#include "device/common/split_k.cuh"
#include "device/common/timeline.cuh"
#include "device/ptx/hopper_ptx.cuh"

namespace mxlinear::device::prefill_detail {

// After every consumer thread's part of the CTA's fp32 tile is in `tile` (Tile::ReduceTile's
// layout): the CTA copies it to its slot, then counts itself in at the output tile's arrival
// word. The split that arrives last adds every split's tile in split order (the cluster
// meeting's order, so the same bits whichever CTA is last), adds the bias, rounds once and
// stores. No CTA waits for another, so a grid of any size runs. `arrival` is a shared word the
// consumers may use (its old value is overwritten).
template <class Tile>
__device__ __forceinline__ void meet_in_memory(const GemmParams& p, float* tile,
                                               volatile std::uint32_t* arrival, int n0, int t0,
                                               int split, int splits, timeline::Stamps& stamps) {
  using Layout = typename Tile::ReduceTile;
  constexpr int kThreads = Tile::kConsumerThreads;
  constexpr int kQuads = Tile::kRows / 4;  // 16-byte quads a token
  constexpr int kQuadsPerTile = Tile::kTokens * kQuads;
  static_assert(kQuadsPerTile % kThreads == 0, "whole steps");
  // A thread's quads: kSteps of them, kThreads apart; read kBatch at a time, so that a batch of
  // one split's quads is in flight at once (a round trip a split and batch, not one per quad).
  constexpr int kSteps = kQuadsPerTile / kThreads;
  constexpr int kBatch = kSteps < 8 ? kSteps : 8;
  static_assert(kSteps % kBatch == 0, "whole batches");
  const int tid = static_cast<int>(threadIdx.x);
  const std::int64_t tile_index = blockIdx.x + static_cast<std::int64_t>(gridDim.x) * blockIdx.z;
  float4* slots = reinterpret_cast<float4*>(p.split_tiles) + tile_index * splits * kQuadsPerTile;
  const auto at = [&](int e) {
    return reinterpret_cast<float4*>(tile + (e / kQuads) * Layout::kStride + 4 * (e % kQuads));
  };

  hopper::named_barrier_sync(1, kThreads);  // the tile is whole
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int e = tid + s * kThreads;
    __stcg(slots + split * kQuadsPerTile + e, *at(e));
  }
  // The barrier orders every thread's copies before thread 0's release (cumulative), so one
  // acq_rel add publishes them all, and acquires the other splits' copies for the last.
  hopper::named_barrier_sync(1, kThreads);
  if (tid == 0) *arrival = hopper::add_acq_rel_gpu(p.split_arrivals + tile_index, 1u);
  hopper::named_barrier_sync(1, kThreads);
  if (*arrival != static_cast<std::uint32_t>(splits - 1)) return;
  stamps.mark(timeline::kReduced);
#pragma unroll 1
  for (int b = 0; b < kSteps; b += kBatch) {
    float4 sum[kBatch];
#pragma unroll 1
    for (int r = 0; r < splits; ++r) {
      float4 part[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int e = tid + (b + j) * kThreads;
        part[j] = r == split ? *at(e) : __ldcg(slots + r * kQuadsPerTile + e);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (r == 0) {
          sum[j] = part[j];
        } else {
          sum[j].x += part[j].x;
          sum[j].y += part[j].y;
          sum[j].z += part[j].z;
          sum[j].w += part[j].w;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) *at(tid + (b + j) * kThreads) = sum[j];
  }
  hopper::named_barrier_sync(1, kThreads);
  store_accumulator_tile<Layout, kThreads>(p, tile, n0, t0, tid);
}

}  // namespace mxlinear::device::prefill_detail
