// The Hopper scale-folded GEMM ("prefill"): the MX scales folded into bf16 operands, then a
// plain bf16 wgmma main loop with fp32 accumulation over all of K (no per-block promotion).
// Large tiles serve M >= 256; small ones with split-K serve the middle (M = 16..128).
//
// Design (docs/plans/prefill-kernel.md):
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
// - Optional split-K over a thread-block cluster (split_k.cuh), as in the decode kernel.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <utility>

#include "device/epilogue.cuh"
#include "device/gemm_params.hpp"
#include "device/grid_walk.hpp"
#include "device/hopper_ptx.cuh"
#include "device/mx_convert.cuh"
#include "device/ptx.cuh"
#include "device/share_tile.cuh"
#include "device/split_k.cuh"
#include "device/timeline.cuh"
#include "device/wgmma_f16.cuh"
#include "mxlinear/format.hpp"

namespace mxlinear::device {

// kOverlap: each warpgroup keeps one stage's wgmma in flight while it converts the next stage's
// weights (two fragment sets; a stage goes back to the producer one stage later). Without it,
// a warpgroup waits for its wgmma at the end of every stage (v0).
// kBK: K per stage, 128 (4 MX blocks; weight rows of one 128-byte swizzle atom) or 64 (2 blocks,
// 64-byte swizzled weight rows, one activation atom): half the bytes per stage, so twice the
// stages in the same shared memory (the 128 x 256 tile holds 2 stages of 128 or 4 of 64).
// kAlternating: the two consumer warpgroups share the same 64 weight rows and take alternate
// stages (even, odd), adding their accumulators at the end. A CTA then covers a longer K range
// as fast, so at M = 32 a layer runs with fewer K splits, and less cluster reduction, than with
// one warpgroup (7 of 8 seed shapes 4-16% faster, docs/PERF.md session 11). It was meant to
// shorten each stage with a second consumer chain, which it did not.
template <int kStages_, bool kOverlap_ = false, int kConsumerGroups_ = 2, int kTokens_ = 128,
          int kBK_ = 128, bool kAlternating_ = false, bool kPersistent_ = false,
          bool kStreamK_ = false>
struct PrefillTile {
  static constexpr int kStages = kStages_;
  static constexpr bool kOverlap = kOverlap_;
  static constexpr int kConsumerGroups = kConsumerGroups_;
  static constexpr bool kAlternating = kAlternating_;
  // kPersistent: one CTA per SM walks the output tiles (K unsplit). The ring runs on across
  // tiles, so the producer fills the next tile's stages while the consumers store the last one
  // through a small staging buffer beside the ring (the ring no longer holds the fp32 tile).
  static constexpr bool kPersistent = kPersistent_;
  // kStreamK (persistent): CTA b takes the (tile, 128-K chunk) units [b U / G, (b + 1) U / G)
  // of all U = tiles * K / 128, so every SM has the same work whatever the tile count. A tile
  // cut between CTAs is finished by the one holding its first chunk, which adds the others' fp32
  // partial tiles (GemmParams::partials, flags) in a fixed order: deterministic.
  static constexpr bool kStreamK = kStreamK_;
  static constexpr int kRowGroups = kAlternating ? 1 : kConsumerGroups;  // 64-row groups
  static constexpr int kRows = 64 * kRowGroups;                          // weight rows per CTA
  // A warpgroup's stages: first = its index (alternating) or 0, then every kStageStep-th.
  static constexpr int kStageStep = kAlternating ? kConsumerGroups : 1;
  static constexpr int kTokens = kTokens_;  // wgmma N
  static constexpr int kBK = kBK_;
  static constexpr int kBlocksPerStage = kBK / 32;
  static constexpr int kStagesPerChunk = 128 / kBK;  // splits and scale words go by 128-K chunks
  static constexpr int kConsumerThreads = 128 * kConsumerGroups;
  // 192 or 256 tokens need 96 or 128 accumulator registers a thread: the producer then is a
  // whole warpgroup that gives its registers to the consumers (setmaxnreg: 2 x 128 x 232 +
  // 128 x 40 <= 64 Ki); otherwise one producer warp and no register moves. (Without the move,
  // ptxas serialized the 192-token overlapped variant's wgmma: C7512.)
  static constexpr bool kMovesRegisters = kTokens_ >= 192;
  static constexpr int kConsumerRegisters = 232, kProducerRegisters = 40;
  static constexpr int kThreads = kConsumerThreads + (kMovesRegisters ? 128 : 32);
  static constexpr int kWTileBytes = kRows * kBK;    // e4m3, one swizzle atom wide
  static constexpr int kAAtomBytes = kTokens * 128;  // 64 bf16 of K per token row
  static constexpr int kATileBytes = kBK / 64 * kAAtomBytes;
  static constexpr int kWTileOffset = 0;
  static constexpr int kATileOffset = kWTileOffset + kStages * kWTileBytes;
  static constexpr int kBarrierOffset = kATileOffset + kStages * kATileBytes;
  // The persistent walk's epilogue stages each warpgroup's accumulators 16 tokens at a time
  // (64 rows, padded to 68 floats a token) beside the ring, which the next tile is filling.
  // 256-token tiles stage 64 tokens a round (35 KB fits beside their 160 KB rings and the scales
  // of K = 6144): 4 rounds instead of 16, each costing two barriers and a store's latency.
  static constexpr int kStagedTokens = kTokens_ == 256 ? 64 : 16, kStagedStride = 68;
  static constexpr int kStagingOffset = kBarrierOffset + 2 * kStages * 8;
  static constexpr int kStagingBytes =
      kPersistent ? kConsumerGroups * kStagedTokens * kStagedStride * 4 : 0;
  static constexpr int kScaleOffset = kStagingOffset + kStagingBytes;
  static constexpr int kFixedSmemBytes = kScaleOffset + 1024;  // + alignment slack
  static constexpr std::uint32_t kTxBytes = kWTileBytes + kATileBytes;
  static constexpr int kAccRegs = kTokens / 2;
  // After the main loop the ring holds the CTA's fp32 tile, for the store or the cluster
  // reduction: split-share-major (share_tile.cuh), which with one split is the padded
  // token-major ReduceTile.
  using Shares = ShareLayout<kRows, kTokens>;
  using ReduceTile = FpTile<kRows, kTokens, kRows + 4>;
  static constexpr int kReduceOffset = 0;

  // Shared memory with the weight scale bytes of `chunks` 128-K chunks ([row][4 * chunks]).
  static constexpr int smem_bytes(int chunks) { return kFixedSmemBytes + kRows * 4 * chunks; }

  static_assert(kWTileBytes % 1024 == 0 && kAAtomBytes % 1024 == 0, "swizzle atoms");
  static_assert(kStages >= 2, "a ring needs two stages");
  static_assert(kBK == 128 || kBK == 64, "one or half a 128-byte weight atom per stage");
  static_assert(kConsumerGroups >= 1 && kConsumerGroups <= 3, "one to three consumer warpgroups");
  static_assert(kTokens == 32 || kTokens == 64 || kTokens == 128 || kTokens == 160 ||
                    kTokens == 192 || kTokens == 256,
                "compiled wgmma widths");
  // Other split counts' tiles can be larger (launch checks them: prefill_gemm_splits_fit).
  static_assert(Shares::bytes(1) <= kBarrierOffset && Shares::bytes(2) <= kBarrierOffset &&
                    Shares::bytes(4) <= kBarrierOffset && Shares::bytes(8) <= kBarrierOffset,
                "the reduction tile reuses the ring");
  static_assert(!kMovesRegisters || kConsumerGroups == 2,
                "the register split assumes 2 + 1 groups");
  static_assert(!kAlternating || (kConsumerGroups == 2 && kBK == 128 && kOverlap &&
                                  !kMovesRegisters && kStages % 2 == 0),
                "alternating stages: two overlapped warpgroups, 128-K stages, an even ring");
  static_assert(!kPersistent || (!kAlternating && kConsumerGroups == 2),
                "the persistent walk stores 128-row tiles of two row groups");
  static_assert(!kStreamK || kPersistent, "stream-K is a persistent walk");
  static_assert(kTokens % kStagedTokens == 0, "whole staging rounds");
};

namespace prefill_detail {

// Byte offset of byte `col` of row `row` in a TMA tile of 128-byte rows (128-byte swizzle).
__device__ __forceinline__ int swizzled(int row, int col) {
  return row * 128 + (((col >> 4) ^ (row & 7)) << 4) + (col & 15);
}

// The same in the weight tile of a stage: 128-byte rows as above, or 64-byte rows with TMA's
// 64-byte swizzle (16-byte chunk bits 4-5 XOR offset bits 7-8, i.e. row / 2).
template <int kBK>
__device__ __forceinline__ int weight_offset(int row, int col) {
  if constexpr (kBK == 128) {
    return swizzled(row, col);
  } else {
    return row * 64 + ((((col >> 4) & 3) ^ ((row >> 1) & 3)) << 4) + (col & 15);
  }
}

// The producer thread: fills the ring for this CTA's stages [0, stages) of kBK each, from K =
// 128 * c_begin on. `ring_base` counts the stages the ring took before this tile (the
// persistent walk's earlier tiles; 0 otherwise): stage c uses slot (ring_base + c) % kStages.
template <class Tile>
__device__ __forceinline__ void produce(const CUtensorMap* w_map, const CUtensorMap* a_map,
                                        std::uint32_t smem, std::uint32_t full, std::uint32_t empty,
                                        int c_begin, int chunks, int n0, int t0,
                                        int ring_base = 0) {
  auto weights = [&](int c) {
    const int s = (ring_base + c) % Tile::kStages;
    hopper::mbarrier_arrive_expect_tx(full + 8 * s, Tile::kTxBytes);
    hopper::tma_load_2d(smem + Tile::kWTileOffset + s * Tile::kWTileBytes, w_map,
                        128 * c_begin + c * Tile::kBK, n0, full + 8 * s);
  };
  auto activations = [&](int c) {
    const int s = (ring_base + c) % Tile::kStages;
    const std::uint32_t dst = smem + Tile::kATileOffset + s * Tile::kATileBytes;
    const int k0 = 128 * c_begin + c * Tile::kBK;
#pragma unroll
    for (int atom = 0; atom < Tile::kBK / 64; ++atom) {
      hopper::tma_load_2d(dst + atom * Tile::kAAtomBytes, a_map, k0 + 64 * atom, t0, full + 8 * s);
    }
  };
  // A slot filled before: wait until its consumers released it.
  auto wait_for_slot = [&](int c) {
    const int g = ring_base + c;
    if (g >= Tile::kStages) {
      hopper::mbarrier_wait(empty + 8 * (g % Tile::kStages), (g / Tile::kStages - 1) & 1);
    }
  };
  int c = 0;
  if (ring_base == 0) {
    // Static weights may move before the wait on the previous kernel, but copies into the ring
    // issued then delay the activation copies issued after it (each stage needs both): with
    // every prologue stage's weights first, 8-stage rings lost to 4-stage ones (session 12). So
    // rings of 4 or more stages take two stages' weights before the wait and the rest of the
    // prologue's only into L2, and after the wait the copies go stage by stage. 3-stage rings
    // keep every prologue weight before the wait: stage by stage, the 128 x 192 tile at M = 2048
    // lost 13% (session 13).
    const int prologue = chunks < Tile::kStages ? chunks : Tile::kStages;
    const int early = Tile::kStages >= 4 && prologue > 2 ? 2 : prologue;
    for (; c < early; ++c) weights(c);
    for (int l2 = early; l2 < prologue; ++l2) {
      hopper::tma_prefetch_l2_2d(w_map, 128 * c_begin + l2 * Tile::kBK, n0);
    }
    hopper::wait_prerequisite_grids();
    for (int a = 0; a < prologue; ++a) {
      if (a >= early) weights(a);
      activations(a);
    }
    c = prologue;
  }
  for (; c < chunks; ++c) {
    wait_for_slot(c);
    weights(c);
    activations(c);
  }
}

// Hands stage s back to the producer. Plain reads of a stage precede the producer's next TMA
// write into it only through a proxy fence (the decode kernel lost data without one).
__device__ __forceinline__ void release_stage(std::uint32_t empty, int s, int lane) {
  hopper::fence_proxy_async_shared();
  __syncwarp();
  if (lane == 0) hopper::mbarrier_arrive(empty + 8 * s);
}

// The weight scale bytes of the CTA's rows and K range go to shared memory ([row][4 * chunks])
// by cp.async, each warp fetching the words of the 16 rows it reads, so no CTA barrier: the
// warpgroup's first two chunks in a first group that its first stage waits for, the rest in a
// second group that its third chunk waits for, in flight while the first two compute. Copying them
// all before the main loop cost every CTA 3-4 us at K = 6144 (timeline, session 8); loading each
// thread's words into registers two chunks ahead of use left the 64-row tiles waiting on them.
template <class Tile>
__device__ __forceinline__ void stage_scales(const GemmParams& p, std::uint32_t scale_smem, int n0,
                                             int c_begin, int chunks, int group) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int row_group = Tile::kAlternating ? 0 : group;
  const int row = 64 * row_group + 16 * ((static_cast<int>(threadIdx.x) % 128) >> 5) + (lane & 15);
  const bool valid = n0 + row < p.n;  // rows past N get 0 (a finite scale for TMA's zero rows)
  const std::uint8_t* src = p.w_scales + (valid ? (n0 + row) * p.ld_w_scales : 0) +
                            4 * static_cast<std::int64_t>(c_begin);
  const std::uint32_t dst = scale_smem + static_cast<std::uint32_t>(row * 4 * chunks);
  const int src_bytes = valid ? 4 : 0;
  // This warpgroup's chunks (kBK = 128 when alternating: one stage per chunk).
  const int first = Tile::kAlternating ? group : 0;
  constexpr int kStep = Tile::kStageStep;
  int chunk = first + kStep * (lane >> 4);
  if (chunk < chunks) ptx::cp_async_4(dst + 4 * chunk, src + 4 * chunk, src_bytes);
  ptx::cp_async_commit();
  for (chunk += 2 * kStep; chunk < chunks; chunk += 2 * kStep) {
    ptx::cp_async_4(dst + 4 * chunk, src + 4 * chunk, src_bytes);
  }
  ptx::cp_async_commit();
}

// One consumer warpgroup: rows 64g..64g+63 of the CTA's weight tile (rows 0..63 when
// alternating) times all its tokens, accumulated over its stages of the CTA's K range (`chunks`
// 128-K chunks in stages of kBK; scale bytes [row][4 * chunks] from stage_scales). Stage c
// uses ring slot (ring_base + c) % kStages, as the producer fills them. In a persistent walk
// every stage goes back to the producer before it returns.
template <class Tile>
__device__ __forceinline__ void consume(float (&acc)[Tile::kAccRegs], std::uint32_t smem,
                                        const std::uint8_t* smem_ptr, std::uint32_t full,
                                        std::uint32_t empty, int chunks, int group,
                                        int ring_base = 0) {
  using Mma = hopper::WgmmaBF16RS<Tile::kTokens>;
  const int tid = static_cast<int>(threadIdx.x) % 128;
  const int warp = tid >> 5, lane = tid & 31, t = lane & 3;
  const int row0 = 64 * (Tile::kAlternating ? 0 : group) + 16 * warp + (lane >> 2);  // and + 8
  const std::uint8_t* scale_bytes = smem_ptr + Tile::kScaleOffset;
  const int blocks_per_row = 4 * chunks;
  const int stages = chunks * Tile::kStagesPerChunk;
  // This warpgroup's stages: stage_of(i) for i < count.
  const int first = Tile::kAlternating ? group : 0;
  const int count = (stages - first + Tile::kStageStep - 1) / Tile::kStageStep;
  auto stage_of = [&](int i) { return first + i * Tile::kStageStep; };
  auto slot_of = [&](int i) { return (ring_base + stage_of(i)) % Tile::kStages; };
  constexpr int kRow8 = 8 * Tile::kBK;  // row0 + 8: the same swizzle phase, 8 rows on
  int fragment_offsets[Tile::kBlocksPerStage];
#pragma unroll
  for (int block = 0; block < Tile::kBlocksPerStage; ++block) {
    fragment_offsets[block] = weight_offset<Tile::kBK>(row0, 32 * block + 8 * t);
  }
  const std::uint64_t a_descriptor = hopper::kmajor_sw128_descriptor(smem + Tile::kATileOffset);
  ptx::cp_async_wait<1>();  // this warp's scales of chunks 0 and 1
  __syncwarp();

  // Waits for stage c (this warpgroup's i-th), widens its weight fragments into `a` and issues
  // its wgmma as one group. wgmma reads its register operand asynchronously: `a` stays
  // untouched until a wait covers the group.
  auto issue_stage = [&](int i, std::uint32_t(&a)[Tile::kBlocksPerStage][2][4]) {
    const int c = stage_of(i);
    if (i == 2 * Tile::kStagesPerChunk) {  // the rest of this warp's scales
      ptx::cp_async_wait<0>();
      __syncwarp();
    }
    const int g = ring_base + c;
    const int s = g % Tile::kStages;
    hopper::mbarrier_wait(full + 8 * s, (g / Tile::kStages) & 1);
    const std::uint8_t* w_tile = smem_ptr + Tile::kWTileOffset + s * Tile::kWTileBytes;
#pragma unroll
    for (int block = 0; block < Tile::kBlocksPerStage; ++block) {
      const int b = Tile::kBlocksPerStage * c + block;
      const float s0 = mx::scale_from_byte(scale_bytes[row0 * blocks_per_row + b]);
      const float s8 = mx::scale_from_byte(scale_bytes[(row0 + 8) * blocks_per_row + b]);
      const uint2 r0 = *reinterpret_cast<const uint2*>(w_tile + fragment_offsets[block]);
      const uint2 r8 = *reinterpret_cast<const uint2*>(w_tile + fragment_offsets[block] + kRow8);
      mx::e4m3x4_scaled_to_bf16x2x2(r0.x, s0, a[block][0][0], a[block][0][2]);
      mx::e4m3x4_scaled_to_bf16x2x2(r8.x, s8, a[block][0][1], a[block][0][3]);
      mx::e4m3x4_scaled_to_bf16x2x2(r0.y, s0, a[block][1][0], a[block][1][2]);
      mx::e4m3x4_scaled_to_bf16x2x2(r8.y, s8, a[block][1][1], a[block][1][3]);
    }
    hopper::pin(acc);
    hopper::wgmma_fence();
#pragma unroll
    for (int k16 = 0; k16 < Tile::kBK / 16; ++k16) {
      // B: atom k16 / 4 of stage s, 32 bytes (16 bf16) per k16 step within the atom.
      const int offset = s * Tile::kATileBytes + (k16 >> 2) * Tile::kAAtomBytes + (k16 & 3) * 32;
      // Always accumulate (acc starts at zero): a run-time scale-d predicate would be a
      // non-wgmma instruction feeding a wgmma while the previous group is in flight, which
      // makes ptxas serialize every wgmma (C7513).
      Mma::run(acc, a[k16 >> 1][k16 & 1], a_descriptor + (offset >> 4), true);
    }
    hopper::wgmma_commit();
  };

  if constexpr (Tile::kOverlap) {
    // Two fragment sets used alternately (a compile-time choice, so they stay in registers):
    // after issuing stage c, waiting until one group is pending finishes stage c - 1, whose
    // ring slot and fragment set are then free.
    std::uint32_t even[Tile::kBlocksPerStage][2][4], odd[Tile::kBlocksPerStage][2][4];
    int i = 0;
    for (; i + 1 < count; i += 2) {
      issue_stage(i, even);
      hopper::wgmma_wait<1>();
      if (i > 0) release_stage(empty, slot_of(i - 1), lane);
      issue_stage(i + 1, odd);
      hopper::wgmma_wait<1>();
      release_stage(empty, slot_of(i), lane);
    }
    if (i < count) {  // an odd stage count
      issue_stage(i, even);
      hopper::wgmma_wait<1>();
      if (i > 0) release_stage(empty, slot_of(i - 1), lane);
    }
    hopper::wgmma_wait<0>();
    hopper::pin(acc);
    // The last stage: only a persistent walk's producer fills the ring again after it.
    if constexpr (Tile::kPersistent) release_stage(empty, slot_of(count - 1), lane);
  } else {
    std::uint32_t a[Tile::kBlocksPerStage][2][4];
    for (int i = 0; i < count; ++i) {
      issue_stage(i, a);
      hopper::wgmma_wait<0>();
      hopper::pin(acc);
      release_stage(empty, slot_of(i), lane);
    }
  }
}

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

// The cluster's splits meet, after every CTA's tile is in its ring: the consumer threads add
// and store, between two cluster barriers that every thread of every CTA takes part in (the
// producer's share is only the barriers: the code after setmaxnreg.dec gets 40 registers, and the
// reduction's loads there spilled).
template <class Tile>
__device__ __forceinline__ void reduce_in_cluster(const GemmParams& p, std::uint32_t smem, int n0,
                                                  int t0, int split, int splits) {
  hopper::cluster_sync();
  reduce_shares_and_store(p, smem + Tile::kReduceOffset, n0, t0, split, splits,
                          typename Tile::Shares(splits), static_cast<int>(threadIdx.x),
                          Tile::kConsumerThreads);
  // No CTA may leave while a peer still reads its tile.
  hopper::cluster_sync();
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
// whole run, and every run for the one before it (session 14 call 2: 4-12x slower).
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
  const int chunks = p.k / 128;
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
                         now.c_hi - now.c_lo, warpgroup);
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
        consume<Tile>(acc, smem, smem_ptr, full, empty, now.c_hi - now.c_lo, warpgroup, ring_base);
        if (!more) stamps.mark(timeline::kMainLoop);
        // The next stretch's scales, in flight while this one's epilogue runs (each warp copies
        // and reads only its own rows, and its reads of this stretch's are done).
        if (more) {
          __syncwarp();
          stage_scales<Tile>(p, smem + Tile::kScaleOffset, row_of(after.tile), after.c_lo,
                             after.c_hi - after.c_lo, warpgroup);
        }
        if (ring_base == 0) {
          // The output (and, stream-K, the flags the launch zeroed) may still be in use by the
          // kernels before us.
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
  extern __shared__ std::uint8_t smem_raw[];
  const auto [smem, smem_ptr] = hopper::align_smem_1024(smem_raw);
  const std::uint32_t full = smem + Tile::kBarrierOffset;
  const std::uint32_t empty = full + 8 * Tile::kStages;
  const int tid = static_cast<int>(threadIdx.x);

  // Full: the producer's expect_tx arrival; empty: one arrival per warp that consumes a stage.
  if (tid == 0) hopper::init_ring(full, empty, Tile::kStages, 1, 4 * Tile::kRowGroups);
  __syncthreads();
  hopper::allow_dependent_launch();

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
      if (splits > 1) {
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
      stage_scales<Tile>(p, smem + Tile::kScaleOffset, n0, c_begin, chunks, warpgroup);
      stamps.mark(timeline::kPrologue);
      consume<Tile>(acc, smem, smem_ptr, full, empty, chunks, warpgroup);
      stamps.mark(timeline::kMainLoop);
      // The output may still be read by the kernel before us.
      hopper::wait_prerequisite_grids();
      stamps.mark(timeline::kWaited);
      // The tile goes into the ring, once every consumer warpgroup's last wgmma has finished
      // reading it (the producer's copies all landed before the consumers' last wait); from there
      // it is stored row-contiguous, or met by the other splits.
      auto* tile = reinterpret_cast<float*>(smem_ptr + Tile::kReduceOffset);
      hopper::named_barrier_sync(1, Tile::kConsumerThreads);
      if constexpr (Tile::kAlternating) {
        // The odd stages' sum first, then the even ones' added to it: the same order every run.
        if (warpgroup == 1) write_accumulator_shares(tile, acc, 0, typename Tile::Shares(splits));
        hopper::named_barrier_sync(1, Tile::kConsumerThreads);
        if (warpgroup == 0) add_accumulator_shares(tile, acc, 0, typename Tile::Shares(splits));
      } else {
        write_accumulator_shares(tile, acc, 64 * warpgroup, typename Tile::Shares(splits));
      }
      if (splits == 1) {
        hopper::named_barrier_sync(1, Tile::kConsumerThreads);
        stamps.mark(timeline::kReduced);
        store_accumulator_tile<typename Tile::ReduceTile>(p, tile, n0, t0, tid,
                                                          Tile::kConsumerThreads);
      } else {
        reduce_in_cluster<Tile>(p, smem, n0, t0, split, splits);
      }
      stamps.mark(timeline::kStored);
      stamps.flush();
    }
  }
}

}  // namespace mxlinear::device
