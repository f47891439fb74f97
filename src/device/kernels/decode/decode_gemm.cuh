// The Hopper decode GEMM (M <= 128): streams the weights at the memory bound.
//
// Design (docs/PERFORMANCE.md, "The kernels and why they are built so"):
// - Swap A and B: 64 weight rows fill wgmma's M side, the tokens (M padded to kTokens) its N
//   side. Each MX block is two m64nTk16 f16 wgmma on exactly widened e4m3 values (weights from
//   registers, activations widened into shared memory each stage); the block's fresh fp32
//   partial sum is promoted into the accumulator as acc += (partial * sa) * sw, as in the
//   generic kernel. FP8 wgmma is not used: its in-instruction accumulation is narrower than
//   fp32 (measured on the H200: 7e-4 relative error on random MX blocks; the contract is 1e-5).
// - K is permuted inside every k16 step, identically for both operands, so each thread's weight
//   fragment is one 4-byte shared-memory load per row (see widen_activations).
// - A producer warp streams 128-K stages through a ring of mbarriers: weight and activation
//   tiles by TMA (128-byte swizzle, what wgmma's descriptors read), the stage's scale bytes by
//   4-byte cp.async. Weights are static, so the first stages are requested before waiting on the
//   previous kernel (programmatic dependent launch).
// - Split-K across a thread-block cluster (grid.y = cluster size = splits) so that every SM
//   streams even when N / 64 < 132. The splits' partial tiles meet through distributed shared
//   memory and are added in split order: the same order every run (deterministic, no atomics).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "device/common/epilogue.cuh"
#include "device/common/gemm_params.hpp"
#include "device/common/grid_walk.hpp"
#include "device/common/mx_convert.cuh"
#include "device/common/ring_smem.cuh"
#include "device/common/split_k.cuh"
#include "device/common/swizzle.cuh"
#include "device/common/timeline.cuh"
#include "device/ptx/hopper_ptx.cuh"
#include "device/ptx/ptx.cuh"
#include "device/ptx/wgmma_f16.cuh"
#include "mxlinear/format.hpp"

namespace mxlinear::device {

// kConsumerGroups = 2: two consumer warpgroups take alternate stages (each with its own f16
// buffer and partial tile, added in a fixed order at the end), so an SM has twice the
// independent per-stage chains where few CTAs fit (M = 1: the grid itself is ~2-3 CTAs per SM).
// kQuantizes: the ring carries the bf16/fp16 activation (p.x) and the consumers quantize each
// stage's blocks exactly as the quantize kernel would (RCEIL) before widening them, so a linear
// at a few tokens needs no quantize kernel ahead of this one.
// A tile's shape, the template argument of DecodeTile: DecodeTile<DecodeShape{.tokens = 8, ...}>.
struct DecodeShape {
  int tokens;               // wgmma N: activation rows per CTA
  int stages;               // ring depth
  int consumer_groups = 1;  // consumer warpgroups, taking alternate stages
  bool quantizes = false;   // quantizes a 16-bit activation itself (GemmParams::x)
};

template <DecodeShape kShape>
struct DecodeTile {
  static constexpr int kTokens = kShape.tokens;  // wgmma N: activation rows per CTA
  static constexpr int kStages = kShape.stages;
  static constexpr int kConsumerGroups = kShape.consumer_groups;
  static constexpr bool kQuantizes = kShape.quantizes;
  static constexpr int kRows = 64;  // weight rows per CTA (wgmma M)
  static constexpr int kBK = 128;   // K bytes per stage: one 128-byte swizzle row, 4 MX blocks
  static constexpr int kBlocksPerStage = kBK / kBlockSize;
  static constexpr int kConsumerThreads = 128 * kConsumerGroups;
  static constexpr int kThreads = kConsumerThreads + 32;  // + the producer warp
  static constexpr int kWTileBytes = kRows * kBK;
  // A 16-bit activation stage is two 64-element boxes ("atoms") of kTokens 128-byte rows.
  static constexpr int kAAtomBytes = kTokens * 128;
  static constexpr int kATileBytes = kTokens * kBK * (kQuantizes ? 2 : 1);
  // Shared memory, from a 1024-byte aligned base (the swizzle atom): the ring of e4m3 tiles,
  // the f16 activations of the stage being computed (K-major, two 128-byte swizzle atoms along
  // K; after the main loop the same bytes hold the split's fp32 tile for the cluster
  // reduction), the barriers, then every scale byte of the CTA's K range (scales_bytes()).
  static constexpr int kWTileOffset = 0;
  static constexpr int kATileOffset = kWTileOffset + kStages * kWTileBytes;
  static constexpr int kWideOffset = kATileOffset + kStages * kATileBytes;
  static constexpr int kWideBytes = kTokens * kBK * 2;
  static constexpr int kReduceOffset = kWideOffset;
  static constexpr int kBarrierOffset = kWideOffset + kConsumerGroups * kWideBytes;
  static constexpr int kScaleOffset = kBarrierOffset + 2 * kStages * 8;
  static constexpr int kFixedSmemBytes = kScaleOffset + 1024;  // + alignment slack
  // Per 128-K chunk: 4 scales per weight row and per token, decoded to fp32 once.
  static constexpr int kScaleBytesPerChunk = (kRows + kTokens) * kBlocksPerStage * 4;
  static constexpr std::uint32_t kTxBytes = kWTileBytes + kATileBytes;  // TMA bytes per stage
  static constexpr int kPartialRegs = kTokens / 2;
  // One partial sum per MX block of a stage lets the four blocks' wgmma run back to back with a
  // single wait; at 128 tokens only one set fits in the register file.
  static constexpr int kPartialSets = kTokens <= 32 ? 4 : 1;
  // The split's fp32 tile for the cluster reduction (unpadded: it fills the f16 buffer exactly).
  using ReduceTile = FpTile<kRows, kTokens>;

  static constexpr int smem_bytes(int chunks_per_cta) {
    return kFixedSmemBytes + chunks_per_cta * kScaleBytesPerChunk;
  }

  static_assert(kTokens % 8 == 0 && kTokens >= 8 && kTokens <= 128, "wgmma N is 8..256 step 8");
  static_assert(kATileBytes % 1024 == 0 && kWTileBytes % 1024 == 0,
                "tiles start on 1024-byte boundaries (swizzle atoms)");
  static_assert(kStages >= 2, "a ring needs two stages");
  static_assert(ReduceTile::kBytes <= kWideBytes, "the reduction tile reuses the f16 buffer");
  static_assert(kFixedSmemBytes <= 200 * 1024, "leave room for the scales");
  static_assert(kConsumerGroups == 1 || kConsumerGroups == 2, "one or two consumer warpgroups");
};

namespace decode_detail {

using mx::scale_from_byte;

// One stage's activation tile by TMA: e4m3 [kTokens][128], or with kQuantizes its 16-bit
// elements as two 64-element boxes.
template <class Tile>
__device__ __forceinline__ void load_activation_stage(const CUtensorMap* a_map, std::uint32_t smem,
                                                      std::uint32_t full, int s, int chunk,
                                                      int t0) {
  const std::uint32_t dst = smem + Tile::kATileOffset + s * Tile::kATileBytes;
  const int k0 = chunk * Tile::kBK;
  hopper::tma_load_2d(dst, a_map, k0, t0, full + 8 * s);
  if constexpr (Tile::kQuantizes) {
    hopper::tma_load_2d(dst + Tile::kAAtomBytes, a_map, k0 + 64, t0, full + 8 * s);
  }
}

// The producer thread: fills the ring for this CTA's chunk range [c_begin, c_begin + chunks)
// from the first stage past the ring's size; the first stages were requested in the prologue
// (produce_first_weights, produce_first_activations).
template <class Tile>
__device__ __forceinline__ void produce(const CUtensorMap* w_map, const CUtensorMap* a_map,
                                        std::uint32_t smem, std::uint32_t full, std::uint32_t empty,
                                        int c_begin, int chunks, int n0, int t0) {
  auto weights = [&](int it) {
    const int s = it % Tile::kStages;
    hopper::mbarrier_arrive_expect_tx(full + 8 * s, Tile::kTxBytes);
    hopper::tma_load_2d(smem + Tile::kWTileOffset + s * Tile::kWTileBytes, w_map,
                        (c_begin + it) * Tile::kBK, n0, full + 8 * s);
  };
  auto activations = [&](int it) {
    load_activation_stage<Tile>(a_map, smem, full, it % Tile::kStages, c_begin + it, t0);
  };
  const int prologue = chunks < Tile::kStages ? chunks : Tile::kStages;
  for (int it = prologue; it < chunks; ++it) {
    hopper::mbarrier_wait(empty + 8 * (it % Tile::kStages), (it / Tile::kStages - 1) & 1);
    weights(it);
    activations(it);
  }
}

// The weight tiles of the first stages: weights are never written by an earlier kernel, so
// they are requested before waiting on it.
template <class Tile>
__device__ __forceinline__ void produce_first_weights(const CUtensorMap* w_map, std::uint32_t smem,
                                                      std::uint32_t full, int c_begin, int chunks,
                                                      int n0) {
  const int prologue = chunks < Tile::kStages ? chunks : Tile::kStages;
  for (int it = 0; it < prologue; ++it) {
    hopper::mbarrier_arrive_expect_tx(full + 8 * it, Tile::kTxBytes);
    hopper::tma_load_2d(smem + Tile::kWTileOffset + it * Tile::kWTileBytes, w_map,
                        (c_begin + it) * Tile::kBK, n0, full + 8 * it);
  }
}

// The activation tiles of the first stages, requested as soon as the previous kernel (which
// may write the activation) has finished: before the activation scales are loaded, so the two
// memory round trips overlap instead of adding up ahead of the first wgmma.
template <class Tile>
__device__ __forceinline__ void produce_first_activations(const CUtensorMap* a_map,
                                                          std::uint32_t smem, std::uint32_t full,
                                                          int c_begin, int chunks, int t0) {
  const int prologue = chunks < Tile::kStages ? chunks : Tile::kStages;
  for (int it = 0; it < prologue; ++it) {
    load_activation_stage<Tile>(a_map, smem, full, it, c_begin + it, t0);
  }
}

// Decodes the scales of chunks [c_begin, c_begin + chunks) of `rows` rows from row `r0` of a
// [*, K/32] scale matrix into shared memory as fp32 [chunk][block][row]; rows past `limit` get
// 2^-127 (a finite scale for the zero rows TMA fills in).
// One 4-byte word (a chunk's 4 blocks) per load, 4 loads in flight per thread: a plain loop
// would pay a memory round trip per word before the first wgmma. Where K % 128 != 0 or the rows
// are not 4-byte aligned, the words are assembled byte by byte (0 past K: the same layout).
__device__ __forceinline__ void load_scales(const std::uint8_t* scales, std::int64_t ld, int r0,
                                            int rows, int limit, int c_begin, int chunks, int k,
                                            float* dst, int tid, int threads) {
  const bool words = k % 128 == 0 && reinterpret_cast<std::uintptr_t>(scales) % 4 == 0 &&
                     (limit <= 1 || ld % 4 == 0);
  const int blocks = k / kBlockSize;
  copy_in_batches<4>(
      rows, chunks, tid, threads,
      [&](int row, int c) {
        return words ? mx::scale_word(scales, ld, r0 + row, limit, c_begin + c)
                     : mx::scale_word_bytewise(scales, ld, r0 + row, limit, c_begin + c, blocks);
      },
      [&](int row, int c, std::uint32_t word) {
#pragma unroll
        for (int block = 0; block < 4; ++block) {
          dst[(4 * c + block) * rows + row] = scale_from_byte((word >> (8 * block)) & 0xFFu);
        }
      });
}

// Promotes one block's partial sums: acc += (partial * sa[token]) * sw[row]. w_scales and
// a_scales point at the block's fp32 scales ([row] and [token]).
template <class Tile>
__device__ __forceinline__ void promote(float (&acc)[Tile::kPartialRegs],
                                        const float (&partial)[Tile::kPartialRegs],
                                        const float* w_scales, const float* a_scales, int row0,
                                        int t) {
  const float sw0 = w_scales[row0];
  const float sw1 = w_scales[row0 + 8];
#pragma unroll
  for (int j = 0; j < Tile::kTokens / 8; ++j) {
    const float2 sa = *reinterpret_cast<const float2*>(a_scales + 8 * j + 2 * t);
    // Accumulator layout: reg 4j + {0,1} row r, tokens 8j + 2t + {0,1}; 4j + {2,3} row r + 8.
    acc[4 * j + 0] = fmaf(partial[4 * j + 0] * sa.x, sw0, acc[4 * j + 0]);
    acc[4 * j + 1] = fmaf(partial[4 * j + 1] * sa.y, sw0, acc[4 * j + 1]);
    acc[4 * j + 2] = fmaf(partial[4 * j + 2] * sa.x, sw1, acc[4 * j + 2]);
    acc[4 * j + 3] = fmaf(partial[4 * j + 3] * sa.y, sw1, acc[4 * j + 3]);
  }
}

// Byte offset of byte `byte` (0..255) of f16 row `token` in the widened activation tile: two
// 128-byte swizzle atoms along K, each kTokens rows of 128 bytes.
template <class Tile>
__device__ __forceinline__ int wide_offset(int token, int byte) {
  const int col = byte & 127;
  return (byte >> 7) * Tile::kTokens * 128 + token * 128 + (((col >> 4) ^ (token & 7)) << 4) +
         (col & 15);
}

// Four e4m3 activations (bytes 4 * word .. 4 * word + 3 of a token's 128-K stage) widened to f16
// where the wgmma B descriptor reads them: word = 8 * block + 2t + step holds the f16 bytes of
// logical k = 2t, 2t + 1 (low pair) and 8 + 2t, 9 + 2t (high pair) of k16 step
// 2 * block + step (see widen_activations).
template <class Tile>
__device__ __forceinline__ void store_widened(std::uint8_t* wide, int token, int word,
                                              std::uint32_t e4m3x4) {
  std::uint32_t lo, hi;
  ptx::e4m3x4_to_f16x2x2(e4m3x4, lo, hi);
  const int byte = 32 * (2 * (word >> 3) + (word & 1)) + 4 * ((word >> 1) & 3);
  *reinterpret_cast<std::uint32_t*>(wide + wide_offset<Tile>(token, byte)) = lo;
  *reinterpret_cast<std::uint32_t*>(wide + wide_offset<Tile>(token, byte + 16)) = hi;
}

// Widens the stage's e4m3 activations to f16, permuting K inside every MX block (two k16
// steps): physical bytes 8t..8t+7 of a block go to the two steps' logical k = 2t, 2t+1 (low
// pairs) and 8+2t, 9+2t (high pairs), which is where the f16 wgmma A fragment of a thread with
// lane % 4 = t expects them. So each thread reads its weights as one 8-byte load per row and
// block (load_weight_fragments), every product pairs the same k of both operands, and each
// block stays within its own two steps; only the order of the in-block sum changes.
// `tid`: the thread within the consuming warpgroup.
template <class Tile>
__device__ __forceinline__ void widen_activations(const std::uint8_t* tile8, std::uint8_t* wide,
                                                  int tid) {
  for (int w = tid; w < Tile::kTokens * 32; w += 128) {
    const int token = w >> 5, word = w & 31;
    const std::uint32_t x =
        *reinterpret_cast<const std::uint32_t*>(tile8 + swizzle128_offset(token, 4 * word));
    store_widened<Tile>(wide, token, word, x);
  }
}

// Quantizes the stage's 16-bit activations (kQuantizes) as the quantize kernel does, then
// widens them like widen_activations. Four threads per MX block, 8 elements each (k = 8g..8g+7
// of the stage for group g), so the block's amax is two shuffles away; the block's first thread
// writes its fp32 scale where the promotion reads it ([block][token] of the stage).
template <class Tile>
__device__ __forceinline__ void quantize_activations(const std::uint8_t* tile16, std::uint8_t* wide,
                                                     float* a_scales, bool is_f16, int tid) {
  static_assert(Tile::kTokens * 16 % 128 == 0, "every thread of the warpgroup takes part");
  for (int e = tid; e < Tile::kTokens * 16; e += 128) {
    const int token = e >> 4, group = e & 15;
    const int k = 8 * group;
    const uint4 raw = *reinterpret_cast<const uint4*>(tile16 + (k >> 6) * Tile::kAAtomBytes +
                                                      swizzle128_offset(token, 2 * (k & 63)));
    float v[8];
    mx::widen_eight(raw, is_f16, v);
    const mx::BlockExtent block = mx::block_extent_of_four_lanes(v);
    std::uint32_t words[2];
    const std::uint8_t scale =
        mx::quantize_values(v, block.amax, block.non_finite, ScaleRule::kRceil, words);
    store_widened<Tile>(wide, token, 2 * group, words[0]);
    store_widened<Tile>(wide, token, 2 * group + 1, words[1]);
    if ((group & 3) == 0)
      a_scales[(group >> 2) * Tile::kTokens + token] = mx::scale_from_byte(scale);
  }
}

// This thread's f16 A fragments of the stage, [block][k16 step][reg], rows r and r + 8, from
// bytes 8t..8t+7 of every block (see widen_activations); offsets[block] = swizzle128_offset(r, 32b
// + 8t).
__device__ __forceinline__ void load_weight_fragments(const std::uint8_t* tile8,
                                                      const int (&offsets)[4],
                                                      std::uint32_t (&a)[4][2][4]) {
#pragma unroll
  for (int block = 0; block < 4; ++block) {
    const uint2 r0 = *reinterpret_cast<const uint2*>(tile8 + offsets[block]);
    const uint2 r8 = *reinterpret_cast<const uint2*>(tile8 + offsets[block] + 8 * 128);
    ptx::e4m3x4_to_f16x2x2(r0.x, a[block][0][0], a[block][0][2]);
    ptx::e4m3x4_to_f16x2x2(r8.x, a[block][0][1], a[block][0][3]);
    ptx::e4m3x4_to_f16x2x2(r0.y, a[block][1][0], a[block][1][2]);
    ptx::e4m3x4_to_f16x2x2(r8.y, a[block][1][1], a[block][1][3]);
  }
}

// The consumer warpgroup. Per stage: widen the activations, take the weight fragments into
// registers and release the stage; then per MX block two k16 wgmma into a fresh partial sum
// and its promotion (with four partial sets, all blocks' wgmma run before one wait).
// Leaves the CTA's fp32 tile in `acc`.
// kGroup: which consumer warpgroup (a constant, so its named barrier id is one: ptxas reserves
// all 16 barriers for a run-time id).
template <class Tile, int kGroup>
__device__ __forceinline__ void consume(float (&acc)[Tile::kPartialRegs], std::uint32_t smem,
                                        std::uint8_t* smem_ptr, std::uint32_t full,
                                        std::uint32_t empty, int chunks, bool x_is_f16) {
  constexpr int group = kGroup;
  const float* const w_scales_all = reinterpret_cast<const float*>(smem_ptr + Tile::kScaleOffset);
  // Written per stage by quantize_activations when the kernel quantizes; else preloaded.
  float* const a_scales_all =
      reinterpret_cast<float*>(smem_ptr + Tile::kScaleOffset) + chunks * 4 * Tile::kRows;
  using Mma = hopper::WgmmaF16RS<Tile::kTokens>;
  const int tid = static_cast<int>(threadIdx.x) % 128;  // within the warpgroup
  const int warp = tid >> 5, lane = tid & 31, t = lane & 3;
  const int row0 = 16 * warp + (lane >> 2);
  constexpr int barrier = 1 + group;  // this warpgroup's own named barrier
  int fragment_offsets[4];
#pragma unroll
  for (int block = 0; block < 4; ++block) {
    fragment_offsets[block] = swizzle128_offset(row0, 32 * block + 8 * t);
  }
  std::uint8_t* const wide = smem_ptr + Tile::kWideOffset + group * Tile::kWideBytes;
  const std::uint64_t wide_descriptor =
      hopper::kmajor_sw128_descriptor(smem + Tile::kWideOffset + group * Tile::kWideBytes);
  float partial[Tile::kPartialSets][Tile::kPartialRegs];
  for (int it = group; it < chunks; it += Tile::kConsumerGroups) {
    const int s = it % Tile::kStages;
    hopper::mbarrier_wait(full + 8 * s, (it / Tile::kStages) & 1);
    const std::uint8_t* w_tile = smem_ptr + Tile::kWTileOffset + s * Tile::kWTileBytes;
    const std::uint8_t* a_tile = smem_ptr + Tile::kATileOffset + s * Tile::kATileBytes;
    const float* w_scales = w_scales_all + it * 4 * Tile::kRows;
    float* a_scales = a_scales_all + it * 4 * Tile::kTokens;
    // Every warp's wgmma of the previous stage has read the f16 buffer (each waited on its last
    // group before arriving here).
    hopper::named_barrier_sync(barrier, 128);
    if constexpr (Tile::kQuantizes) {
      quantize_activations<Tile>(a_tile, wide, a_scales, x_is_f16, tid);
    } else {
      widen_activations<Tile>(a_tile, wide, tid);
    }
    std::uint32_t a[4][2][4];
    load_weight_fragments(w_tile, fragment_offsets, a);
    // One proxy fence serves both directions: the stage's plain reads above are ordered before
    // the producer's next TMA write into it (without it the H200 overwrote stages still being
    // read whenever several CTAs shared an SM), and the f16 writes become visible to wgmma.
    hopper::fence_proxy_async_shared();
    // The stage is in registers and the f16 buffer now: hand it back to the producer.
    __syncwarp();
    if (lane == 0) hopper::mbarrier_arrive(empty + 8 * s);
    hopper::named_barrier_sync(barrier, 128);

    auto issue = [&](float(&d)[Tile::kPartialRegs], int block) {
      hopper::pin(d);
      hopper::wgmma_fence();
#pragma unroll
      for (int step = 0; step < 2; ++step) {
        const int k16 = 2 * block + step;  // logical k16 step of the stage: 32 bytes each in f16
        const int offset = (k16 >> 2) * Tile::kTokens * 128 + (k16 & 3) * 32;
        Mma::run(d, a[block][step], wide_descriptor + (offset >> 4), step == 1);
      }
      hopper::wgmma_commit();  // d may be touched again only after a wait covers this group
    };
    if constexpr (Tile::kPartialSets == 4) {
#pragma unroll
      for (int block = 0; block < 4; ++block) issue(partial[block % Tile::kPartialSets], block);
      hopper::wgmma_wait<0>();
#pragma unroll
      for (int block = 0; block < 4; ++block) {
        hopper::pin(partial[block % Tile::kPartialSets]);
        promote<Tile>(acc, partial[block % Tile::kPartialSets], w_scales + block * Tile::kRows,
                      a_scales + block * Tile::kTokens, row0, t);
      }
    } else {
#pragma unroll
      for (int block = 0; block < 4; ++block) {
        issue(partial[0], block);
        hopper::wgmma_wait<0>();
        hopper::pin(partial[0]);
        promote<Tile>(acc, partial[0], w_scales + block * Tile::kRows,
                      a_scales + block * Tile::kTokens, row0, t);
      }
    }
  }
}

}  // namespace decode_detail

// Grid: x = 64-row weight tiles, y = K splits (= the cluster size), z = token tiles.
template <class Tile>
__global__ void __launch_bounds__(Tile::kThreads, 1)
    decode_gemm_kernel(const __grid_constant__ CUtensorMap w_map,
                       const __grid_constant__ CUtensorMap a_map, const GemmParams p) {
  const auto [smem, smem_ptr, full, empty] = ring_smem<Tile>();  // address arithmetic only
  using namespace decode_detail;
  timeline::Stamps stamps;
  stamps.mark(timeline::kEntry);

  const auto [n0, t0, split, splits, c_begin, chunks] = split_tile<Tile::kRows, Tile::kTokens>(p.k);
  const int tid = static_cast<int>(threadIdx.x);

  // Full: the producer's expect_tx arrival; empty: one arrival per warp of the warpgroup that
  // consumed the stage.
  if (tid == 0) hopper::init_ring(full, empty, Tile::kStages, 1, 4);
  __syncthreads();
  if (tid == Tile::kConsumerThreads) {
    hopper::prefetch_tensor_map(&w_map);
    hopper::prefetch_tensor_map(&a_map);
    produce_first_weights<Tile>(&w_map, smem, full, c_begin, chunks, n0);
  }
  // Every scale byte of the CTA's K range, by plain loads while the first tiles are in flight:
  // the weights' before the wait on the previous kernel, the activation's after it.
  auto* scales = reinterpret_cast<float*>(smem_ptr + Tile::kScaleOffset);
  load_scales(p.w_scales, p.ld_w_scales, n0, Tile::kRows, p.n, c_begin, chunks, p.k, scales, tid,
              Tile::kThreads);
  hopper::wait_prerequisite_grids();
  stamps.mark(timeline::kWaited);
  if (tid == Tile::kConsumerThreads) {
    produce_first_activations<Tile>(&a_map, smem, full, c_begin, chunks, t0);
  }
  if constexpr (!Tile::kQuantizes) {
    load_scales(p.a_scales, p.ld_a_scales, t0, Tile::kTokens, p.m, c_begin, chunks, p.k,
                scales + chunks * 4 * Tile::kRows, tid, Tile::kThreads);
  }
  __syncthreads();
  hopper::allow_dependent_launch();
  stamps.mark(timeline::kPrologue);

  float acc[Tile::kPartialRegs];
#pragma unroll
  for (int i = 0; i < Tile::kPartialRegs; ++i) acc[i] = 0.0f;
  // The role as a warp-uniform value ptxas can see (as CUTLASS does), so wgmma is not treated
  // as divergent code.
  const int warpgroup = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x) / 128, 0);
  if (warpgroup == Tile::kConsumerGroups) {
    if (tid == Tile::kConsumerThreads) {
      produce<Tile>(&w_map, &a_map, smem, full, empty, c_begin, chunks, n0, t0);
    }
  } else {
    // Each warpgroup's f16 buffer is free once all its warps are past their last wgmma wait.
    if (Tile::kConsumerGroups == 1 || warpgroup == 0) {
      consume<Tile, 0>(acc, smem, smem_ptr, full, empty, chunks, p.x_is_f16);
      stamps.mark(timeline::kMainLoop);
      hopper::named_barrier_sync(1, 128);
    } else {
      consume<Tile, Tile::kConsumerGroups - 1>(acc, smem, smem_ptr, full, empty, chunks,
                                               p.x_is_f16);
      hopper::named_barrier_sync(Tile::kConsumerGroups, 128);
    }
    if constexpr (Tile::kConsumerGroups == 2) {
      // The second warpgroup's partial tile meets the first's: always first + second, so
      // every run adds in the same order.
      auto* second = reinterpret_cast<float*>(smem_ptr + Tile::kWideOffset + Tile::kWideBytes);
      if (warpgroup == 1) write_accumulator_tile<typename Tile::ReduceTile>(second, acc, 0);
      hopper::named_barrier_sync(3, Tile::kConsumerThreads);
      if (warpgroup == 0) add_accumulator_tile<typename Tile::ReduceTile>(second, acc, 0);
    }
    // This split's tile, token-major, for the cluster reduction; it reuses the first f16
    // buffer.
    if (warpgroup == 0) {
      write_accumulator_tile<typename Tile::ReduceTile>(
          reinterpret_cast<float*>(smem_ptr + Tile::kReduceOffset), acc, 0);
    }
  }
  __syncwarp();  // the producer warp's lanes meet again before the aligned cluster barrier
  hopper::cluster_sync();
  stamps.mark(timeline::kReduced);
  reduce_splits_and_store<typename Tile::ReduceTile>(p, smem + Tile::kReduceOffset, n0, t0, split,
                                                     splits, Tile::kThreads);
  stamps.mark(timeline::kStored);
  // No CTA may leave while a peer still reads its tile.
  hopper::cluster_sync();
  stamps.flush();
}

}  // namespace mxlinear::device
