// Split-K inside a thread-block cluster, shared by the wgmma kernels: each CTA of the cluster
// (grid.y = cluster size = splits) computes the same output tile over its own K range, leaves
// it in its shared memory, and the splits' tiles meet through distributed shared memory. They
// are added in split order, the same order every run: deterministic, no atomics, no workspace.
#pragma once

#include <cstdint>

#include "device/common/epilogue.cuh"
#include "device/common/gemm_params.hpp"
#include "device/common/grid_walk.hpp"
#include "device/ptx/hopper_ptx.cuh"

namespace mxlinear::device {

// The most CTAs a split-K cluster holds (the portable cluster size).
inline constexpr int kMaxClusterSplits = 8;

// Where a CTA of a split-K wgmma kernel works. Grid: x = kRows-row weight tiles, y = K splits
// (= the cluster size), z = token tiles; split r takes 128-K chunks [c_begin, c_begin + chunks)
// of the ceil(K / 128), spread as evenly as the division allows.
struct SplitTile {
  int n0, t0;           // first weight row and first token
  int split, splits;    // this CTA's split and the cluster's
  int c_begin, chunks;  // its range of 128-K chunks
};

template <int kRows, int kTokens>
__device__ __forceinline__ SplitTile split_tile(int k) {
  SplitTile t;
  t.n0 = static_cast<int>(blockIdx.x) * kRows;
  t.split = static_cast<int>(blockIdx.y);
  t.splits = static_cast<int>(gridDim.y);
  t.t0 = static_cast<int>(blockIdx.z) * kTokens;
  const ChunkRange range = split_chunks(t.split, t.splits, k_chunks(k));
  t.c_begin = range.begin;
  t.chunks = range.count;
  return t;
}

// A CTA's fp32 output tile in shared memory, token-major: kRows weight rows per token, tokens
// kStride floats apart. kStride = kRows + 4 puts the four lanes that hold one row's
// neighbouring tokens (2 tokens apart) on different banks (8 banks apart), where kStride = kRows
// gives write_accumulator_tile a 4-way bank conflict on every store.
template <int kRows_, int kTokens_, int kStride_ = kRows_>
struct FpTile {
  static constexpr int kRows = kRows_;
  static constexpr int kTokens = kTokens_;
  static constexpr int kStride = kStride_;
  static constexpr int kBytes = kStride * kTokens * 4;
  static_assert(kRows % 8 == 0 && kStride % 4 == 0, "16-byte aligned groups of 8 rows");
};

// Where register i of this thread's wgmma accumulator (64 rows x kTokens, rows from row_base)
// belongs. Accumulator layout of warp w, lane l: register i holds row 16w + l/4 +
// 8 * ((i >> 1) & 1), token 8 * (i >> 2) + 2 * (l % 4) + (i & 1).
struct AccumulatorPosition {
  int row, token;
};

__device__ __forceinline__ AccumulatorPosition accumulator_position(int i, int row_base) {
  const int warp = (static_cast<int>(threadIdx.x) % 128) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  return {row_base + 16 * warp + (lane >> 2) + 8 * ((i >> 1) & 1),
          8 * (i >> 2) + 2 * (lane & 3) + (i & 1)};
}

// Where register i sits in the tile.
template <class Layout>
__device__ __forceinline__ int accumulator_tile_index(int i, int row_base) {
  const AccumulatorPosition at = accumulator_position(i, row_base);
  return at.token * Layout::kStride + at.row;
}

// Writes one warpgroup's accumulator into the tile.
template <class Layout>
__device__ __forceinline__ void write_accumulator_tile(float* tile,
                                                       const float (&acc)[Layout::kTokens / 2],
                                                       int row_base) {
#pragma unroll
  for (int i = 0; i < Layout::kTokens / 2; ++i) {
    tile[accumulator_tile_index<Layout>(i, row_base)] = acc[i];
  }
}

// Adds a tile written by write_accumulator_tile into this warpgroup's accumulator.
template <class Layout>
__device__ __forceinline__ void add_accumulator_tile(const float* tile,
                                                     float (&acc)[Layout::kTokens / 2],
                                                     int row_base) {
#pragma unroll
  for (int i = 0; i < Layout::kTokens / 2; ++i) {
    acc[i] += tile[accumulator_tile_index<Layout>(i, row_base)];
  }
}

// A whole tile's stores as straight-line code: every step unrolled, one output type, no bounds
// checks. Measured on the H200, the general loop below took ~1.2 us for a 64 x 128 tile (8 steps
// a thread) where the same stores alone take ~0.35 us; this path took ~0.65. With kThreads a
// multiple of the tile's 8-column groups, a thread's columns (and bias) are the same at every
// step.
template <class T, class Layout, int kThreads>
__device__ __forceinline__ void store_whole_tile(const GemmParams& p, const float* tile, int n0,
                                                 int t0, int tid) {
  constexpr int kGroups = Layout::kRows / 8;
  static_assert(kThreads % kGroups == 0 && Layout::kTokens % (kThreads / kGroups) == 0,
                "whole steps, each thread on fixed columns");
  constexpr int kSteps = Layout::kTokens / (kThreads / kGroups);
  const int col = 8 * (tid % kGroups), first_token = tid / kGroups;
  float bias[8];
  const bool has_bias = p.bias_type != BiasType::kNone;
#pragma unroll
  for (int i = 0; i < 8; ++i) bias[i] = has_bias ? epilogue::load_bias(p, n0 + col + i) : 0.0f;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int token = first_token + s * (kThreads / kGroups);
    const float4* src = reinterpret_cast<const float4*>(tile + token * Layout::kStride + col);
    const float4 lo = src[0], hi = src[1];
    float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    if (has_bias) {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] += bias[i];
    }
    epilogue::store_vector<T, 8>(p, t0 + token, n0 + col, v);
  }
}

// Stores a whole tile written by write_accumulator_tile (after a barrier that follows every
// warpgroup's write): bias, one rounding, and 8 consecutive output columns (weight rows) of one
// token per thread and step, so a warp writes 4 whole 128-byte lines of bf16 where the rows are
// 16-byte aligned, instead of 16-byte pieces of 4 rows per store from the accumulator layout.
// Tiles wholly inside the output take store_whole_tile; the others this loop.
template <class Layout, int kThreads>
__device__ __forceinline__ void store_accumulator_tile(const GemmParams& p, const float* tile,
                                                       int n0, int t0, int tid) {
  constexpr int kGroups = Layout::kRows / 8;
  const bool vector_aligned = epilogue::rows_16_byte_aligned(p);
  if (vector_aligned && t0 + Layout::kTokens <= p.m && n0 + Layout::kRows <= p.n) {
    switch (p.out_type) {
      case OutType::kBF16:
        return store_whole_tile<__nv_bfloat16, Layout, kThreads>(p, tile, n0, t0, tid);
      case OutType::kF16:
        return store_whole_tile<__half, Layout, kThreads>(p, tile, n0, t0, tid);
      case OutType::kF32:
        return store_whole_tile<float, Layout, kThreads>(p, tile, n0, t0, tid);
    }
  }
  for (int e = tid; e < Layout::kTokens * kGroups; e += kThreads) {
    const int token = e / kGroups, col = 8 * (e % kGroups);
    const int m = t0 + token, n = n0 + col;
    if (m >= p.m || n >= p.n) continue;
    const float4* src = reinterpret_cast<const float4*>(tile + token * Layout::kStride + col);
    const float4 lo = src[0], hi = src[1];
    float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    epilogue::store_run_with_bias(p, vector_aligned, m, n, v);
  }
}

// After a cluster barrier that follows every CTA's write_accumulator_tile: split r adds rows
// [r * kRows / splits, (r + 1) * kRows / splits) of every split's tile (at `tile_address` in
// each CTA), in split order, adds the bias, rounds once and stores. All `threads` threads of
// the CTA take part; a cluster barrier must follow before any CTA exits. One output per step,
// with every split's value in flight at once: one distributed shared memory round trip per
// output and thread, which suits the decode kernel's small tiles (64 x 8 at M = 1: one step).
template <class Layout>
__device__ __forceinline__ void reduce_splits_and_store(const GemmParams& p,
                                                        std::uint32_t tile_address, int n0, int t0,
                                                        int split, int splits, int threads) {
  const int row_begin = split * Layout::kRows / splits;
  const int rows = (split + 1) * Layout::kRows / splits - row_begin;
  for (int e = static_cast<int>(threadIdx.x); e < rows * Layout::kTokens; e += threads) {
    const int token = e / rows;
    const int row = row_begin + e % rows;
    const int n = n0 + row, m = t0 + token;
    if (n >= p.n || m >= p.m) continue;
    const std::uint32_t local =
        tile_address + 4u * static_cast<std::uint32_t>(token * Layout::kStride + row);
    // Every split's value in flight at once (a loop adding as it loads waits out a distributed
    // shared memory round trip per split), then added in split order as before.
    float part[kMaxClusterSplits];
#pragma unroll
    for (int r = 0; r < kMaxClusterSplits; ++r) {
      part[r] =
          r < splits ? hopper::load_cluster_shared(local, static_cast<std::uint32_t>(r)) : 0.0f;
    }
    float sum = part[0];
#pragma unroll
    for (int r = 1; r < kMaxClusterSplits; ++r) {
      if (r < splits) sum += part[r];
    }
    if (p.bias_type != BiasType::kNone) sum += epilogue::load_bias(p, n);
    epilogue::store_one(p, m, n, sum);
  }
}

}  // namespace mxlinear::device
