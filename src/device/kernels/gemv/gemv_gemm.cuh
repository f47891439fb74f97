// The MX GEMV for the fewest tokens (M <= 16): each warp feeds 16 weight rows into mma.sync
// fragments, with no CTA barrier, mbarrier or proxy fence in its loop. At these sizes a layer is
// its weight bytes; what bounds a kernel is the chain of work per byte (a CUDA-core GEMV issued
// ~6 instructions per weight byte; the wgmma decode kernel waits out barriers and fences per
// 8 KiB stage). Here a warp spends ~35 instructions per 16 rows x one MX block (SASS).
//
// Design:
// - A row tile is 16 weight rows (one or three per CTA); its kWarps warps split K into contiguous
//   ranges and meet in shared memory at the end, added in warp order (deterministic, no atomics).
// - The block math (gemv_weights.cuh, accumulate_block): exact e4m3 -> f16 widening, two
//   m16n8k16 mma per MX block with fp32 accumulation, promotion acc += (partial * sa) * sw, the
//   generic kernel's arithmetic.
// - The weights arrive through one of two streamers (gemv_weights.cuh): registers (kStages = 0;
//   rounds of 4 blocks took 10.5 us for 2560 x 6144 at M = 1, too few bytes in flight per warp)
//   or a per-warp cp.async ring in shared memory (kStages > 0) that keeps kStages - 1 stages of
//   4 blocks in flight. Either way the first loads are issued before waiting on the previous
//   kernel (weights are static).
// - The CTA's tokens are staged in shared memory once (gemv_activation.cuh).
// - Several 16-row tiles per CTA (kRowTiles > 1), each with its own kWarps: the CTA's tokens are
//   staged once for all of them. At M = 1 the activation copy after the wait took 1.3 us on
//   shared down (384 CTAs each reading the same ~800 bytes from one spot of L2); 128
//   CTAs of three tiles read a third of those bytes.
// - K split over the kSplits CTAs of a cluster (kSplits > 1): a layer with fewer 16-row tiles
//   than SMs (N = 1536: 96 CTAs) gives every SM work. Each CTA adds its warps' tiles into one
//   tile; the other splits write theirs into split 0's shared memory, which adds them in split
//   order and stores the output: deterministic, no atomics, no workspace, one cluster barrier
//   phase on split 0's path (a phase at entry, waited for only at the meeting, makes sure every
//   CTA of the cluster runs before its shared memory is written). Each split stages only its own
//   K range of the activation.
// - W8A16 (GemmParams::x_as_is; a tile of operand kBf16 or kF16): the CTA's tokens are the
//   caller's bf16 or fp16 x, staged as they are (2 bytes per element, no scales); a lane's
//   activation fragments are read as they are at the k its weight fragments hold, the weights
//   are widened exactly to x's type (e4m3 -> f16, and on to bf16 through fp32 for bf16 x), the
//   same two mma (f16 or bf16) give each block's fp32 partial, and it is promoted with the
//   weight scale alone: acc += partial * sw. W8A8 instances compile to the same code as before.
// - K parts (k_parts, the batch-invariant mode): the prefill kernel's order, bit for bit. K's
//   128-K chunks fall into batch_invariant_parts(K) parts; a warp takes whole parts, and chains
//   each from zero through bf16 mma on scale-folded weights and the bf16 activation (W8A8: its
//   MX values dequantized to bf16 as the prefill's pre-pass does; W8A16: bf16 x as it is), two
//   k16 steps per block in the prefill's permuted K order (the same lane fragments); the parts'
//   sums are added in part order. mma.sync m16n8k16 and wgmma m64nNk16 give the same fp32 bits
//   for the same products, slots and accumulator (checked on the H200 over random operands with
//   exponents spread over 2^-20 .. 2^20, whichever operand holds the weights). A part is a
//   serial chain, so k-parts tiles (GemvShape::rows = 8) put 8 weight rows in the mma's B
//   operand and the tokens in A: N / 8 x P chains, up to 16 tokens an mma. With one warp per
//   8-row tile (kWarps = 1, four row tiles a CTA) that warp chains every part in turn.
//   They chain in the scaled domain (gemv_activation.cuh) where the CTA's weight and
//   activation scales lie in its window: f16 mma on the unscaled e4m3 operands (in W8A16, each
//   block of x divided by a power of two into f16), the accumulator moved by a power of two
//   where a block's scales change, the same bits; ~28 instructions a block and warp instead of
//   ~48. Only warps with a part get a ring.
#pragma once

#include <cstdint>
#include <type_traits>

#include "device/common/epilogue.cuh"
#include "device/common/gemm_params.hpp"
#include "device/common/timeline.cuh"
#include "device/kernels/gemv/gemv_activation.cuh"
#include "device/kernels/gemv/gemv_weights.cuh"
#include "device/ptx/hopper_ptx.cuh"
#include "device/ptx/ptx.cuh"
#include "mxlinear/format.hpp"

namespace mxlinear::device {

// A tile's shape, the template argument of GemvTile: GemvTile<GemvShape{.kwarps = 4, ...}>.
struct GemvShape {
  int token_tiles = 1;   // n8 mma tiles of tokens per CTA
  int kwarps;            // K ranges per row tile, one warp each
  int stages = 0;        // ring slots per warp; 0: weights through registers
  int splits = 1;        // K ranges per cluster (grid.y)
  int row_tiles = 1;     // row tiles per CTA (of `rows` rows)
  bool k_parts = false;  // the batch-invariant mode's K parts and order (a ring, no split)
  int rows = 16;         // weight rows per row tile: 16 (mma A), or 8 (k parts, mma B)
};

// kOperandParam: the activation operand (ActivationOperand), e4m3 with scales by default.
template <GemvShape kShapeParam, ActivationOperand kOperandParam = ActivationOperand::kMx>
struct GemvTile {
  static constexpr GemvShape kShape = kShapeParam;
  static constexpr ActivationOperand kOperand = kOperandParam;
  static constexpr bool kXAsIs = kOperand != ActivationOperand::kMx;  // W8A16
  static constexpr bool kKParts = kShape.k_parts;
  // Tokens staged as 16-bit rows: x as it is, or (k parts) the MX activation dequantized to bf16.
  static constexpr bool kRows16 = kXAsIs || kKParts;
  using Reader = std::conditional_t<
      kKParts, gemv_detail::X16Reader<ActivationOperand::kBf16>,
      std::conditional_t<kXAsIs, gemv_detail::X16Reader<kOperand>, gemv_detail::ActivationReader>>;
  static constexpr int kTokenTiles = kShape.token_tiles;  // n8 mma tiles of tokens per CTA
  static constexpr int kTokens = 8 * kTokenTiles;         // activation rows per CTA
  static constexpr int kWarps = kShape.kwarps;            // K ranges per row tile
  static constexpr int kStages = kShape.stages;           // ring slots per warp; 0: registers
  static constexpr int kSplits = kShape.splits;           // K ranges per cluster (grid.y)
  static constexpr int kRowTiles = kShape.row_tiles;      // row tiles per CTA
  static constexpr int kCtaWarps = kWarps * kRowTiles;
  static constexpr int kThreads = 32 * kCtaWarps;
  static constexpr int kRows = kShape.rows;  // weight rows per row tile (mma M, or N: 8)
  static constexpr int kCtaRows = kRows * kRowTiles;
  // The register streamer's round: 8 blocks, 4 KiB per warp, two rounds in flight.
  static constexpr int kRoundBlocks = 8;
  using Ring = gemv_detail::WeightRing<kStages == 0 ? 2 : kStages, kRows>;
  // Warps with a ring: every warp, or in k-parts tiles only those with a part (P(K) < kWarps
  // leaves warps idle; with one warp per row tile, every warp has one).
  static constexpr int ring_warps(int k) {
    const int parts = batch_invariant_parts(k);
    return kKParts ? kRowTiles * (parts < kWarps ? parts : kWarps) : kCtaWarps;
  }
  static constexpr int ring_bytes(int k) {
    return kStages == 0 ? 0 : ring_warps(k) * Ring::kWarpBytes;
  }
  // Activation rows are padded by 32 bytes so the 8 token rows of a fragment read fall into
  // different bank groups (K % 128 == 0 would put them all in the same banks).
  static constexpr int kRowPad = 32;
  // Bytes from one staged activation row to the next: K e4m3 bytes and the pad, or (W8A16) 2K
  // bytes of 16-bit x padded to 32 bytes past a multiple of 128. An 8-byte fragment read is
  // served a half-warp at a time, lanes (g .. g + 3, 0..3): 32 contiguous bytes of each of four
  // rows, which then fall into different banks.
  static constexpr int row_stride(int k) {
    if constexpr (kRows16) {
      return 2 * k + (k % 64 == 0 ? 32 : 96);
    } else {
      return k + kRowPad;
    }
  }
  // 16 warps per SM (at most 128 registers; 24 spill with register rounds): 4 warps per CTA then
  // run the 384 CTAs of an N = 6144 layer in one wave, 8 warps per CTA the 160 of N = 2560. Two
  // token tiles need more registers than that (8 per SM).
  // 4-warp rings are small enough in shared memory for 7 CTAs per SM, the next layer's among
  // them, if they keep to 72 registers (at 74 they fit 6).
  // Several row tiles: two CTAs per SM, so the next layer's CTA is resident beside this one.
  // The 8-row k-parts tiles' rings fit six CTAs an SM at K = 6144 (6 slots), which registers
  // must not prevent (at most 80): four warps of one row tile, or four one-warp row tiles.
  static constexpr int kMinCtasPerSm = kKParts && kCtaWarps == 4 ? 6
                                       : kRowTiles > 1           ? 2
                                       : kStages > 0 && kStages <= 4 && kWarps == 4
                                           ? 7
                                           : 16 / kWarps / kTokenTiles;

  // Partial tiles per row tile: one per warp, or (k parts) one per part.
  static constexpr int kPartialSlots = kKParts ? kMaxKParts : kWarps;
  // k-parts tiles chain in the scaled domain where the scales allow (gemv_activation.cuh).
  static constexpr bool kScaledDomain = kKParts;
  // Tiles of one K warp per row tile also quantize a 16-bit x into it in each CTA (W8A8); the
  // others stage it in the scaled form (each CTA quantizing was level on them at 2.4 CTAs an SM
  // and slower from 6, where the quantize kernel goes first, and the path compiled into them cost
  // that kernel 2% at M = 1 on 10240 x 5120).
  static constexpr bool kQuantizesUnscaled = kKParts && !kXAsIs && kWarps == 1;
  // Bytes from one token's exponent bytes (scaled domain) to the next: a word per 128-K chunk.
  static constexpr int exp_stride(int k) { return (k / kBlockSize + 3) / 4 * 4; }
  // Shared memory at K for `tokens` = min(M, kTokens) staged rows: the weight ring, e4m3 rows
  // and their scales decoded to fp32 (or 16-bit rows and no scales: W8A16, k parts; and for the
  // scaled domain a byte per token and block), the partial tiles for the reduction and, split,
  // the other splits' sums of theirs, written by them (used in split 0).
  static constexpr int activation_offset(int k) { return ring_bytes(k); }
  static constexpr int scale_offset(int k, int tokens) {
    return ring_bytes(k) + tokens * row_stride(k);
  }
  static constexpr int exp_offset(int k, int tokens) { return scale_offset(k, tokens); }
  static constexpr int reduce_offset(int k, int tokens) {
    if constexpr (kScaledDomain) {
      return exp_offset(k, tokens) + (tokens * exp_stride(k) + 15) / 16 * 16;
    } else {
      return scale_offset(k, tokens) + (kRows16 ? 0 : tokens * (k / kBlockSize) * 4);
    }
  }
  static constexpr int cluster_sum_offset(int k, int tokens) {
    return reduce_offset(k, tokens) + kRowTiles * kPartialSlots * kRows * kTokens * 4;
  }
  static constexpr int smem_bytes(int k, int tokens) {
    return cluster_sum_offset(k, tokens) + (kSplits - 1) * kRows * kTokens * 4;
  }

  static_assert(kTokenTiles >= 1 && kTokenTiles <= 2, "a first and a last token tile");
  static_assert(kWarps == 4 || kWarps == 8 || (kKParts && kWarps == 1),
                "compiled K ranges (one warp of all parts: k parts only)");
  static_assert(!kKParts || (kStages > 0 && kSplits == 1 && kOperand != ActivationOperand::kF16),
                "k parts: a ring stage is a 128-K chunk; no split; the prefill's bf16 operand");
  static_assert(kSplits == 1 || kSplits == 2 || kSplits == 4, "a cluster of 1, 2 or 4 CTAs");
  static_assert(kRowTiles >= 1 && (kRowTiles <= 3 || (kKParts && kRowTiles == 4)),
                "compiled row tiles (four: k parts only)");
  static_assert(kRowTiles == 1 || kSplits == 1, "a K split meets over one row tile");
  static_assert(kKParts ? kRows == 8 : kRows == 16,
                "k parts: 8-row tiles, weights as B; promoted: 16 rows, weights as A");
};

// Grid: x = kCtaRows-row weight tiles, y = K splits (clusters of (1, kSplits, 1) when kSplits > 1),
// z = token tiles of kTokens. Dynamic shared memory: Tile::smem_bytes(K, min(M, kTokens)).
template <class Tile>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinCtasPerSm)
    gemv_gemm_kernel(const GemmParams p) {
  using namespace gemv_detail;
  timeline::Stamps stamps;
  stamps.mark(timeline::kEntry);
  if constexpr (Tile::kSplits > 1) hopper::cluster_arrive_relaxed();  // waited for at the meeting
  extern __shared__ uint4 smem_u4[];
  auto* const smem = reinterpret_cast<std::uint8_t*>(smem_u4);
  const int cta_warp = static_cast<int>(threadIdx.x) >> 5;
  const int warp = cta_warp % Tile::kWarps, lane = static_cast<int>(threadIdx.x) & 31;
  const int g = lane >> 2, t = lane & 3;
  const int cta_n0 = static_cast<int>(blockIdx.x) * Tile::kCtaRows;
  const int n0 = cta_n0 + cta_warp / Tile::kWarps * Tile::kRows;
  const int t0 = static_cast<int>(blockIdx.z) * Tile::kTokens;
  const int split = static_cast<int>(blockIdx.y);  // the CTA's rank in its cluster
  const int blocks = p.k / kBlockSize;
  const int staged = min(p.m, Tile::kTokens);  // rows the launch sized shared memory for
  // This warp's contiguous range: of blocks (registers) or of 4-block stages (ring), within its
  // split's.
  const int units = Tile::kStages == 0 ? blocks : (blocks + 3) / 4;
  const int split_first = split * units / Tile::kSplits;
  const int split_end = (split + 1) * units / Tile::kSplits;
  const int unit_blocks = Tile::kStages == 0 ? 1 : 4;
  const StagedActivation s{smem + Tile::activation_offset(p.k),
                           reinterpret_cast<float*>(smem + Tile::scale_offset(p.k, staged)),
                           Tile::row_stride(p.k),
                           blocks,
                           min(p.m - t0, Tile::kTokens),
                           min(split_first * unit_blocks, blocks),
                           min(split_end * unit_blocks, blocks),
                           smem + Tile::exp_offset(p.k, staged),
                           Tile::exp_stride(p.k)};
  const int per_warp = (split_end - split_first + Tile::kWarps - 1) / Tile::kWarps;
  // K parts: this warp's whole parts [part_first, part_end) (none where there are fewer parts
  // than warps), and their chunks, one ring stage each.
  const int parts = Tile::kKParts ? batch_invariant_parts(p.k) : 1;
  const int part_first = warp * parts / Tile::kWarps;
  const int part_end = (warp + 1) * parts / Tile::kWarps;
  const int first = Tile::kKParts ? split_chunks(part_first, parts, units).begin
                                  : min(split_first + warp * per_warp, split_end);
  const int end =
      Tile::kKParts ? split_chunks(part_end, parts, units).begin : min(first + per_warp, split_end);

  // Static weights: in flight during the wait on the previous kernel.
  WeightRound<Tile::kRoundBlocks> rounds[2];
  const bool scale_words =
      reinterpret_cast<std::uintptr_t>(p.w_scales) % 4 == 0 && (p.n <= 1 || p.ld_w_scales % 4 == 0);
  // A k-parts warp's ring: its row tile's slot for its one part (or, with more parts than
  // warps, for the warp); a warp without a part issues no copy into it.
  const int ring_slot = Tile::kKParts && parts <= Tile::kWarps
                            ? cta_warp / Tile::kWarps * parts + min(part_first, parts - 1)
                            : cta_warp;
  const typename Tile::Ring ring{smem + ring_slot * Tile::Ring::kWarpBytes, scale_words};
  if constexpr (Tile::kStages == 0) {
    rounds[0].load(p, n0, g, t, first, end);
  } else {
#pragma unroll
    for (int i = 0; i < Tile::kStages - 1; ++i) ring.issue(p, n0, lane, first + i, end, blocks);
  }
  // The scaled domain needs the CTA's weight scales in its window (read before the wait: static)
  // and an activation staged from e4m3 codes and scales, from bf16 x, or (tiles that quantize
  // into it) from x quantized here.
  const bool unscaled_staging =
      Tile::kScaledDomain && (Tile::kXAsIs || p.x == nullptr || Tile::kQuantizesUnscaled);
  bool in_window = unscaled_staging;
  if constexpr (Tile::kScaledDomain) {
    if (unscaled_staging) {
      in_window = weight_scales_in_window<Tile::kThreads, Tile::kCtaRows>(p, cta_n0, blocks);
    }
  }
  if (p.next_launch == NextLaunch::kAtEntry) hopper::allow_dependent_launch();
  hopper::wait_prerequisite_grids();
  stamps.mark(timeline::kWaited);
  if (p.next_launch == NextLaunch::kAfterWait) hopper::allow_dependent_launch();
  // Scaled domain: stage the unscaled form (from bf16 x as it is, from x quantized here, or from
  // the quantize kernel's e4m3 and scales); where any scale leaves the window (the CTA agrees at
  // the barrier), stage the scaled one over it and chain in the prefill kernel's form.
  bool scaled_domain = false;
  if constexpr (Tile::kScaledDomain) {
    if (unscaled_staging) {
      if constexpr (Tile::kXAsIs) {
        in_window = stage_unscaled_x<Tile::kThreads>(p, t0, s) && in_window;
      } else if (Tile::kQuantizesUnscaled && p.x != nullptr) {
        in_window = stage_unscaled_quantized<Tile::kThreads>(p, t0, s) && in_window;
      } else {
        in_window = stage_unscaled_mx<Tile::kThreads>(p, t0, s) && in_window;
      }
      scaled_domain = __syncthreads_and(in_window) != 0;
    }
  }
  if (!scaled_domain) {
    if constexpr (Tile::kXAsIs) {
      copy_x_rows<Tile::kThreads>(p, t0, s);
    } else if constexpr (Tile::kKParts) {
      if (p.x != nullptr) {
        quantize_activations<Tile::kThreads, /*kDequantized=*/true>(p, t0, s);
      } else {
        dequantize_activations<Tile::kThreads>(p, t0, s);
      }
    } else if (p.x != nullptr) {
      quantize_activations<Tile::kThreads>(p, t0, s);
    } else {
      copy_activations<Tile::kThreads, (Tile::kStages > 0)>(p, t0, s);
    }
    __syncthreads();
  }
  if (p.next_launch == NextLaunch::kAfterActivation) hopper::allow_dependent_launch();
  stamps.mark(timeline::kPrologue);

  const typename Tile::Reader first_tile(s, 0, g, t), last_tile(s, Tile::kTokenTiles - 1, g, t);

  // The partial tiles [row tile][warp or part][row][token], added in warp or part order.
  auto* const partials = reinterpret_cast<float*>(smem + Tile::reduce_offset(p.k, staged));
  constexpr int kTile = Tile::kRows * Tile::kTokens;
  if constexpr (Tile::kKParts) {
    float* const part_sums = partials + cta_warp / Tile::kWarps * Tile::kPartialSlots * kTile;
    if (scaled_domain) {
      const std::uint8_t* const exps_lo = s.exps + min(g, s.tokens - 1) * s.exp_stride;
      const std::uint8_t* const exps_hi = s.exps + min(8 + g, s.tokens - 1) * s.exp_stride;
      stream_parts_through_ring</*kUnscaled=*/true, Tile::kStages, Tile::kTokenTiles>(
          p, n0, lane, part_first, part_end, parts, units, blocks, ring, part_sums, exps_lo,
          exps_hi, first_tile, last_tile);
    } else {
      stream_parts_through_ring</*kUnscaled=*/false, Tile::kStages, Tile::kTokenTiles>(
          p, n0, lane, part_first, part_end, parts, units, blocks, ring, part_sums, nullptr,
          nullptr, first_tile, last_tile);
    }
  } else {
    float acc[Tile::kTokenTiles][4];
#pragma unroll
    for (int j = 0; j < Tile::kTokenTiles; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;
    }
    if constexpr (Tile::kStages == 0) {
      stream_in_registers(p, n0, g, t, first, end, rounds, acc, first_tile, last_tile);
    } else {
      stream_through_ring(p, n0, lane, first, end, blocks, ring, acc, first_tile, last_tile);
    }
    store_fragment_tile(acc, partials + cta_warp * kTile, g, t);
  }
  stamps.mark(timeline::kMainLoop);
  __syncthreads();
  stamps.mark(timeline::kReduced);
  // e indexes [row tile][row][token] of the CTA's rows. K parts: ((p0 + p1) + p2) + ...; a
  // part's sum is never -0 (its chain starts at +0), so p0 alone is what 0 + p0 would be.
  auto tile_sum = [&](int e) {
    const float* const tile = partials + e / kTile * Tile::kPartialSlots * kTile + e % kTile;
    if constexpr (Tile::kKParts) {
      float v = tile[0];
      for (int q = 1; q < parts; ++q) v += tile[q * kTile];
      return v;
    } else {
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < Tile::kWarps; ++w) v += tile[w * kTile];
      return v;
    }
  };
  auto store = [&](int e, float v) {
    const int n = cta_n0 + e / Tile::kTokens, m = t0 + e % Tile::kTokens;
    if (n >= p.n || m >= p.m) return;
    if (p.bias_type != BiasType::kNone) v += epilogue::load_bias(p, n);
    epilogue::store_one(p, m, n, v);
  };
  if constexpr (Tile::kSplits == 1) {
    for (int e = static_cast<int>(threadIdx.x); e < Tile::kRowTiles * kTile; e += Tile::kThreads)
      store(e, tile_sum(e));
  } else {
    auto* const sums = reinterpret_cast<float*>(smem + Tile::cluster_sum_offset(p.k, staged));
    hopper::cluster_wait_acquire();  // the entry phase: every CTA of the cluster runs
    if (split > 0) {
      const std::uint32_t slot = ptx::smem_address(sums + (split - 1) * kTile);
      for (int e = static_cast<int>(threadIdx.x); e < kTile; e += Tile::kThreads) {
        hopper::store_cluster_shared(slot + 4 * static_cast<std::uint32_t>(e), 0u, tile_sum(e));
      }
      hopper::cluster_arrive_release();
      hopper::cluster_wait_acquire();  // split 0 has arrived: it no longer needs this CTA
    } else {
      hopper::cluster_arrive_release();
      hopper::cluster_wait_acquire();  // the other splits' sums are in `sums`
      for (int e = static_cast<int>(threadIdx.x); e < kTile; e += Tile::kThreads) {
        float v = 0.0f + tile_sum(e);
#pragma unroll
        for (int r = 1; r < Tile::kSplits; ++r) v += sums[(r - 1) * kTile + e];
        store(e, v);
      }
    }
  }
  stamps.mark(timeline::kStored);
  stamps.flush();
}

}  // namespace mxlinear::device
