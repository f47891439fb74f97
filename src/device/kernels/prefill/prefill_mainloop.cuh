// The prefill kernel's tile (PrefillTile: rows, tokens, ring, roles and the shared memory
// map) and its main loop: the producer's TMA copies, the weight scales' copy, and the consumer
// warpgroups' register-A wgmma over a CTA's K range (prefill_gemm.cuh has the design).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "device/common/gemm_params.hpp"
#include "device/common/grid_walk.hpp"
#include "device/common/mx_convert.cuh"
#include "device/common/sm90.hpp"
#include "device/common/swizzle.cuh"
#include "device/kernels/prefill/prefill_gemm.hpp"
#include "device/kernels/prefill/share_tile.cuh"
#include "device/kernels/prefill/tile_store_16bit.cuh"
#include "device/ptx/hopper_ptx.cuh"
#include "device/ptx/ptx.cuh"
#include "device/ptx/wgmma_f16.cuh"
#include "mxlinear/format.hpp"

namespace mxlinear::device {

// kOverlap: each warpgroup keeps one stage's wgmma in flight while it converts the next stage's
// weights (two fragment sets; a stage goes back to the producer one stage later). Without it,
// a warpgroup waits for its wgmma at the end of every stage.
// kBK: K per stage, 128 (4 MX blocks; weight rows of one 128-byte swizzle atom) or 64 (2 blocks,
// 64-byte swizzled weight rows, one activation atom): half the bytes per stage, so twice the
// stages in the same shared memory (the 128 x 256 tile holds 2 stages of 128 or 4 of 64).
// kAlternating: the two consumer warpgroups share the same 64 weight rows and take alternate
// stages (even, odd), adding their accumulators at the end. A CTA then covers a longer K range
// as fast, so at M = 32 a layer runs with fewer K splits, and less cluster reduction, than with
// one warpgroup (7 of 8 seed shapes 4-16% faster on the H200). It was meant to
// shorten each stage with a second consumer chain, which it did not.
// Bytes per weight row of the scale area in shared memory for `chunks` 128-K chunks, at most
// kPrefillScaleSlots of them (prefill_gemm.hpp): an odd number of words, so the 8 rows of a
// warp's fragment loads fall in 8 different banks. With an even count, rows g and g + 2 shared
// a bank: the scale loads took 4 wavefronts each (ncu at M = 8192: 23% of the kernel's shared
// wavefronts were excess).
constexpr int prefill_scale_row_bytes(int chunks) {
  return 4 * ((chunks < kPrefillScaleSlots ? chunks : kPrefillScaleSlots) | 1);
}

// A tile's shape, the template argument of PrefillTile:
// PrefillTile<PrefillShape{.stages = 4, .overlap = true, ...}>. The members below say what each
// field does.
struct PrefillShape {
  int stages;
  bool overlap = false;
  int consumer_groups = 2;  // consumer warpgroups: 64 weight rows each, unless alternating
  int tokens = 128;         // wgmma N
  int bk = 128;             // K per stage
  bool alternating = false;
  bool persistent = false;
  bool stream_k = false;
  bool k_parts = false;
};

template <PrefillShape kShape>
struct PrefillTile {
  static constexpr int kStages = kShape.stages;
  static constexpr bool kOverlap = kShape.overlap;
  static constexpr int kConsumerGroups = kShape.consumer_groups;
  static constexpr bool kAlternating = kShape.alternating;
  // kPersistent: one CTA per SM walks the output tiles (K unsplit). The ring runs on across
  // tiles, so the producer fills the next tile's stages while the consumers store the last one
  // through a small staging buffer beside the ring (the ring no longer holds the fp32 tile).
  static constexpr bool kPersistent = kShape.persistent;
  // kStreamK (persistent): CTA b takes the (tile, 128-K chunk) units [b U / G, (b + 1) U / G)
  // of all U = tiles * K / 128, so every SM has the same work whatever the tile count. A tile
  // cut between CTAs is finished by the one holding its first chunk, which adds the others' fp32
  // partial tiles (GemmParams::partials, flags) in a fixed order: deterministic.
  static constexpr bool kStreamK = kShape.stream_k;
  // kKParts: the batch-invariant order (batch_invariant_parts) in one CTA over all of K. Each
  // warpgroup keeps the sum of the parts before the current one: entering a part, it waits for
  // its wgmma, adds the finished part's sum to that total and restarts the accumulator from
  // zero; after the last part the accumulator becomes total + part, the value a cluster split in
  // as many parts adds up. Tiles of up to 128 x 128 keep the total in a second set of registers
  // (64 more a thread at most); wider ones, whose accumulators fill the registers, in their SM's
  // slot of GemmParams::part_sums, which stays in L2 (each thread reads back only what it wrote;
  // a part change stores the tile and, from the second on, loads it first: 4-40% over the twin
  // tile at M = 1024-4096, docs/PERFORMANCE.md, "The batch-invariant mode").
  static constexpr bool kKParts = kShape.k_parts;
  // A split tile of one consumer warpgroup meets its other splits in memory where the launch
  // gives it the workspace (split_in_memory.cuh); the others always over a cluster.
  static constexpr bool kSplitsInMemory =
      kConsumerGroups == 1 && !kAlternating && !kKParts && !kPersistent;
  static constexpr bool kPartSumsInMemory =
      kShape.k_parts && (kShape.tokens > 128 || kShape.consumer_groups > 2);
  static constexpr int kRowGroups = kAlternating ? 1 : kConsumerGroups;  // 64-row groups
  static constexpr int kRows = 64 * kRowGroups;                          // weight rows per CTA
  // A warpgroup's stages: first = its index (alternating) or 0, then every kStageStep-th.
  static constexpr int kStageStep = kAlternating ? kConsumerGroups : 1;
  static constexpr int kTokens = kShape.tokens;  // wgmma N
  static constexpr int kBK = kShape.bk;
  static constexpr int kBlocksPerStage = kBK / 32;
  static constexpr int kStagesPerChunk = 128 / kBK;  // splits and scale words go by 128-K chunks
  static constexpr int kConsumerThreads = 128 * kConsumerGroups;
  // 192 or 256 tokens need 96 or 128 accumulator registers a thread: the producer then is a
  // whole warpgroup that gives its registers to the consumers (setmaxnreg: 2 x 128 x 232 +
  // 128 x 40 <= 64 Ki); otherwise one producer warp and no register moves. (Without the move,
  // ptxas serialized the 192-token overlapped variant's wgmma: C7512.) So do 128 tokens whose
  // K parts two warpgroups sum in registers (128 accumulator registers; 224 a thread spilled).
  // The moves need ptxas to give the kernel 168 registers a thread at launch, or a consumer's
  // setmaxnreg.inc would wait forever: the launcher checks (prefill_gemm_register_moves).
  static constexpr bool kMovesRegisters =
      kTokens >= 192 || (kShape.k_parts && kTokens == 128 && kConsumerGroups == 2);
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
  static constexpr int kStagedTokens = kTokens == 256 ? 64 : 16, kStagedStride = 68;
  // Three barriers a slot: full (the activation copies landed), empty (the consumers released
  // it) and weights full (the weight copy landed), so that a stage's weights, copied before the
  // wait on the previous kernel, are widened while its activation copies are still in flight.
  static constexpr int kWeightsFullOffset = kBarrierOffset + 2 * kStages * 8;
  static constexpr int kStagingOffset = kBarrierOffset + 3 * kStages * 8;
  static constexpr int kStagingBytes =
      kPersistent ? kConsumerGroups * kStagedTokens * kStagedStride * 4 : 0;
  static constexpr int kScaleOffset = kStagingOffset + kStagingBytes;
  static constexpr int kFixedSmemBytes = kScaleOffset + 1024;  // + alignment slack
  static constexpr int kAccRegs = kTokens / 2;
  // After the main loop the ring holds the CTA's fp32 tile, for the store or the cluster
  // reduction: split-share-major (share_tile.cuh), which with one split is the padded
  // token-major ReduceTile.
  using Shares = ShareLayout<kRows, kTokens>;
  using ReduceTile = FpTile<kRows, kTokens, kRows + 4>;
  static constexpr int kReduceOffset = 0;

  // Shared memory with the weight scale bytes of `chunks` 128-K chunks
  // ([row][prefill_scale_row_bytes(chunks)]).
  static constexpr int smem_bytes(int chunks) {
    return kFixedSmemBytes + kRows * prefill_scale_row_bytes(chunks);
  }

  static_assert(kWTileBytes % 1024 == 0 && kAAtomBytes % 1024 == 0, "swizzle atoms");
  static_assert(kStages >= 2, "a ring needs two stages");
  static_assert(kBK == 128 || kBK == 64, "one or half a 128-byte weight atom per stage");
  static_assert(kConsumerGroups >= 1 && kConsumerGroups <= 3, "one to three consumer warpgroups");
  static_assert(kTokens == 32 || kTokens == 64 || kTokens == 128 || kTokens == 160 ||
                    kTokens == 192 || kTokens == 256,
                "compiled wgmma widths");
  static_assert(Tile16Bit<kRows, kTokens>::kBytes <= kBarrierOffset,
                "the 16-bit output tile reuses the ring");
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
  static_assert(!kKParts || (!kAlternating && !kPersistent), "k parts: a plain tile over all of K");
  static_assert(!kPartSumsInMemory || ctas_per_sm_by_smem(kFixedSmemBytes) < 2,
                "a tile whose part sums live in its SM's slot holds its SM alone");
};

namespace prefill_detail {

// The same in the weight tile of a stage: 128-byte rows as above, or 64-byte rows with TMA's
// 64-byte swizzle (16-byte chunk bits 4-5 XOR offset bits 7-8, i.e. row / 2).
template <int kBK>
__device__ __forceinline__ int weight_offset(int row, int col) {
  if constexpr (kBK == 128) {
    return swizzle128_offset(row, col);
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
  const std::uint32_t weights_full = smem + Tile::kWeightsFullOffset;
  auto weights = [&](int c) {
    const int s = (ring_base + c) % Tile::kStages;
    hopper::mbarrier_arrive_expect_tx(weights_full + 8 * s, Tile::kWTileBytes);
    hopper::tma_load_2d(smem + Tile::kWTileOffset + s * Tile::kWTileBytes, w_map,
                        128 * c_begin + c * Tile::kBK, n0, weights_full + 8 * s);
  };
  auto activations = [&](int c) {
    const int s = (ring_base + c) % Tile::kStages;
    hopper::mbarrier_arrive_expect_tx(full + 8 * s, Tile::kATileBytes);
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
    // every prologue stage's weights first, 8-stage rings lost to 4-stage ones. So
    // rings of 4 or more stages take two stages' weights before the wait and the rest of the
    // prologue's only into L2, and after the wait the copies go stage by stage. 3-stage rings
    // keep every prologue weight before the wait: stage by stage, the 128 x 192 tile at M = 2048
    // lost 13%.
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

// Whether the weight scales can be copied a 128-K chunk's 4-byte word at a time.
__device__ __forceinline__ bool scale_words_copyable(const GemmParams& p) {
  return p.k % 128 == 0 && reinterpret_cast<std::uintptr_t>(p.w_scales) % 4 == 0 &&
         (p.n <= 1 || p.ld_w_scales % 4 == 0);
}

// The weight scale bytes of the CTA's rows and K range go to shared memory ([row][row_bytes],
// row_bytes from prefill_scale_row_bytes, chunk c in slot c % kPrefillScaleSlots) by cp.async,
// each warp fetching the words of the 16 rows it reads, so no CTA barrier: the warpgroup's first
// two chunks in a first group that its first stage waits for, the rest of the first two windows
// in a second group that its third chunk waits for, in flight while the first two compute;
// consume() refills later windows. Copying them all before the main loop cost every CTA 3-4 us
// at K = 6144 (timeline); loading each thread's words into registers two chunks ahead of use
// left the 64-row tiles waiting on them. Where K % 128 != 0 or the scale rows are not 4-byte
// aligned, the words are assembled byte by byte with plain loads instead (0, a finite 2^-127,
// for blocks past K, whose data TMA zero-filled): the same layout, only slower to copy.
//
// copy_scale_chunks: this warp's share of chunks [from, to) of the CTA's range (from a multiple
// of 2 * kStageStep, so each lane keeps its parity of chunks), as one cp.async group.
template <class Tile>
__device__ __forceinline__ void copy_scale_chunks(const GemmParams& p, std::uint32_t scale_smem,
                                                  int n0, int c_begin, int from, int to, int group,
                                                  int row_bytes) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int row_group = Tile::kAlternating ? 0 : group;
  const int row = 64 * row_group + 16 * ((static_cast<int>(threadIdx.x) % 128) >> 5) + (lane & 15);
  const bool valid = n0 + row < p.n;  // rows past N get 0 (a finite scale for TMA's zero rows)
  const std::uint32_t dst = scale_smem + static_cast<std::uint32_t>(row * row_bytes);
  constexpr int kStep = Tile::kStageStep;
  // This warpgroup's chunks (kBK = 128 when alternating: one stage per chunk).
  const int first = from + (Tile::kAlternating ? group : 0) + kStep * (lane >> 4);
  auto slot = [](int chunk) { return 4 * (chunk % kPrefillScaleSlots); };
  if (!scale_words_copyable(p)) {
    const int blocks = p.k / kBlockSize;  // of a whole row; the chunk's blocks past it get 0
    for (int chunk = first; chunk < to; chunk += 2 * kStep) {
      ptx::st_shared_u32(dst + slot(chunk),
                         mx::scale_word_bytewise(p.w_scales, p.ld_w_scales, n0 + row, p.n,
                                                 c_begin + chunk, blocks));
    }
  } else {
    const std::uint8_t* src = p.w_scales + (valid ? (n0 + row) * p.ld_w_scales : 0) +
                              4 * static_cast<std::int64_t>(c_begin);
    const int src_bytes = valid ? 4 : 0;
    for (int chunk = first; chunk < to; chunk += 2 * kStep) {
      ptx::cp_async_4(dst + slot(chunk), src + 4 * chunk, src_bytes);
    }
  }
  ptx::cp_async_commit();
}

template <class Tile>
__device__ __forceinline__ void stage_scales(const GemmParams& p, std::uint32_t scale_smem, int n0,
                                             int c_begin, int chunks, int group, int row_bytes) {
  constexpr int kFirst = 2 * Tile::kStageStep;  // the warpgroup's first two chunks
  const int staged = chunks < kPrefillScaleSlots ? chunks : kPrefillScaleSlots;
  copy_scale_chunks<Tile>(p, scale_smem, n0, c_begin, 0, staged < kFirst ? staged : kFirst, group,
                          row_bytes);
  copy_scale_chunks<Tile>(p, scale_smem, n0, c_begin, kFirst, staged, group, row_bytes);
  __syncwarp();  // the bytewise path's plain stores
}

// One consumer warpgroup: rows 64g..64g+63 of the CTA's weight tile (rows 0..63 when
// alternating) times all its tokens, accumulated over its stages of the CTA's K range (`chunks`
// 128-K chunks in stages of kBK; scale bytes [row][scale_row_bytes] from stage_scales). Stage c
// uses ring slot (ring_base + c) % kStages, as the producer fills them. In a persistent walk
// every stage goes back to the producer before it returns.
// `p`, `n0` and `c_begin` (the CTA's rows and first chunk) say where later scale windows come
// from.
template <class Tile>
__device__ __forceinline__ void consume(float (&acc)[Tile::kAccRegs], std::uint32_t smem,
                                        const std::uint8_t* smem_ptr, std::uint32_t full,
                                        std::uint32_t empty, int chunks, int group,
                                        int scale_row_bytes, const GemmParams& p, int n0,
                                        int c_begin, int ring_base = 0) {
  using Mma = hopper::WgmmaBF16RS<Tile::kTokens>;
  const int tid = static_cast<int>(threadIdx.x) % 128;
  const int warp = tid >> 5, lane = tid & 31, t = lane & 3;
  const int row0 = 64 * (Tile::kAlternating ? 0 : group) + 16 * warp + (lane >> 2);  // and + 8
  // This thread's rows' scale words (row0 and row0 + 8; a word per 128-K chunk).
  const std::uint8_t* const scales0 = smem_ptr + Tile::kScaleOffset + row0 * scale_row_bytes;
  const std::uint8_t* const scales8 = scales0 + 8 * scale_row_bytes;
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
  // K parts: the sum of the finished parts, and the stage where the next part starts. A part's
  // sum is never -0 (its chain starts at +0), so total = 0 + first part is that part's bits.
  constexpr bool kTotalInRegisters = Tile::kKParts && !Tile::kPartSumsInMemory;
  float total[kTotalInRegisters ? Tile::kAccRegs : 1];
#pragma unroll
  for (int r = 0; r < (kTotalInRegisters ? Tile::kAccRegs : 1); ++r) total[r] = 0.0f;
  // In memory: this thread's words of its SM's tile, a register's words contiguous over the
  // consumer threads.
  float* part_sum = nullptr;
  if constexpr (Tile::kPartSumsInMemory) {
    part_sum = p.part_sums +
               static_cast<std::size_t>(hopper::sm_id()) * Tile::kRows * Tile::kTokens +
               threadIdx.x;
  }
  // total += acc, wherever total lives (the first part's store needs no load). In memory, 32
  // words are loaded before any of them is stored (the fragment registers are free by then):
  // word by word, each store ordered the next load behind it, and a part change of the 128 x 192
  // tile at M = 1024 cost ~10 us of round trips.
  auto add_to_total = [&](bool first) {
    if constexpr (Tile::kPartSumsInMemory) {
      constexpr int kBatch = 32;
      static_assert(Tile::kAccRegs % kBatch == 0, "whole batches");
#pragma unroll
      for (int r0 = 0; r0 < Tile::kAccRegs; r0 += kBatch) {
        float* words = part_sum + r0 * Tile::kConsumerThreads;
        float before[kBatch];
#pragma unroll
        for (int r = 0; r < kBatch; ++r) {
          before[r] = first ? 0.0f : __ldcg(words + r * Tile::kConsumerThreads);
        }
#pragma unroll
        for (int r = 0; r < kBatch; ++r) {
          __stcg(words + r * Tile::kConsumerThreads, before[r] + acc[r0 + r]);
        }
      }
    } else {
#pragma unroll
      for (int r = 0; r < (kTotalInRegisters ? Tile::kAccRegs : 0); ++r) total[r] += acc[r];
    }
  };
  const int parts = Tile::kKParts ? batch_invariant_parts(p.k) : 1;
  int part = 1;
  auto part_start = [&](int j) {
    return j < parts ? split_chunks(j, parts, k_chunks(p.k)).begin * Tile::kStagesPerChunk : stages;
  };
  int next_part = part_start(1);

  // Waits for stage c (this warpgroup's i-th), widens its weight fragments into `a` and issues
  // its wgmma as one group. wgmma reads its register operand asynchronously: `a` stays
  // untouched until a wait covers the group.
  auto issue_stage = [&](int i, std::uint32_t(&a)[Tile::kBlocksPerStage][2][4]) {
    const int c = stage_of(i);
    if constexpr (Tile::kKParts) {
      if (c == next_part) {  // the previous part's wgmma finish before its sum moves
        hopper::wgmma_wait<0>();
        hopper::pin(acc);
        add_to_total(part == 1);
#pragma unroll
        for (int r = 0; r < Tile::kAccRegs; ++r) acc[r] = 0.0f;
        ++part;
        next_part = part_start(part);
      }
    }
    if (i == 2 * Tile::kStagesPerChunk) {  // the rest of this warp's first two windows
      ptx::cp_async_wait<0>();
      __syncwarp();
    }
    // Entering window w >= 1 (this warpgroup's first chunk in it): window w - 1 is read, so its
    // slots take window w + 1. Window w itself came in the group issued on entering w - 1.
    if (chunks > kPrefillScaleSlots && c % Tile::kStagesPerChunk == 0) {
      const int chunk = c / Tile::kStagesPerChunk;
      if (chunk >= kPrefillScaleWindow && chunk % kPrefillScaleWindow < Tile::kStageStep) {
        const int window = chunk / kPrefillScaleWindow;
        if (window >= 2) ptx::cp_async_wait<0>();
        __syncwarp();  // every lane's reads of window w - 1 done; window w visible to all
        const int from = (window + 1) * kPrefillScaleWindow;
        const int to = from + kPrefillScaleWindow < chunks ? from + kPrefillScaleWindow : chunks;
        if (from < to) {
          copy_scale_chunks<Tile>(p, smem + Tile::kScaleOffset, n0, c_begin, from, to, group,
                                  scale_row_bytes);
          __syncwarp();
        }
      }
    }
    const int g = ring_base + c;
    const int s = g % Tile::kStages;
    const std::uint32_t phase = (g / Tile::kStages) & 1;
    hopper::mbarrier_wait(smem + Tile::kWeightsFullOffset + 8 * s, phase);
    const std::uint8_t* w_tile = smem_ptr + Tile::kWTileOffset + s * Tile::kWTileBytes;
    // One word load per row and stage: the stage's blocks lie in one chunk's word.
    const int b0 = Tile::kBlocksPerStage * c;
    const int slot = 4 * ((b0 >> 2) % kPrefillScaleSlots);
    const std::uint32_t words0 = *reinterpret_cast<const std::uint32_t*>(scales0 + slot);
    const std::uint32_t words8 = *reinterpret_cast<const std::uint32_t*>(scales8 + slot);
#pragma unroll
    for (int block = 0; block < Tile::kBlocksPerStage; ++block) {
      const int shift = 8 * ((b0 + block) & 3);
      const float s0 = mx::scale_from_byte((words0 >> shift) & 0xFFu);
      const float s8 = mx::scale_from_byte((words8 >> shift) & 0xFFu);
      const uint2 r0 = *reinterpret_cast<const uint2*>(w_tile + fragment_offsets[block]);
      const uint2 r8 = *reinterpret_cast<const uint2*>(w_tile + fragment_offsets[block] + kRow8);
      mx::e4m3x4_scaled_to_bf16x2x2(r0.x, s0, a[block][0][0], a[block][0][2]);
      mx::e4m3x4_scaled_to_bf16x2x2(r8.x, s8, a[block][0][1], a[block][0][3]);
      mx::e4m3x4_scaled_to_bf16x2x2(r0.y, s0, a[block][1][0], a[block][1][2]);
      mx::e4m3x4_scaled_to_bf16x2x2(r8.y, s8, a[block][1][1], a[block][1][3]);
    }
    hopper::mbarrier_wait(full + 8 * s, phase);  // the stage's activations
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
  if constexpr (Tile::kKParts) {
    if (parts > 1) {
#pragma unroll
      for (int r = 0; r < Tile::kAccRegs; ++r) {
        if constexpr (Tile::kPartSumsInMemory) {
          acc[r] = __ldcg(part_sum + r * Tile::kConsumerThreads) + acc[r];
        } else {
          acc[r] = total[r] + acc[r];
        }
      }
    }
  }
}

}  // namespace prefill_detail

}  // namespace mxlinear::device
