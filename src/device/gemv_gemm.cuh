// The MX GEMV for the fewest tokens (M <= 16): each warp streams 16 weight rows straight from
// global memory into mma.sync fragments, with no shared-memory ring, barriers or fences in its
// loop. At these sizes a layer is its weight bytes; what bounds a kernel is the chain of work per
// byte (session 5: the CUDA-core version issued ~6 instructions per weight byte, the wgmma decode
// kernel waits out barriers and fences per 8 KiB stage). Here a warp spends ~34 instructions on
// 512 weight bytes (16 rows x one MX block).
//
// Design:
// - A CTA owns 16 weight rows; its kWarps warps split K into contiguous ranges of MX blocks and
//   meet in shared memory at the end, added in warp order (deterministic, no atomics).
// - Lane (g, t) = (lane / 4, lane % 4) loads 8 bytes of rows g and g + 8 per block: bytes
//   8t..8t+7. The block's two m16n8k16 f16 mma take bytes 0-3 (step 0) and 4-7 (step 1), each
//   as the pairs (k = 2t, 2t+1) and (2t+8, 2t+9); the activation fragment of token g is read
//   with the same permutation, so each pair of mma sums exactly one MX block (exact e4m3 -> f16
//   widening, fp32 accumulation: the generic kernel's arithmetic).
// - The block's partial is promoted as acc += (partial * sa) * sw, like the other kernels.
// - A warp's weights for the next 8 blocks are in flight while it computes the current 8; the
//   first 8 are issued before waiting on the previous kernel (weights are static).
// - The CTA's tokens (e4m3 and scale bytes) are staged in shared memory once: copied, or
//   quantized from the bf16/fp16 activation the way the quantize kernel does it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "device/epilogue.cuh"
#include "device/gemm_params.hpp"
#include "device/grid_walk.hpp"
#include "device/hopper_ptx.cuh"
#include "device/mx_convert.cuh"
#include "device/ptx.cuh"
#include "mxlinear/format.hpp"

namespace mxlinear::device {

template <int kTokenTiles_, int kWarps_>
struct GemvTile {
  static constexpr int kTokenTiles = kTokenTiles_;  // n8 mma tiles of tokens per CTA
  static constexpr int kTokens = 8 * kTokenTiles;   // activation rows per CTA
  static constexpr int kWarps = kWarps_;            // K ranges per CTA
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16;  // weight rows per CTA (mma M)
  // MX blocks per round of a warp's loads: 4 KiB per warp, two rounds in flight (with 2 KiB
  // rounds the warps kept too few bytes in flight: 10.5 us for 2560 x 6144 at M = 1). Lane t
  // loads the scale bytes of blocks t, t + 4 of the round.
  static constexpr int kRoundBlocks = 8;
  static constexpr int kScalesPerLane = kRoundBlocks / 4;
  // Activation rows are padded by 32 bytes so the 8 token rows of a fragment read fall into
  // different bank groups (K % 128 == 0 would put them all in the same banks).
  static constexpr int kRowPad = 32;
  // 16 warps per SM (at most 128 registers; 24 spill): 4 warps per CTA then run the 384 CTAs of
  // an N = 6144 layer in one wave, 8 warps per CTA the 160 of N = 2560. Two token tiles need
  // more registers than that (8 per SM).
  static constexpr int kMinCtasPerSm = 16 / kWarps / kTokenTiles;

  // Shared memory at K for `tokens` = min(M, kTokens) staged rows: e4m3 rows, their scales
  // decoded to fp32, and the warps' partial tiles for the reduction.
  static constexpr int activation_bytes(int k, int tokens) { return tokens * (k + kRowPad); }
  static constexpr int reduce_offset(int k, int tokens) {
    return activation_bytes(k, tokens) + tokens * (k / kBlockSize) * 4;
  }
  static constexpr int smem_bytes(int k, int tokens) {
    return reduce_offset(k, tokens) + kWarps * kRows * kTokens * 4;
  }

  static_assert(kTokenTiles >= 1 && kTokenTiles <= 2, "a first and a last token tile");
  static_assert(kWarps == 4 || kWarps == 8, "compiled K ranges");
  static_assert(kRoundBlocks % 4 == 0, "scale bytes spread over the 4 lanes of a row group");
};

namespace gemv_detail {

// The staged activation: `tokens` rows of K e4m3 bytes (stride K + kRowPad) and of K/32 scales
// (fp32).
struct StagedActivation {
  std::uint8_t* values;
  float* scales;
  int stride, blocks, tokens;
};

// Copies the CTA's pre-quantized tokens into shared memory, every load of a batch in flight
// before its first store: 16-byte words where the rows allow, else 4-byte ones (4-byte aligned
// rows).
template <class Tile, class Word>
__device__ __forceinline__ void copy_rows(const GemmParams& p, int t0, const StagedActivation& s) {
  constexpr int kBytes = sizeof(Word);
  // 32 bytes of a batch in registers: the first round of weights is in flight meanwhile.
  copy_in_batches<32 / kBytes>(
      s.tokens, p.k / kBytes, static_cast<int>(threadIdx.x), Tile::kThreads,
      [&](int t, int w) {
        return *reinterpret_cast<const Word*>(p.a + static_cast<std::int64_t>(t0 + t) * p.ld_a +
                                              kBytes * w);
      },
      [&](int t, int w, Word v) {
        *reinterpret_cast<Word*>(s.values + t * s.stride + kBytes * w) = v;
      });
}

template <class Tile>
__device__ __forceinline__ void copy_activations(const GemmParams& p, int t0,
                                                 const StagedActivation& s) {
  const bool wide = reinterpret_cast<std::uintptr_t>(p.a) % 16 == 0 &&
                    (p.m <= 1 || p.ld_a % 16 == 0) && p.k % 16 == 0;
  if (wide) {
    copy_rows<Tile, uint4>(p, t0, s);
  } else {
    copy_rows<Tile, std::uint32_t>(p, t0, s);
  }
  copy_in_batches<4>(
      s.tokens, s.blocks, static_cast<int>(threadIdx.x), Tile::kThreads,
      [&](int t, int b) {
        return p.a_scales[static_cast<std::int64_t>(t0 + t) * p.ld_a_scales + b];
      },
      [&](int t, int b, std::uint8_t v) { s.scales[t * s.blocks + b] = mx::scale_from_byte(v); });
}

// Quantizes the CTA's tokens from p.x (bf16 or fp16, 16-byte aligned rows) into shared memory
// with RCEIL, through the quantize kernel's helpers (block extent over four lanes,
// mx::quantize_eight): the same bytes. Four lanes per MX block, 8 values each, so the weights
// already in flight keep their registers.
template <class Tile>
__device__ __forceinline__ void quantize_activations(const GemmParams& p, int t0,
                                                     const StagedActivation& s) {
  const int quarters = s.tokens * s.blocks * 4;
  // Every lane runs every iteration: the extent's shuffles need the whole warp.
  for (int e0 = 0; e0 < quarters; e0 += Tile::kThreads) {
    const int e = e0 + static_cast<int>(threadIdx.x);
    const bool valid = e < quarters;  // whole groups of four lanes
    const int t = valid ? e / (4 * s.blocks) : 0, b = (e >> 2) % s.blocks, q = e & 3;
    uint4 raw = make_uint4(0u, 0u, 0u, 0u);
    if (valid) {
      raw = __ldg(reinterpret_cast<const uint4*>(static_cast<const std::uint16_t*>(p.x) +
                                                 static_cast<std::int64_t>(t0 + t) * p.ld_x +
                                                 kBlockSize * b + 8 * q));
    }
    const std::uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
    float v[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f =
          p.x_is_f16 ? __half22float2(*reinterpret_cast<const __half2*>(&words[j]))
                     : __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[j]));
      v[2 * j] = f.x;
      v[2 * j + 1] = f.y;
    }
    const mx::BlockExtent extent = mx::block_extent_of_four_lanes(v);
    std::uint32_t bytes[2];
    const std::uint8_t scale =
        mx::quantize_eight(v, extent.amax, extent.non_finite, ScaleRule::kRceil, bytes);
    if (valid) {
      *reinterpret_cast<uint2*>(s.values + t * s.stride + kBlockSize * b + 8 * q) =
          make_uint2(bytes[0], bytes[1]);
      if (q == 0) s.scales[t * s.blocks + b] = mx::scale_from_byte(scale);
    }
  }
}

// One round of a warp's weights: rows g and g + 8, kRoundBlocks blocks of 8 bytes each, and
// the scale bytes of blocks t, t + 4, ... of the round for both rows (the other lanes' by
// shuffle); zeros past N or past the warp's K range.
template <class Tile>
struct WeightRound {
  uint2 w[2][Tile::kRoundBlocks];
  std::uint32_t sw[2][Tile::kScalesPerLane];

  __device__ __forceinline__ void load(const GemmParams& p, int n0, int g, int t, int first,
                                       int end) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = n0 + g + 8 * h;
      const bool row = n < p.n;
      const std::int64_t at = static_cast<std::int64_t>(row ? n : 0);
      const std::uint8_t* wr = p.w + at * p.ld_w + 8 * t;
#pragma unroll
      for (int i = 0; i < Tile::kRoundBlocks; ++i) {
        const int b = first + i;
        w[h][i] = row && b < end ? __ldg(reinterpret_cast<const uint2*>(wr + kBlockSize * b))
                                 : make_uint2(0u, 0u);
      }
#pragma unroll
      for (int q = 0; q < Tile::kScalesPerLane; ++q) {
        const int b = first + t + 4 * q;
        sw[h][q] = row && b < end ? __ldg(p.w_scales + at * p.ld_w_scales + b) : 0u;
      }
    }
  }

  // The weight scale of block i of the round for row g (h = 0) or g + 8 (h = 1), given this
  // lane's decoded scales: lane (g, i % 4) holds it. Every lane of the warp must call it.
  __device__ __forceinline__ static float scale(const float (&decoded)[2][Tile::kScalesPerLane],
                                                int h, int i, int g) {
    return __shfl_sync(0xFFFFFFFFu, decoded[h][i / 4], 4 * g + i % 4);
  }
};

// Where lane (g, t) reads token tile `tile` of the staged activation: its fragment row (token g
// of the tile) and the scale rows of tokens 2t and 2t + 1. Tokens past the staged rows read the
// last staged one: the mma keeps each token's column apart, and those columns are never stored.
struct ActivationReader {
  const std::uint8_t* values;
  const float* scale0;
  const float* scale1;

  __device__ __forceinline__ ActivationReader(const StagedActivation& s, int tile, int g, int t)
      : values(s.values + min(8 * tile + g, s.tokens - 1) * s.stride + 8 * t),
        scale0(s.scales + min(8 * tile + 2 * t, s.tokens - 1) * s.blocks),
        scale1(s.scales + min(8 * tile + 2 * t + 1, s.tokens - 1) * s.blocks) {}

  // Block b's fragments: frag[0..1] for k16 step 0, frag[2..3] for step 1.
  __device__ __forceinline__ void fragments(int b, std::uint32_t (&frag)[4]) const {
    const uint2 bytes = *reinterpret_cast<const uint2*>(values + kBlockSize * b);
    ptx::e4m3x4_to_f16x2x2(bytes.x, frag[0], frag[1]);
    ptx::e4m3x4_to_f16x2x2(bytes.y, frag[2], frag[3]);
  }
};

}  // namespace gemv_detail

// Grid: x = 16-row weight tiles, y = token tiles of kTokens. Dynamic shared memory:
// Tile::smem_bytes(K, min(M, kTokens)).
template <class Tile>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinCtasPerSm)
    gemv_gemm_kernel(const GemmParams p) {
  using namespace gemv_detail;
  extern __shared__ uint4 smem_u4[];
  auto* const smem = reinterpret_cast<std::uint8_t*>(smem_u4);
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = static_cast<int>(blockIdx.x) * Tile::kRows;
  const int t0 = static_cast<int>(blockIdx.y) * Tile::kTokens;
  const int blocks = p.k / kBlockSize;
  const int staged = min(p.m, Tile::kTokens);  // rows the launch sized shared memory for
  const StagedActivation s{smem,
                           reinterpret_cast<float*>(smem + Tile::activation_bytes(p.k, staged)),
                           p.k + Tile::kRowPad, blocks, min(p.m - t0, Tile::kTokens)};

  // This warp's contiguous range of blocks.
  const int per_warp = (blocks + Tile::kWarps - 1) / Tile::kWarps;
  const int first = min(warp * per_warp, blocks), end = min(first + per_warp, blocks);

  WeightRound<Tile> rounds[2];
  rounds[0].load(p, n0, g, t, first, end);  // static weights: in flight during the wait
  hopper::wait_prerequisite_grids();
  if (p.x != nullptr) {
    quantize_activations<Tile>(p, t0, s);
  } else {
    copy_activations<Tile>(p, t0, s);
  }
  __syncthreads();
  hopper::allow_dependent_launch();

  float acc[Tile::kTokenTiles][4];
#pragma unroll
  for (int j = 0; j < Tile::kTokenTiles; ++j) {
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;
  }

  const ActivationReader first_tile(s, 0, g, t), last_tile(s, Tile::kTokenTiles - 1, g, t);

  // Rounds in pairs, so each buffer has a fixed register home.
  auto compute = [&](const WeightRound<Tile>& r, int base) {
    float decoded[2][Tile::kScalesPerLane];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int q = 0; q < Tile::kScalesPerLane; ++q)
        decoded[h][q] = mx::scale_from_byte(r.sw[h][q]);
    }
#pragma unroll
    for (int i = 0; i < Tile::kRoundBlocks; ++i) {
      const int b = base + i;
      if (b >= end) break;         // warp-uniform
      std::uint32_t a0[4], a1[4];  // k16 steps 0 and 1: {row g lo, row g+8 lo, g hi, g+8 hi}
      ptx::e4m3x4_to_f16x2x2(r.w[0][i].x, a0[0], a0[2]);
      ptx::e4m3x4_to_f16x2x2(r.w[1][i].x, a0[1], a0[3]);
      ptx::e4m3x4_to_f16x2x2(r.w[0][i].y, a1[0], a1[2]);
      ptx::e4m3x4_to_f16x2x2(r.w[1][i].y, a1[1], a1[3]);
      const float sw0 = WeightRound<Tile>::scale(decoded, 0, i, g);
      const float sw1 = WeightRound<Tile>::scale(decoded, 1, i, g);
#pragma unroll
      for (int j = 0; j < Tile::kTokenTiles; ++j) {
        const ActivationReader& reader = j == 0 ? first_tile : last_tile;
        std::uint32_t bf[4];
        reader.fragments(b, bf);
        const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        float partial[4];
        ptx::mma_f16_16816(partial, a0, bf[0], bf[1], zero);
        ptx::mma_f16_16816(partial, a1, bf[2], bf[3], partial);
        // partial: (row g, token 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1) of tile j.
        const float sa0 = reader.scale0[b], sa1 = reader.scale1[b];
        acc[j][0] = fmaf(partial[0] * sa0, sw0, acc[j][0]);
        acc[j][1] = fmaf(partial[1] * sa1, sw0, acc[j][1]);
        acc[j][2] = fmaf(partial[2] * sa0, sw1, acc[j][2]);
        acc[j][3] = fmaf(partial[3] * sa1, sw1, acc[j][3]);
      }
    }
  };
  for (int base = first; base < end; base += 2 * Tile::kRoundBlocks) {
    const int next = base + Tile::kRoundBlocks;
    if (next < end) rounds[1].load(p, n0, g, t, next, end);
    compute(rounds[0], base);
    if (next >= end) break;
    if (next + Tile::kRoundBlocks < end)
      rounds[0].load(p, n0, g, t, next + Tile::kRoundBlocks, end);
    compute(rounds[1], next);
  }

  // The warps' partial tiles [warp][row][token], added in warp order.
  auto* const partials = reinterpret_cast<float*>(smem + Tile::reduce_offset(p.k, staged));
  constexpr int kTile = Tile::kRows * Tile::kTokens;
#pragma unroll
  for (int j = 0; j < Tile::kTokenTiles; ++j) {
    const int token = 8 * j + 2 * t;
    float* const mine = partials + warp * kTile;
    mine[g * Tile::kTokens + token] = acc[j][0];
    mine[g * Tile::kTokens + token + 1] = acc[j][1];
    mine[(g + 8) * Tile::kTokens + token] = acc[j][2];
    mine[(g + 8) * Tile::kTokens + token + 1] = acc[j][3];
  }
  __syncthreads();
  for (int e = static_cast<int>(threadIdx.x); e < kTile; e += Tile::kThreads) {
    const int row = e / Tile::kTokens, token = e % Tile::kTokens;
    const int n = n0 + row, m = t0 + token;
    if (n >= p.n || m >= p.m) continue;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < Tile::kWarps; ++w) v += partials[w * kTile + e];
    if (p.bias_type != BiasType::kNone) v += epilogue::load_bias(p, n);
    epilogue::store_one(p, m, n, v);
  }
}

}  // namespace mxlinear::device
