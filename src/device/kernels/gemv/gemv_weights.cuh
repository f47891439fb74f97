// How a GEMV warp gets its 16 weight rows and what it does with each MX block. Two streamers:
// WeightRounds keeps the next round of blocks in registers (no shared memory, but a register
// budget caps the bytes in flight), WeightRing copies kStages rounds ahead into a per-warp
// shared-memory ring with cp.async (each lane copies, waits on its own groups, and the warp meets
// at __syncwarp: no CTA barrier, no mbarrier, no proxy fence). Device code only.
#pragma once

#include <cstdint>

#include "device/common/gemm_params.hpp"
#include "device/common/grid_walk.hpp"
#include "device/common/mma_16bit.cuh"
#include "device/common/mx_convert.cuh"
#include "device/kernels/gemv/gemv_activation.cuh"
#include "device/kernels/gemv/gemv_ring_layout.hpp"
#include "device/ptx/ptx.cuh"
#include "mxlinear/format.hpp"

namespace mxlinear::device::gemv_detail {

// One MX block for lane (g, t): w_lo / w_hi are bytes 8t..8t+7 of the block in rows g and g + 8;
// the two m16n8k16 mma take bytes 0-3 (step 0) and 4-7 (step 1) as the pairs (k = 2t, 2t+1)
// and (2t+8, 2t+9), and the activation fragments use the same map, so the pair sums exactly the
// block. acc[j] of token tile j: (row g, token 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1), promoted
// as acc += (partial * sa) * sw like the other kernels (W8A8), or acc += partial * sw with the
// weight scale alone (W8A16: x as it is; the scale is never folded into a 16-bit weight, where
// it could round or overflow).
template <int kTokenTiles, class Reader>
__device__ __forceinline__ void accumulate_block(float (&acc)[kTokenTiles][4], uint2 w_lo,
                                                 uint2 w_hi, float sw_lo, float sw_hi, int b,
                                                 const Reader& first_tile,
                                                 const Reader& last_tile) {
  constexpr ActivationOperand kOperand = Reader::kOperand;
  std::uint32_t a0[4], a1[4];  // k16 steps 0 and 1: {row g lo, row g+8 lo, g hi, g+8 hi}
  widen_weights<kOperand>(w_lo.x, a0[0], a0[2]);
  widen_weights<kOperand>(w_hi.x, a0[1], a0[3]);
  widen_weights<kOperand>(w_lo.y, a1[0], a1[2]);
  widen_weights<kOperand>(w_hi.y, a1[1], a1[3]);
#pragma unroll
  for (int j = 0; j < kTokenTiles; ++j) {
    const Reader& reader = j == 0 ? first_tile : last_tile;
    std::uint32_t bf[4];
    reader.fragments(b, bf);
    const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float partial[4];
    mma_16816<kOperand>(partial, a0, bf[0], bf[1], zero);
    mma_16816<kOperand>(partial, a1, bf[2], bf[3], partial);
    if constexpr (kOperand == ActivationOperand::kMx) {
      const float sa0 = reader.scale0[b], sa1 = reader.scale1[b];
      acc[j][0] = fmaf(partial[0] * sa0, sw_lo, acc[j][0]);
      acc[j][1] = fmaf(partial[1] * sa1, sw_lo, acc[j][1]);
      acc[j][2] = fmaf(partial[2] * sa0, sw_hi, acc[j][2]);
      acc[j][3] = fmaf(partial[3] * sa1, sw_hi, acc[j][3]);
    } else {
      acc[j][0] = fmaf(partial[0], sw_lo, acc[j][0]);
      acc[j][1] = fmaf(partial[1], sw_lo, acc[j][1]);
      acc[j][2] = fmaf(partial[2], sw_hi, acc[j][2]);
      acc[j][3] = fmaf(partial[3], sw_hi, acc[j][3]);
    }
  }
}

// The two k16 steps of block b for an 8-row warp: the weights' widened fragments w0 (step 0:
// slots 2t, 2t+1; 2t+8, 2t+9) and w1 (step 1) as B, tokens g and g + 8 as A, mma on kOperand.
template <ActivationOperand kOperand, int kTokenTiles, class Reader>
__device__ __forceinline__ void chain_block_b(float (&acc)[4], const std::uint32_t (&w0)[2],
                                              const std::uint32_t (&w1)[2], int b,
                                              const Reader& first_tile, const Reader& last_tile) {
  std::uint32_t lo[4], hi[4] = {0u, 0u, 0u, 0u};  // tokens g and g + 8: steps 0 and 1
  first_tile.fragments(b, lo);
  if constexpr (kTokenTiles == 2) last_tile.fragments(b, hi);
  const std::uint32_t a0[4] = {lo[0], hi[0], lo[1], hi[1]};
  const std::uint32_t a1[4] = {lo[2], hi[2], lo[3], hi[3]};
  mma_16816<kOperand>(acc, a0, w0[0], w0[1], acc);
  mma_16816<kOperand>(acc, a1, w1[0], w1[1], acc);
}

// One MX block in the batch-invariant K order (k parts): the prefill kernel's arithmetic on the
// same k slots, for a warp of 8 weight rows. The weights are widened to bf16 with their scale
// folded in (mx::e4m3x4_scaled_to_bf16x2x2, exact down to bf16's subnormal grid) and are the
// mma's B operand, so each m16n8k16 takes up to 16 tokens (its A rows, bf16: x, or the MX
// activation dequantized the same way) against the warp's 8 rows; both k16 steps accumulate into
// acc itself, the part's chain. Lane (g, t) widens bytes 8t..8t+7 of row g's block, the k slots
// that the promoted tiles give row g (bytes 0-3: step 0, pairs
// (2t, 2t+1) and (2t+8, 2t+9); bytes 4-7: step 1), and the tokens' fragments keep the slots they
// have as B there, so each output sums the same products in the same slots: mma.sync gives the
// same fp32 bits whichever operand holds a factor (the GPU tests check these rows against the
// prefill kernel's). acc: (token g, row 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1); with one token
// tile, tokens 8-15 are zeros.
template <int kTokenTiles, class Reader>
__device__ __forceinline__ void accumulate_block_in_order_b(float (&acc)[4], uint2 w, float sw,
                                                            int b, const Reader& first_tile,
                                                            const Reader& last_tile) {
  static_assert(Reader::kOperand == ActivationOperand::kBf16, "bf16 fragments");
  std::uint32_t w0[2], w1[2];
  mx::e4m3x4_scaled_to_bf16x2x2(w.x, sw, w0[0], w0[1]);
  mx::e4m3x4_scaled_to_bf16x2x2(w.y, sw, w1[0], w1[1]);
  chain_block_b<ActivationOperand::kBf16, kTokenTiles>(acc, w0, w1, b, first_tile, last_tile);
}

// accumulate_block_in_order_b in the scaled domain (scaled_domain in gemv_activation.cuh): the
// weights widened to f16 without their scale, the tokens' unscaled f16 fragments, f16 mma.
template <int kTokenTiles, class Reader>
__device__ __forceinline__ void accumulate_block_unscaled_b(float (&acc)[4], uint2 w, int b,
                                                            const Reader& first_tile,
                                                            const Reader& last_tile) {
  std::uint32_t w0[2], w1[2];
  ptx::e4m3x4_to_f16x2x2(w.x, w0[0], w0[1]);
  ptx::e4m3x4_to_f16x2x2(w.y, w1[0], w1[1]);
  chain_block_b<ActivationOperand::kF16, kTokenTiles>(acc, w0, w1, b, first_tile, last_tile);
}

// Moves an accumulator of the scaled domain from exponent byte sum `from` to `to` (each a
// weight's scale byte plus a token's exponent byte, 97 .. 177): times 2^(from - to), exact.
__device__ __forceinline__ void move_domain(float& acc, std::uint32_t& from, std::uint32_t to) {
  acc *= __uint_as_float((127u + from - to) << 23);
  from = to;
}

// A scaled-domain accumulator as the scaled chain's value: times 2^(e_a + e_w) of its last
// block, 2^(sum - 157) for that block's byte sum.
__device__ __forceinline__ float leave_domain(float acc, std::uint32_t sum) {
  return acc * __uint_as_float((sum - 30u) << 23);
}

// Whether every scale byte of weight rows [n0, n0 + kRows) (those below N) lies in the scaled
// domain's window; each thread reads blocks tid, tid + kThreads, ... of every row. Static data:
// read before the wait on the previous kernel.
template <int kThreads, int kRows>
__device__ __forceinline__ bool weight_scales_in_window(const GemmParams& p, int n0, int blocks) {
  bool ok = true;
  for (int b = static_cast<int>(threadIdx.x); b < blocks; b += kThreads) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int n = n0 + r;
      if (n < p.n) {
        ok = scaled_domain::in_window(
                 __ldg(p.w_scales + static_cast<std::int64_t>(n) * p.ld_w_scales + b)) &&
             ok;
      }
    }
  }
  return ok;
}

// The domain a part's chain starts in: any byte sum of the window (its accumulator is zero).
inline constexpr std::uint32_t kDomainStart = 137;

// Runs block(i) for i < min(count, kBlocks) (count warp-uniform). A whole run is one branch-free
// sequence, so the scheduler overlaps its blocks' shared-memory loads and mma chains; with a
// branch before each block (the K tail's guard), every block waited out its own chain (~290
// clocks a block and warp on shared down).
template <int kBlocks, class Block>
__device__ __forceinline__ void for_each_block(int count, const Block& block) {
  if (count >= kBlocks) {
#pragma unroll
    for (int i = 0; i < kBlocks; ++i) block(i);
  } else {
#pragma unroll
    for (int i = 0; i < kBlocks; ++i) {
      if (i >= count) break;
      block(i);
    }
  }
}

// The weight scale of round block i for row g, when lane (g, i % 4) holds it in decoded[i / 4].
// Every lane of the warp must call it.
template <int kPerLane>
__device__ __forceinline__ float shuffled_scale(const float (&decoded)[kPerLane], int i, int g) {
  return __shfl_sync(0xFFFFFFFFu, decoded[i / 4], 4 * g + i % 4);
}

// The register streamer: blocks [first, end) of the warp's range, kRoundBlocks per round, the
// next round's loads in flight while the current one is computed; the first round is loaded
// before the wait on the previous kernel (weights are static).
template <int kRoundBlocks>
struct WeightRound {
  static constexpr int kScalesPerLane = kRoundBlocks / 4;  // lane t: blocks t, t + 4, ...
  uint2 w[2][kRoundBlocks];
  std::uint32_t sw[2][kScalesPerLane];

  // Rows g and g + 8, 8 bytes of each block; zeros past N or past `end`.
  __device__ __forceinline__ void load(const GemmParams& p, int n0, int g, int t, int first,
                                       int end) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = n0 + g + 8 * h;
      const bool row = n < p.n;
      const std::int64_t at = static_cast<std::int64_t>(row ? n : 0);
      const std::uint8_t* wr = p.w + at * p.ld_w + 8 * t;
#pragma unroll
      for (int i = 0; i < kRoundBlocks; ++i) {
        const int b = first + i;
        w[h][i] = row && b < end ? __ldg(reinterpret_cast<const uint2*>(wr + kBlockSize * b))
                                 : make_uint2(0u, 0u);
      }
#pragma unroll
      for (int q = 0; q < kScalesPerLane; ++q) {
        const int b = first + t + 4 * q;
        sw[h][q] = row && b < end ? __ldg(p.w_scales + at * p.ld_w_scales + b) : 0u;
      }
    }
  }

  template <int kTokenTiles, class Reader>
  __device__ __forceinline__ void compute(float (&acc)[kTokenTiles][4], int base, int end, int g,
                                          const Reader& first_tile, const Reader& last_tile) const {
    float decoded[2][kScalesPerLane];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int q = 0; q < kScalesPerLane; ++q) decoded[h][q] = mx::scale_from_byte(sw[h][q]);
    }
    // Branch-free in runs of 4 blocks: a whole round of 8 spills at 128 registers.
#pragma unroll
    for (int run = 0; run < kRoundBlocks; run += 4) {
      for_each_block<4>(end - base - run, [&](int r) {
        const int i = run + r;
        const float sw_lo = shuffled_scale(decoded[0], i, g);
        const float sw_hi = shuffled_scale(decoded[1], i, g);
        accumulate_block(acc, w[0][i], w[1][i], sw_lo, sw_hi, base + i, first_tile, last_tile);
      });
    }
  }
};

template <int kRoundBlocks, int kTokenTiles, class Reader>
__device__ __forceinline__ void stream_in_registers(const GemmParams& p, int n0, int g, int t,
                                                    int first, int end,
                                                    WeightRound<kRoundBlocks> (&rounds)[2],
                                                    float (&acc)[kTokenTiles][4],
                                                    const Reader& first_tile,
                                                    const Reader& last_tile) {
  // Rounds in pairs, so each buffer has a fixed register home; rounds[0] holds `first` already.
  for (int base = first; base < end; base += 2 * kRoundBlocks) {
    const int next = base + kRoundBlocks;
    if (next < end) rounds[1].load(p, n0, g, t, next, end);
    rounds[0].compute(acc, base, end, g, first_tile, last_tile);
    if (next >= end) break;
    if (next + kRoundBlocks < end) rounds[0].load(p, n0, g, t, next + kRoundBlocks, end);
    rounds[1].compute(acc, next, end, g, first_tile, last_tile);
  }
}

// The shared-memory streamer: the warp's range in stages of 4 blocks of its kRows rows, kStages
// slots laid out as gemv_ring_layout.hpp says, kStages - 1 stages in flight; lanes 0 .. kRows - 1
// copy the scale words (cp.async where the scale rows are 4-byte aligned, else plain loads and
// stores, which wait out a round trip per stage). Needs 16-byte aligned weight rows.
template <int kStages, int kRows = 16>
struct WeightRing {
  static constexpr int kStageBlocks = gemv_ring::kStageBlocks;
  static constexpr int kSlotBytes = gemv_ring::slot_bytes(kRows);
  static constexpr int kScaleOffset = gemv_ring::scale_offset(kRows);
  static constexpr int kWarpBytes = kStages * kSlotBytes;
  static_assert(kStages >= 2 && kSlotBytes % 16 == 0, "16-byte aligned slots");
  static_assert(kRows == 16 || kRows == 8, "16 rows, or 8 (k parts, weights as B)");

  std::uint8_t* ring;  // this warp's slots
  bool scale_words;    // 4-byte aligned scale rows: copied by cp.async

  // Copies stage s (blocks 4s .. 4s + 3, clipped to `blocks`) into slot s % kStages and commits
  // one cp.async group (an empty one past the warp's range, so group counts stay uniform).
  __device__ __forceinline__ void issue(const GemmParams& p, int n0, int lane, int s, int end_stage,
                                        int blocks) const {
    if (s < end_stage) {
      std::uint8_t* slot = ring + (s % kStages) * kSlotBytes;
      const int b0 = kStageBlocks * s;
      const int valid_bytes = kBlockSize * min(kStageBlocks, blocks - b0);
      constexpr int kChunksPerLane = gemv_ring::lane_copy(kRows, 0).count;
      const gemv_ring::LaneCopy copy = gemv_ring::lane_copy(kRows, lane);
      const int n = n0 + copy.row;
      const std::int64_t at = n < p.n ? n : 0;
      const std::uint8_t* src = p.w + at * p.ld_w + kBlockSize * b0;
#pragma unroll
      for (int i = 0; i < kChunksPerLane; ++i) {
        const int c = copy.first + i;
        const bool valid = n < p.n && 16 * (c + 1) <= valid_bytes;
        ptx::cp_async_16(ptx::smem_address(slot + gemv_ring::chunk_offset(copy.row, c)),
                         valid ? src + 16 * c : src, valid ? 16 : 0);
      }
      if (lane < kRows) {
        const int ns = n0 + lane;
        const std::int64_t row = ns < p.n ? ns : 0;
        const std::uint8_t* scales = p.w_scales + row * p.ld_w_scales + b0;
        const int count = ns < p.n ? valid_bytes / kBlockSize : 0;
        std::uint8_t* dst = slot + kScaleOffset + 4 * lane;
        // A partial word (the K tail) is read byte by byte: cp.async reads all 4 bytes whatever
        // its source size, past the end of a scale row that ends the allocation (memcheck
        // caught it on a 1 x 32 weight).
        if (scale_words && count == 4) {
          ptx::cp_async_4(ptx::smem_address(dst), scales, 4);
        } else {
          std::uint32_t word = 0;
          for (int q = 0; q < count; ++q) word |= std::uint32_t{__ldg(scales + q)} << (8 * q);
          *reinterpret_cast<std::uint32_t*>(dst) = word;
        }
      }
    }
    ptx::cp_async_commit();
  }

  // Stage s's slot: its rows' bytes, then their scale words.
  __device__ __forceinline__ const std::uint8_t* slot_of(int s) const {
    return ring + (s % kStages) * kSlotBytes;
  }

  // The scale of block `block` of row `row` in `slot`, decoded. Lane (g, t) decodes block t's of
  // its rows; the others come by shuffle (shuffled_scale).
  __device__ __forceinline__ static float decoded_scale(const std::uint8_t* slot, int row,
                                                        int block) {
    const auto* const words = reinterpret_cast<const std::uint32_t*>(slot + kScaleOffset);
    return mx::scale_from_byte((words[row] >> (8 * block)) & 0xFFu);
  }

  // The 16-row ring's stage, each block promoted (accumulate_block).
  template <int kTokenTiles, class Reader>
  __device__ __forceinline__ void compute(float (&acc)[kTokenTiles][4], int s, int blocks, int g,
                                          int t, const Reader& first_tile,
                                          const Reader& last_tile) const {
    static_assert(kRows == 16, "16 rows as the mma's A operand");
    const std::uint8_t* const slot = slot_of(s);
    const float lo[1] = {decoded_scale(slot, g, t)}, hi[1] = {decoded_scale(slot, g + 8, t)};
    const int b0 = kStageBlocks * s;
    const auto block = [&](int i) {
      const uint2 w_lo =
          *reinterpret_cast<const uint2*>(slot + gemv_ring::fragment_offset(g, t, i));
      const uint2 w_hi =
          *reinterpret_cast<const uint2*>(slot + gemv_ring::fragment_offset(g + 8, t, i));
      const float sw_lo = shuffled_scale(lo, i, g), sw_hi = shuffled_scale(hi, i, g);
      accumulate_block(acc, w_lo, w_hi, sw_lo, sw_hi, b0 + i, first_tile, last_tile);
    };
    for_each_block<kStageBlocks>(blocks - b0, block);
  }

  // The 8-row ring's stage in the batch-invariant order (accumulate_block_in_order_b).
  template <int kTokenTiles, class Reader>
  __device__ __forceinline__ void compute_in_order_b(float (&acc)[4], int s, int blocks, int g,
                                                     int t, const Reader& first_tile,
                                                     const Reader& last_tile) const {
    static_assert(kRows == 8, "8 rows as the mma's B operand");
    const std::uint8_t* const slot = slot_of(s);
    const float decoded[1] = {decoded_scale(slot, g, t)};
    const int b0 = kStageBlocks * s;
    for_each_block<kStageBlocks>(blocks - b0, [&](int i) {
      const uint2 w = *reinterpret_cast<const uint2*>(slot + gemv_ring::fragment_offset(g, t, i));
      accumulate_block_in_order_b<kTokenTiles>(acc, w, shuffled_scale(decoded, i, g), b0 + i,
                                               first_tile, last_tile);
    });
  }

  // The 8-row ring's stage in the scaled domain (accumulate_block_unscaled_b). exps_lo / exps_hi:
  // the staged exponent bytes of tokens g and g + 8; domain[c]: the byte sum acc[c] is in,
  // (token, row) = (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1), moved block by block.
  template <int kTokenTiles, class Reader>
  __device__ __forceinline__ void compute_unscaled_b(float (&acc)[4], std::uint32_t (&domain)[4],
                                                     int s, int blocks, int g, int t,
                                                     const std::uint8_t* exps_lo,
                                                     const std::uint8_t* exps_hi,
                                                     const Reader& first_tile,
                                                     const Reader& last_tile) const {
    static_assert(kRows == 8, "8 rows as the mma's B operand");
    const std::uint8_t* const slot = slot_of(s);
    // Rows 2t and 2t + 1's scale words, and the tokens' exponent words, of this stage's blocks:
    // their byte sums (each <= 177, so no carry crosses a byte).
    const uint2 rows = *reinterpret_cast<const uint2*>(slot + kScaleOffset + 8 * t);
    const std::uint32_t token_lo = *reinterpret_cast<const std::uint32_t*>(exps_lo + 4 * s);
    std::uint32_t sums[4] = {rows.x + token_lo, rows.y + token_lo, 0u, 0u};
    if constexpr (kTokenTiles == 2) {
      const std::uint32_t token_hi = *reinterpret_cast<const std::uint32_t*>(exps_hi + 4 * s);
      sums[2] = rows.x + token_hi;
      sums[3] = rows.y + token_hi;
    }
    constexpr int kLive = kTokenTiles == 2 ? 4 : 2;  // tokens g + 8 exist with two token tiles
    const int b0 = kStageBlocks * s;
    for_each_block<kStageBlocks>(blocks - b0, [&](int i) {
#pragma unroll
      for (int c = 0; c < kLive; ++c) move_domain(acc[c], domain[c], (sums[c] >> (8 * i)) & 0xFFu);
      const uint2 w = *reinterpret_cast<const uint2*>(slot + gemv_ring::fragment_offset(g, t, i));
      accumulate_block_unscaled_b<kTokenTiles>(acc, w, b0 + i, first_tile, last_tile);
    });
  }
};

// Stages [first, end) of the warp's range through the ring; stages first .. first + kStages - 2
// were issued before the wait on the previous kernel.
template <int kStages, int kTokenTiles, class Reader>
__device__ __forceinline__ void stream_through_ring(const GemmParams& p, int n0, int lane,
                                                    int first, int end, int blocks,
                                                    const WeightRing<kStages>& ring,
                                                    float (&acc)[kTokenTiles][4],
                                                    const Reader& first_tile,
                                                    const Reader& last_tile) {
  const int g = lane >> 2, t = lane & 3;
  for (int s = first; s < end; ++s) {
    ring.issue(p, n0, lane, s + kStages - 1, end, blocks);
    // All but the newest kStages - 1 groups are complete: stage s is, for this lane's copies;
    // the warp barrier makes every lane's copies visible to all.
    ptx::cp_async_wait<kStages - 1>();
    __syncwarp();
    ring.compute(acc, s, blocks, g, t, first_tile, last_tile);
    __syncwarp();  // the slot is read by every lane before the next issue overwrites it
  }
}

// Stores lane (g, t)'s accumulators of a 16-row tile of kTokenTiles * 8 tokens to `tile`
// ([row][token], fp32): the mma's (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1) per token
// tile.
template <int kTokenTiles>
__device__ __forceinline__ void store_fragment_tile(const float (&acc)[kTokenTiles][4], float* tile,
                                                    int g, int t) {
  constexpr int kTokens = 8 * kTokenTiles;
#pragma unroll
  for (int j = 0; j < kTokenTiles; ++j) {
    const int token = 8 * j + 2 * t;
    tile[g * kTokens + token] = acc[j][0];
    tile[g * kTokens + token + 1] = acc[j][1];
    tile[(g + 8) * kTokens + token] = acc[j][2];
    tile[(g + 8) * kTokens + token + 1] = acc[j][3];
  }
}

// Stores lane (g, t)'s accumulators of an 8-row tile (accumulate_block_in_order_b) of
// kTokenTiles * 8 tokens to `tile` ([row][token], fp32): (token g, row 2t), (g, 2t + 1), and
// with two token tiles (g + 8, 2t), (g + 8, 2t + 1).
template <int kTokenTiles>
__device__ __forceinline__ void store_fragment_tile_b(const float (&acc)[4], float* tile, int g,
                                                      int t) {
  constexpr int kTokens = 8 * kTokenTiles;
  tile[2 * t * kTokens + g] = acc[0];
  tile[(2 * t + 1) * kTokens + g] = acc[1];
  if constexpr (kTokenTiles == 2) {
    tile[2 * t * kTokens + g + 8] = acc[2];
    tile[(2 * t + 1) * kTokens + g + 8] = acc[3];
  }
}

// The k-parts streamer: parts [part_first, part_end) of `parts`, their 128-K chunks (ring
// stages, `chunks` in all) from stage `first` on, stages first .. first + kStages - 2 issued
// before the wait on the previous kernel. Each part is one chain from zero; its sum goes to
// tile `part` of `part_sums` ([part][row][token] of 8 rows and kTokenTiles * 8 tokens),
// where the CTA adds the parts in part order. kUnscaled: the chain runs in the scaled domain,
// starting in kDomainStart, moving with its blocks and leaving it before its sum is stored
// (exps_lo / exps_hi: the staged exponent rows of tokens g and g + 8); else on scale-folded bf16.
template <bool kUnscaled, int kStages, int kTokenTiles, class Reader>
__device__ __forceinline__ void stream_parts_through_ring(
    const GemmParams& p, int n0, int lane, int part_first, int part_end, int parts, int chunks,
    int blocks, const WeightRing<kStages, 8>& ring, float* part_sums, const std::uint8_t* exps_lo,
    const std::uint8_t* exps_hi, const Reader& first_tile, const Reader& last_tile) {
  constexpr int kTokens = 8 * kTokenTiles;
  const int g = lane >> 2, t = lane & 3;
  const int end = split_chunks(part_end, parts, chunks).begin;
  int s = split_chunks(part_first, parts, chunks).begin;
  for (int part = part_first; part < part_end; ++part) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    std::uint32_t domain[4] = {kDomainStart, kDomainStart, kDomainStart, kDomainStart};
    const int part_stop = split_chunks(part + 1, parts, chunks).begin;
    for (; s < part_stop; ++s) {
      ring.issue(p, n0, lane, s + kStages - 1, end, blocks);
      ptx::cp_async_wait<kStages - 1>();
      __syncwarp();
      if constexpr (kUnscaled) {
        ring.template compute_unscaled_b<kTokenTiles>(acc, domain, s, blocks, g, t, exps_lo,
                                                      exps_hi, first_tile, last_tile);
      } else {
        ring.template compute_in_order_b<kTokenTiles>(acc, s, blocks, g, t, first_tile, last_tile);
      }
      __syncwarp();
    }
    if constexpr (kUnscaled) {
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[c] = leave_domain(acc[c], domain[c]);
    }
    store_fragment_tile_b<kTokenTiles>(acc, part_sums + part * 8 * kTokens, g, t);
  }
}

}  // namespace mxlinear::device::gemv_detail
