// The persistent prefill walk: one CTA per SM takes output tiles (or, stream-K, runs of
// (tile, 128-K chunk) units) one after another while the ring runs on, and stores each tile
// through a small staging buffer beside the ring. A stream-K tile cut between CTAs is met in the
// workspace by the CTA holding its first chunk (docs/PERFORMANCE.md, "The kernels and why they
// are built so").
#pragma once

#include <cstdint>
#include <utility>

#include "device/common/epilogue.cuh"
#include "device/common/gemm_params.hpp"
#include "device/common/timeline.cuh"
#include "device/kernels/prefill/prefill_mainloop.cuh"
#include "device/ptx/hopper_ptx.cuh"

namespace mxlinear::device::prefill_detail {

// Writes this thread's accumulator registers of the round's tokens [S * round, S * round + S)
// (S = kStagedTokens; registers S / 2 * round .. S / 2 * round + S / 2 - 1) into its warpgroup's
// staging buffer, [token][row]. The round is a run-time value, but each branch names its
// registers at compile time, so the accumulator stays in registers and the code holds one copy
// of each round's stores.
template <class Tile, int... kRounds>
__device__ __forceinline__ void stage_round(float* staging, const float (&acc)[Tile::kAccRegs],
                                            int round, std::integer_sequence<int, kRounds...>) {
  const int warp = (static_cast<int>(threadIdx.x) % 128) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  constexpr int kRegs = Tile::kStagedTokens / 2;
  auto write = [&]<int kRound>() {
#pragma unroll
    for (int j = 0; j < kRegs; ++j) {
      const int i =
          kRegs * kRound + j;  // row 16w + l/4 (+ 8), token 8 * (i >> 2) + 2 * (l % 4) (+ 1)
      const int row = 16 * warp + (lane >> 2) + 8 * ((j >> 1) & 1);
      const int token = 8 * (j >> 2) + 2 * (lane & 3) + (j & 1);
      staging[token * Tile::kStagedStride + row] = acc[i];
    }
  };
  ((round == kRounds ? write.template operator()<kRounds>() : void()), ...);
}

// The persistent walk's epilogue: one warpgroup's accumulator (rows from row_base, absolute),
// kStagedTokens a round through its staging buffer, then stored as the tile path stores (bias,
// one rounding, 8 neighbouring output columns a thread): the same bits. The rounds are a rolled
// loop, so the kernel keeps one copy of the store code per output type (an unrolled store from
// the registers made the kernels 8-10x larger: 178-278 KB of SASS against 25-35).
template <class Tile, class T>
__device__ __forceinline__ void store_staged_as(const GemmParams& p,
                                                const float (&acc)[Tile::kAccRegs], float* staging,
                                                int group, int row_base, int t0) {
  const int tid = static_cast<int>(threadIdx.x) % 128;
  const int token = tid >> 3, row = 8 * (tid & 7);  // what this thread stores, every 16 tokens
  const int n = row_base + row;
  float bias[8] = {};
  const bool has_bias = p.bias_type != BiasType::kNone;
  if (has_bias) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (n + j < p.n) bias[j] = epilogue::load_bias(p, n + j);
    }
  }
  const bool vector_aligned = epilogue::rows_16_byte_aligned(p);
  constexpr int kRounds = Tile::kTokens / Tile::kStagedTokens;
#pragma unroll 1
  for (int round = 0; round < kRounds; ++round) {
    stage_round<Tile>(staging, acc, round, std::make_integer_sequence<int, kRounds>{});
    hopper::named_barrier_sync(2 + group, 128);
#pragma unroll
    for (int sub = 0; sub < Tile::kStagedTokens; sub += 16) {
      const int m = t0 + Tile::kStagedTokens * round + sub + token;
      if (m < p.m && n < p.n) {
        const float4* src =
            reinterpret_cast<const float4*>(staging + (sub + token) * Tile::kStagedStride + row);
        const float4 lo = src[0], hi = src[1];
        float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        if (has_bias) {  // not + 0.0f without one: that would turn -0 into +0
#pragma unroll
          for (int j = 0; j < 8; ++j) v[j] += bias[j];
        }
        epilogue::store_run_as<T, 8>(p, vector_aligned, m, n, v);
      }
    }
    hopper::named_barrier_sync(2 + group, 128);  // the buffer is free for the next round
  }
}

template <class Tile>
__device__ __forceinline__ void store_staged(const GemmParams& p,
                                             const float (&acc)[Tile::kAccRegs],
                                             std::uint8_t* smem_ptr, int group, int n0, int t0) {
  float* staging = reinterpret_cast<float*>(smem_ptr + Tile::kStagingOffset) +
                   group * Tile::kStagedTokens * Tile::kStagedStride;
  const int row_base = n0 + 64 * group;
  switch (p.out_type) {
    case OutType::kBF16:
      return store_staged_as<Tile, __nv_bfloat16>(p, acc, staging, group, row_base, t0);
    case OutType::kF16:
      return store_staged_as<Tile, __half>(p, acc, staging, group, row_base, t0);
    case OutType::kF32:
      return store_staged_as<Tile, float>(p, acc, staging, group, row_base, t0);
  }
}

// The stretch of one output tile a persistent CTA takes: 128-K chunks [c_lo, c_hi) of `tile`.
struct TileStretch {
  int tile, c_lo, c_hi;
};

// A persistent CTA's stretches in order. Plain: whole tiles b, b + G, ... (G = gridDim.x), in
// the non-persistent grid's order (weight row tiles fastest). Stream-K: the units [b U / G,
// (b + 1) U / G) of U = tiles * chunks, tile-major, cut at tile ends.
template <class Tile>
struct StretchWalk {
  int tiles, chunks;
  long long next_unit, end_unit;  // stream-K
  int next_tile;                  // plain

  __device__ StretchWalk(int tiles_, int chunks_) : tiles(tiles_), chunks(chunks_) {
    const long long units = static_cast<long long>(tiles_) * chunks_;
    next_unit = static_cast<long long>(blockIdx.x) * units / gridDim.x;
    end_unit = static_cast<long long>(blockIdx.x + 1) * units / gridDim.x;
    next_tile = static_cast<int>(blockIdx.x);
  }

  // The first unit of CTA `cta`'s run (stream-K).
  __device__ long long run_begin(int cta) const {
    return static_cast<long long>(cta) * tiles * chunks / gridDim.x;
  }

  __device__ bool next(TileStretch& s) {
    if constexpr (Tile::kStreamK) {
      if (next_unit >= end_unit) return false;
      s.tile = static_cast<int>(next_unit / chunks);
      s.c_lo = static_cast<int>(next_unit % chunks);
      const long long left = end_unit - next_unit;
      s.c_hi = left < chunks - s.c_lo ? s.c_lo + static_cast<int>(left) : chunks;
      next_unit += s.c_hi - s.c_lo;
      return true;
    } else {
      if (next_tile >= tiles) return false;
      s = {next_tile, 0, chunks};
      next_tile += static_cast<int>(gridDim.x);
      return true;
    }
  }
};

// Stream-K: this CTA's fp32 partial of a tile it does not finish (its run's first stretch, when
// the run starts inside a tile), register-major so every store is coalesced, then published with
// its flag. It comes first in the run, so the owner never waits for a whole run.
template <class Tile>
__device__ __forceinline__ void publish_partial(const GemmParams& p,
                                                const float (&acc)[Tile::kAccRegs]) {
  const int tid = static_cast<int>(threadIdx.x);
  float* slot = p.partials + static_cast<std::size_t>(blockIdx.x) * Tile::kRows * Tile::kTokens;
#pragma unroll
  for (int i = 0; i < Tile::kAccRegs; ++i) slot[i * Tile::kConsumerThreads + tid] = acc[i];
  __threadfence();
  hopper::named_barrier_sync(1, Tile::kConsumerThreads);
  if (tid == 0) hopper::store_release_gpu(p.flags + blockIdx.x, 1u);
}

// Stream-K: the owner of a tile is the CTA holding its first chunk, in its run's last stretch.
// It adds the partials of the CTAs after it that hold the tile's later chunks, nearest first:
// the same order every run. Those partials are their runs' first stretches, so they are
// published early; an owner holding the last chunk instead would wait for the previous CTA's
// whole run, and every run for the one before it (4-12x slower).
template <class Tile>
__device__ __forceinline__ void add_partials(const GemmParams& p, float (&acc)[Tile::kAccRegs],
                                             const StretchWalk<Tile>& walk, long long tile_end) {
  const int tid = static_cast<int>(threadIdx.x);
  for (int cta = static_cast<int>(blockIdx.x) + 1; cta < static_cast<int>(gridDim.x); ++cta) {
    const long long begin = walk.run_begin(cta), end = walk.run_begin(cta + 1);
    if (begin == end) continue;  // an empty run publishes nothing
    while (hopper::load_acquire_gpu(p.flags + cta) == 0) {
    }
    const float* slot = p.partials + static_cast<std::size_t>(cta) * Tile::kRows * Tile::kTokens;
#pragma unroll
    for (int i = 0; i < Tile::kAccRegs; ++i)
      acc[i] += __ldcg(slot + i * Tile::kConsumerThreads + tid);
    if (end >= tile_end) break;  // it holds the tile's last chunk
  }
}

// The persistent walk (Tile::kPersistent): the CTA takes its stretches (StretchWalk). The
// producer runs on into the next stretch as slots free up; each consumer warp copies its own
// rows' scales for the next stretch before this one's epilogue, which stores through a small
// staging buffer (or, stream-K, publishes a partial tile). Timeline stamps cover the last
// stretch (and the first one's wait on the previous kernel).
template <class Tile>
__device__ __forceinline__ void walk_tiles(const CUtensorMap* w_map, const CUtensorMap* a_map,
                                           const GemmParams& p, std::uint32_t smem,
                                           std::uint8_t* smem_ptr, std::uint32_t full,
                                           std::uint32_t empty, int warpgroup,
                                           timeline::Stamps& stamps) {
  const int row_tiles = (p.n + Tile::kRows - 1) / Tile::kRows;
  const int tiles = row_tiles * ((p.m + Tile::kTokens - 1) / Tile::kTokens);
  const int chunks = (p.k + 127) / 128;  // the last one zero-filled past K
  // One scale row stride for every stretch (the launch sized the area for all of K's chunks, or
  // for two windows of them):
  // a stretch-sized stride would move a row's bytes onto another warp's between stretches of
  // different lengths (stream-K), while that warp may still read its previous stretch's.
  const int scale_row_bytes = prefill_scale_row_bytes(chunks);
  auto row_of = [&](int tile) { return (tile % row_tiles) * Tile::kRows; };
  auto token_of = [&](int tile) { return (tile / row_tiles) * Tile::kTokens; };
  StretchWalk<Tile> walk(tiles, chunks);
  if (warpgroup == Tile::kConsumerGroups) {
    if constexpr (Tile::kMovesRegisters) hopper::setmaxnreg_dec<Tile::kProducerRegisters>();
    if (static_cast<int>(threadIdx.x) == Tile::kConsumerThreads) {
      hopper::prefetch_tensor_map(w_map);
      hopper::prefetch_tensor_map(a_map);
      int ring_base = 0;
      for (TileStretch s; walk.next(s);) {
        const int stages = (s.c_hi - s.c_lo) * Tile::kStagesPerChunk;
        produce<Tile>(w_map, a_map, smem, full, empty, s.c_lo, stages, row_of(s.tile),
                      token_of(s.tile), ring_base);
        ring_base += stages;
      }
    }
  } else {
    if constexpr (Tile::kMovesRegisters) hopper::setmaxnreg_inc<Tile::kConsumerRegisters>();
    TileStretch now;
    if (walk.next(now)) {
      stage_scales<Tile>(p, smem + Tile::kScaleOffset, row_of(now.tile), now.c_lo,
                         now.c_hi - now.c_lo, warpgroup, scale_row_bytes);
      int ring_base = 0;
      for (bool more = true; more;) {
        TileStretch after;
        more = walk.next(after);
        const int n0 = row_of(now.tile), t0 = token_of(now.tile);
        float acc[Tile::kAccRegs];
#pragma unroll
        for (int i = 0; i < Tile::kAccRegs; ++i) acc[i] = 0.0f;
        // Stamps of the CTA's last stretch (since its entry): the stored stamp over the
        // stretches walked is the time per stretch.
        if (!more) stamps.mark(timeline::kPrologue);
        consume<Tile>(acc, smem, smem_ptr, full, empty, now.c_hi - now.c_lo, warpgroup,
                      scale_row_bytes, p, n0, now.c_lo, ring_base);
        if (!more) stamps.mark(timeline::kMainLoop);
        // The next stretch's scales, in flight while this one's epilogue runs (each warp copies
        // and reads only its own rows, and its reads of this stretch's are done).
        if (more) {
          __syncwarp();
          stage_scales<Tile>(p, smem + Tile::kScaleOffset, row_of(after.tile), after.c_lo,
                             after.c_hi - after.c_lo, warpgroup, scale_row_bytes);
        }
        if (ring_base == 0) {
          // The output may still be in use by the kernels before us, and (stream-K) the flags are
          // zeroed by the pass just before.
          hopper::wait_prerequisite_grids();
          stamps.mark(timeline::kWaited);
        }
        bool finished = true;
        if constexpr (Tile::kStreamK) {
          if (now.c_lo > 0) {
            publish_partial<Tile>(p, acc);
            finished = false;
          } else if (now.c_hi < chunks) {
            add_partials<Tile>(p, acc, walk, static_cast<long long>(now.tile + 1) * chunks);
          }
        }
        if (finished) store_staged<Tile>(p, acc, smem_ptr, warpgroup, n0, t0);
        if (!more) stamps.mark(timeline::kStored);
        ring_base += (now.c_hi - now.c_lo) * Tile::kStagesPerChunk;
        now = after;
      }
    }
    stamps.flush();
  }
}

}  // namespace mxlinear::device::prefill_detail
