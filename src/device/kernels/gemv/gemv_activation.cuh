// The GEMV's activation tile in shared memory: the CTA's tokens staged once (copied from the
// pre-quantized activation, quantized from bf16/fp16 with the quantize kernel's helpers, or, in
// W8A16, copied as the 16-bit values they are), and the per-lane readers of its mma fragments.
// Device code only.
#pragma once

#include <cstdint>

#include "device/common/gemm_params.hpp"
#include "device/common/grid_walk.hpp"
#include "device/common/mx_convert.cuh"
#include "device/ptx/ptx.cuh"
#include "mxlinear/format.hpp"
#include "mxlinear/linear_types.hpp"

namespace mxlinear::device {}  // namespace mxlinear::device

namespace mxlinear::device::gemv_detail {

// The staged activation: `tokens` rows of K e4m3 bytes and of K/32 scales (fp32), or (W8A16) of
// K 16-bit values and no scales, `stride` bytes apart, of which blocks [first_block, end_block)
// are filled: a CTA of a K split stages only its own range, at the same offsets.
struct StagedActivation {
  std::uint8_t* values;
  float* scales;
  int stride, blocks, tokens;
  int first_block, end_block;
  // The scaled domain (scaled_domain below): a byte per token and block, `exp_stride` apart.
  std::uint8_t* exps = nullptr;
  int exp_stride = 0;
};

// The scaled domain of the k-parts tiles. A part's chain there multiplies the operands without
// their scales (e4m3 -> f16, exactly; in W8A16 each bf16 x block divided by a power of two 2^c
// into f16, exactly where the block allows) and keeps the accumulator divided by 2^(e_a + e_w)
// (c for e_a in W8A16), the block's exponents, multiplying it by 2^(old - new) where they change:
// every value the chain holds is the scaled chain's divided by a power of two, so where nothing
// is subnormal and nothing overflows in either, f16 mma.sync gives the bf16 chain's bits divided
// by it (checked on the H200 over random operands and scales across the window), with a quarter
// of the widening's instructions. Sufficient: e_a (or c) and e_w in [-30, 10] (scale bytes
// 97 .. 137). Every value a chain holds is a multiple of its products' grid (an mma rounds to no
// finer grid), which is then >= 2^-93 in the scaled chain and >= 2^-113 in the unscaled one
// (W8A8: 2^-78 and 2^-98), so neither is ever subnormal, and for K < 2^20 neither gets near
// 2^128. A CTA whose activation or weight scales leave the window runs the scaled chain instead.
namespace scaled_domain {
inline constexpr std::uint32_t kLowByte = 97;  // the scale byte of 2^-30
inline constexpr std::uint32_t kSpan = 40;     // .. 2^10

// The exponent byte of an x block of zeros (any byte of the window would do).
inline constexpr std::uint32_t kZeroBlockByte = 30;

__device__ __forceinline__ bool in_window(std::uint32_t scale_byte) {
  return scale_byte - kLowByte <= kSpan;
}
}  // namespace scaled_domain

// Copies the CTA's pre-quantized tokens into shared memory, every load of a batch in flight
// before its first store: 16-byte words where the rows allow, else 4-byte ones (4-byte aligned
// rows).
template <int kThreads, class Word>
__device__ __forceinline__ void copy_rows(const GemmParams& p, int t0, const StagedActivation& s) {
  constexpr int kBytes = sizeof(Word);
  constexpr int kWordsPerBlock = kBlockSize / kBytes;
  const int w0 = s.first_block * kWordsPerBlock;
  // 32 bytes of a batch in registers: the first round of weights is in flight meanwhile (64
  // bytes took the ring configs from 64 to 86 registers).
  copy_in_batches<32 / kBytes>(
      s.tokens, (s.end_block - s.first_block) * kWordsPerBlock, static_cast<int>(threadIdx.x),
      kThreads,
      [&](int t, int w) {
        return *reinterpret_cast<const Word*>(p.a + static_cast<std::int64_t>(t0 + t) * p.ld_a +
                                              kBytes * (w0 + w));
      },
      [&](int t, int w, Word v) {
        *reinterpret_cast<Word*>(s.values + t * s.stride + kBytes * (w0 + w)) = v;
      });
}

// kScalesFirst: the first batch of scale loads goes out before the rows' words, so one round
// trip after the wait on the previous kernel serves both (~0.2 us a call where the weights are
// in flight through the ring; where they are in flight in registers, the register streamer's 128
// were better spent as before).
template <int kThreads, bool kScalesFirst>
__device__ __forceinline__ void copy_activations(const GemmParams& p, int t0,
                                                 const StagedActivation& s) {
  const int b0 = s.first_block;
  if (s.end_block <= b0) return;  // a split with no K range (K shorter than its splits)
  const auto copy_values = [&] {
    const bool wide = reinterpret_cast<std::uintptr_t>(p.a) % 16 == 0 &&
                      (p.m <= 1 || p.ld_a % 16 == 0) && p.k % 16 == 0;
    if (wide) {
      copy_rows<kThreads, uint4>(p, t0, s);
    } else {
      copy_rows<kThreads, std::uint32_t>(p, t0, s);
    }
  };
  const auto load_scale = [&](int t, int b) {
    return p.a_scales[static_cast<std::int64_t>(t0 + t) * p.ld_a_scales + b0 + b];
  };
  const auto store_scale = [&](int t, int b, std::uint8_t v) {
    s.scales[t * s.blocks + b0 + b] = mx::scale_from_byte(v);
  };
  const int tid = static_cast<int>(threadIdx.x);
  if constexpr (kScalesFirst) {
    copy_in_batches<4>(s.tokens, s.end_block - b0, tid, kThreads, load_scale, store_scale,
                       copy_values);
  } else {
    copy_values();
    copy_in_batches<4>(s.tokens, s.end_block - b0, tid, kThreads, load_scale, store_scale);
  }
}

// W8A16 staging: within each block's 64 bytes of a staged row, the 8 values lane (g, t) reads
// (positions 8t .. 8t + 7) are split into halves, one per k16 step: positions 8t .. 8t + 3 at
// byte 8t, 8t + 4 .. 8t + 7 at byte 32 + 8t. Each half is then one 8-byte read that 4 lanes of a
// row take as 32 contiguous bytes (two wavefronts a warp with rows 32 bytes past a multiple of
// 128 apart), and the two halves of a block feed different mma, so the register streamer's
// schedule does not hold all 16 bytes of four blocks at once (one 16-byte read did, and spilled).
__device__ __forceinline__ constexpr int x16_half_offset(int t, int half) {
  return 32 * half + 8 * t;
}

// Stores a staged quarter's 8 values as 16-bit words h (positions 2i, 2i + 1 in h[i]) in the
// layout above, block q / 4 of `values`.
__device__ __forceinline__ void store_quarter16(std::uint8_t* values, int q,
                                                const std::uint32_t (&h)[4]) {
  std::uint8_t* const block = values + 2 * kBlockSize * (q >> 2);
  *reinterpret_cast<uint2*>(block + x16_half_offset(q & 3, 0)) = make_uint2(h[0], h[1]);
  *reinterpret_cast<uint2*>(block + x16_half_offset(q & 3, 1)) = make_uint2(h[2], h[3]);
}

// Stores positions 8q .. 8q + 7 of block b of staged row `token` dequantized to bf16 (their e4m3
// bytes, low position first, times the block's scale), in the 16-bit layout above: what the
// prefill kernel's activation pass writes for them (mx::e4m3x4_scaled_to_bf16x2x2).
__device__ __forceinline__ void store_dequantized(const StagedActivation& s, int token, int b,
                                                  int q, std::uint32_t lo4, std::uint32_t hi4,
                                                  std::uint8_t scale_byte) {
  const float scale = mx::scale_from_byte(scale_byte);
  std::uint32_t w[4];
  mx::e4m3x4_scaled_to_bf16x2x2(lo4, scale, w[0], w[1]);
  mx::e4m3x4_scaled_to_bf16x2x2(hi4, scale, w[2], w[3]);
  store_quarter16(s.values + token * s.stride, 4 * b + q, w);
}

// A quarter of an MX block (its 8 bf16 or fp16 values in raw, the lowest k in the low half of
// raw.x) quantized as the quantize kernel quantizes it (RCEIL, mx::quantize_values): its e4m3
// codes, its block's scale byte, and whether the block is all zeros. Four lanes per block (4i ..
// 4i + 3); every lane of the warp must call it (the block's extent is shuffled).
struct QuantizedQuarter {
  std::uint32_t codes[2];
  std::uint8_t scale;
  bool zeros;
};
__device__ __forceinline__ QuantizedQuarter quantize_quarter(const uint4& raw, bool is_f16) {
  float v[8];
  mx::widen_eight(raw, is_f16, v);
  const mx::BlockExtent extent = mx::block_extent_of_four_lanes(v);
  QuantizedQuarter q;
  q.scale = mx::quantize_values(v, extent.amax, extent.non_finite, ScaleRule::kRceil, q.codes);
  q.zeros = extent.amax == 0.0f && !extent.non_finite;
  return q;
}

// Quantizes the CTA's tokens from p.x (bf16 or fp16, 16-byte aligned rows) into shared memory
// with RCEIL through mx::quantize_values, as the quantize kernel does: the same bytes. Four
// lanes per MX block, 8 values each (mx::block_extent_of_four_lanes), so the weights already in
// flight keep their registers. kDequantized: the quantized values are staged dequantized to
// bf16 (store_dequantized) instead of as e4m3 bytes and scales.
template <int kThreads, bool kDequantized = false>
__device__ __forceinline__ void quantize_activations(const GemmParams& p, int t0,
                                                     const StagedActivation& s) {
  const int range = s.end_block - s.first_block;
  if (range <= 0) return;  // a split with no K range
  const int quarters = s.tokens * range * 4;
  // Every lane runs every iteration: the extent's shuffles need the whole warp.
  for (int e0 = 0; e0 < quarters; e0 += kThreads) {
    const int e = e0 + static_cast<int>(threadIdx.x);
    const bool valid = e < quarters;  // whole groups of four lanes
    const int t = valid ? e / (4 * range) : 0, b = s.first_block + (e >> 2) % range, q = e & 3;
    uint4 raw = make_uint4(0u, 0u, 0u, 0u);
    if (valid) {
      raw = __ldg(reinterpret_cast<const uint4*>(static_cast<const std::uint16_t*>(p.x) +
                                                 static_cast<std::int64_t>(t0 + t) * p.ld_x +
                                                 kBlockSize * b + 8 * q));
    }
    const QuantizedQuarter quarter = quantize_quarter(raw, p.x_is_f16);
    if (valid) {
      if constexpr (kDequantized) {
        store_dequantized(s, t, b, q, quarter.codes[0], quarter.codes[1], quarter.scale);
      } else {
        *reinterpret_cast<uint2*>(s.values + t * s.stride + kBlockSize * b + 8 * q) =
            make_uint2(quarter.codes[0], quarter.codes[1]);
        if (q == 0) s.scales[t * s.blocks + b] = mx::scale_from_byte(quarter.scale);
      }
    }
  }
}

// Stages the CTA's pre-quantized tokens (e4m3 rows 4-byte aligned, E8M0 scales) dequantized to
// bf16 (store_dequantized): a thread per 8 positions of a block, two 4-byte loads and the scale.
template <int kThreads>
__device__ __forceinline__ void dequantize_activations(const GemmParams& p, int t0,
                                                       const StagedActivation& s) {
  const int range = s.end_block - s.first_block;
  const int quarters = s.tokens * range * 4;
  for (int e = static_cast<int>(threadIdx.x); e < quarters; e += kThreads) {
    const int t = e / (4 * range), b = s.first_block + (e >> 2) % range, q = e & 3;
    const std::int64_t row = t0 + t;
    const auto* const words =
        reinterpret_cast<const std::uint32_t*>(p.a + row * p.ld_a + kBlockSize * b + 8 * q);
    store_dequantized(s, t, b, q, words[0], words[1], p.a_scales[row * p.ld_a_scales + b]);
  }
}

// The scaled domain's staging walk: the CTA's tokens a quarter of a block (8 values) per thread,
// a token at a time, each thread's loads of up to kStageBatch quarters out before any is used:
// one round trip a token at K <= 6144 with 128 threads (a quarter at a time waited one out each),
// and no division (walks over tokens and quarters at once, a division or a carry a quarter, cost
// up to 2 us at M = 1 where six CTAs an SM each stage K). load(t, q) reads quarter q of staged
// token t; stage(raw, h, exp) makes of it h, its unscaled f16 values, and exp, its block's byte
// of s.exps, and returns false where the block cannot be staged so. Every lane of the warp calls
// stage for every quarter of a batch (its shuffles may span the four lanes of a block; lanes past
// the range get zeros and store nothing): kThreads is a multiple of 32 and a batch's quarters are
// whole blocks per warp. Returns false where any block this thread staged was refused. More in
// flight took the 8-row tiles past the 80 registers that six CTAs an SM allow.
inline constexpr int kStageBatch = 6;

template <int kThreads, class Load, class Stage>
__device__ __forceinline__ bool stage_unscaled(const StagedActivation& s, const Load& load,
                                               const Stage& stage) {
  const int quarters = (s.end_block - s.first_block) * 4;
  const int tid = static_cast<int>(threadIdx.x);
  bool ok = true;
  for (int t = 0; t < s.tokens; ++t) {
    std::uint8_t* const values = s.values + t * s.stride + 2 * kBlockSize * s.first_block;
    std::uint8_t* const exps = s.exps + t * s.exp_stride + s.first_block;
    for (int q0 = 0; q0 < quarters; q0 += kStageBatch * kThreads) {
      uint4 raw[kStageBatch];
#pragma unroll
      for (int i = 0; i < kStageBatch; ++i) {
        const int q = q0 + i * kThreads + tid;
        raw[i] = q < quarters ? load(t, q) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int i = 0; i < kStageBatch; ++i) {
        if (q0 + i * kThreads >= quarters) break;  // CTA-uniform
        const int q = q0 + i * kThreads + tid;
        std::uint32_t h[4];
        std::uint32_t exp = 0;
        const bool staged = stage(raw[i], h, exp);
        if (q >= quarters) continue;
        store_quarter16(values, q, h);
        ok = ok && staged;
        if ((q & 3) == 0) exps[q >> 2] = static_cast<std::uint8_t>(exp);
      }
    }
  }
  return ok;
}

// The scaled domain, W8A8: the CTA's pre-quantized tokens as f16 without their scales, in the
// 16-bit layout above, and each block's scale byte less kLowByte in s.exps. Returns false where
// a scale this thread read leaves the window. stage_unscaled's walk, each quarter's two words and
// scale loaded only where it exists (through stage_unscaled itself, the 8-row tiles' main loop
// was scheduled otherwise and ran 2% slower at M = 1 on 10240 x 5120).
template <int kThreads>
__device__ __forceinline__ bool stage_unscaled_mx(const GemmParams& p, int t0,
                                                  const StagedActivation& s) {
  const int quarters = (s.end_block - s.first_block) * 4;
  const int tid = static_cast<int>(threadIdx.x);
  bool ok = true;
  for (int t = 0; t < s.tokens; ++t) {
    const std::int64_t row = t0 + t;
    const std::uint8_t* const codes = p.a + row * p.ld_a + kBlockSize * s.first_block;
    const std::uint8_t* const scales = p.a_scales + row * p.ld_a_scales + s.first_block;
    std::uint8_t* const values = s.values + t * s.stride + 2 * kBlockSize * s.first_block;
    std::uint8_t* const exps = s.exps + t * s.exp_stride + s.first_block;
    for (int q0 = tid; q0 < quarters; q0 += kStageBatch * kThreads) {
      std::uint32_t lo[kStageBatch], hi[kStageBatch], scale[kStageBatch];
#pragma unroll
      for (int i = 0; i < kStageBatch; ++i) {
        const int q = q0 + i * kThreads;
        if (q < quarters) {
          const auto* const words = reinterpret_cast<const std::uint32_t*>(codes + 8 * q);
          lo[i] = words[0];
          hi[i] = words[1];
          scale[i] = scales[q >> 2];
        }
      }
#pragma unroll
      for (int i = 0; i < kStageBatch; ++i) {
        const int q = q0 + i * kThreads;
        if (q >= quarters) break;
        std::uint32_t h[4];
        ptx::e4m3x4_to_f16x2x2(lo[i], h[0], h[1]);
        ptx::e4m3x4_to_f16x2x2(hi[i], h[2], h[3]);
        store_quarter16(values, q, h);
        ok = ok && scaled_domain::in_window(scale[i]);
        if ((q & 3) == 0) {
          exps[q >> 2] = static_cast<std::uint8_t>(scale[i] - scaled_domain::kLowByte);
        }
      }
    }
  }
  return ok;
}

// The 16-bit x (p.x) for stage_unscaled: quarter q of token t as one 16-byte load.
__device__ __forceinline__ auto x16_quarter_loader(const GemmParams& p, int t0,
                                                   const StagedActivation& s) {
  return [&p, t0, first = s.first_block](int t, int q) {
    const auto* const x = static_cast<const std::uint16_t*>(p.x);
    return __ldg(reinterpret_cast<const uint4*>(x + static_cast<std::int64_t>(t0 + t) * p.ld_x +
                                                kBlockSize * first + 8 * q));
  };
}

// The scaled domain, W8A16 (bf16 x): each block of a staged token divided by 2^c, c = its
// largest exponent less 15, as f16 (below 2^16), and c + 30 in s.exps. Exact where every
// non-zero value of the block is within 32 binades of the largest (an f16 keeps 8 significant
// bits down to 2^-17); a block of zeros takes c = 0. Returns false where a block this thread
// staged is not exact so, holds Inf or NaN, or has c outside [-30, 10].
template <int kThreads>
__device__ __forceinline__ bool stage_unscaled_x(const GemmParams& p, int t0,
                                                 const StagedActivation& s) {
  return stage_unscaled<kThreads>(
      s, x16_quarter_loader(p, t0, s),
      [](const uint4& raw, std::uint32_t(&h)[4], std::uint32_t& exp) {
        const std::uint32_t pairs[4] = {raw.x, raw.y, raw.z, raw.w};
        // The largest magnitude, and the smallest non-zero one as m - 1 (a zero becomes
        // 0xFFFF), two 16-bit halves at a time.
        std::uint32_t top = 0, bottom = 0xFFFFFFFFu;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const std::uint32_t m = pairs[j] & 0x7FFF7FFFu;
          top = ptx::max_u16x2(top, m);
          bottom = ptx::min_u16x2(bottom, (m + 0x7FFF7FFFu) ^ 0x80008000u);
        }
        top = max(top >> 16, top & 0xFFFFu);
        bottom = min(bottom >> 16, bottom & 0xFFFFu);
#pragma unroll
        for (int offset = 1; offset < 4; offset <<= 1) {
          top = max(top, __shfl_xor_sync(0xFFFFFFFFu, top, offset));
          bottom = min(bottom, __shfl_xor_sync(0xFFFFFFFFu, bottom, offset));
        }
        // Exponent fields: c = top_e - 127 - 15; the byte c + 30 = top_e - 112 lies in [0, 40].
        const bool zeros = bottom == 0xFFFFu;
        const std::uint32_t top_e = top >> 7, bottom_e = (bottom + 1) >> 7;
        const float divide = __uint_as_float((zeros ? 127u : 269u - top_e) << 23);  // 2^-c
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pairs[j]));
          const __half2 v = __floats2half2_rn(f.x * divide, f.y * divide);
          h[j] = *reinterpret_cast<const std::uint32_t*>(&v);
        }
        exp = zeros ? scaled_domain::kZeroBlockByte : top_e - 112u;
        return zeros || (top_e - 112u <= scaled_domain::kSpan && bottom_e + 32u >= top_e);
      });
}

// The scaled domain, W8A8 from the 16-bit x: each block quantized as the quantize kernel does
// (RCEIL, mx::quantize_values: the same e4m3 codes and scale), staged as stage_unscaled_mx
// stages the quantize kernel's output; a block of zeros (whose scale, 2^-127, lies outside the
// window) takes the exponent byte of 2^0, as any would do for it. Returns false where a block
// this thread staged holds Inf or NaN or has its scale outside the window.
template <int kThreads>
__device__ __forceinline__ bool stage_unscaled_quantized(const GemmParams& p, int t0,
                                                         const StagedActivation& s) {
  return stage_unscaled<kThreads>(
      s, x16_quarter_loader(p, t0, s),
      [&](const uint4& raw, std::uint32_t(&h)[4], std::uint32_t& exp) {
        const QuantizedQuarter quarter = quantize_quarter(raw, p.x_is_f16);
        ptx::e4m3x4_to_f16x2x2(quarter.codes[0], h[0], h[1]);
        ptx::e4m3x4_to_f16x2x2(quarter.codes[1], h[2], h[3]);
        exp = quarter.zeros ? scaled_domain::kZeroBlockByte
                            : std::uint32_t{quarter.scale} - scaled_domain::kLowByte;
        return quarter.zeros || scaled_domain::in_window(quarter.scale);
      });
}

// W8A16: copies the CTA's bf16 or fp16 tokens as they are into shared memory, from 16-byte words
// of 8 values (the host guarantees 16-byte aligned rows, base and stride), no scales, in the
// layout above. Batches of two words per thread, as copy_rows, so the weights in flight keep
// their registers.
template <int kThreads>
__device__ __forceinline__ void copy_x_rows(const GemmParams& p, int t0,
                                            const StagedActivation& s) {
  constexpr int kValuesPerWord = 8;
  constexpr int kWordsPerBlock = kBlockSize / kValuesPerWord;
  if (s.end_block <= s.first_block) return;  // a split with no K range
  const int w0 = s.first_block * kWordsPerBlock;
  const auto* const x = static_cast<const std::uint16_t*>(p.x);
  copy_in_batches<2>(
      s.tokens, (s.end_block - s.first_block) * kWordsPerBlock, static_cast<int>(threadIdx.x),
      kThreads,
      [&](int t, int w) {
        return *reinterpret_cast<const uint4*>(x + static_cast<std::int64_t>(t0 + t) * p.ld_x +
                                               kValuesPerWord * (w0 + w));
      },
      [&](int t, int w, uint4 v) {
        const int word = w0 + w;  // word % 4 is the lane column t of its 8 values
        std::uint8_t* const block = s.values + t * s.stride + 2 * kBlockSize * (word / 4);
        *reinterpret_cast<uint2*>(block + x16_half_offset(word % 4, 0)) = make_uint2(v.x, v.y);
        *reinterpret_cast<uint2*>(block + x16_half_offset(word % 4, 1)) = make_uint2(v.z, v.w);
      });
}

// Where lane (g, t) reads token tile `tile` of the staged activation: its fragment row (token g
// of the tile) and the scale rows of tokens 2t and 2t + 1. Tokens past the staged rows read the
// last staged one: the mma keeps each token's column apart, and those columns are never stored.
struct ActivationReader {
  static constexpr ActivationOperand kOperand = ActivationOperand::kMx;
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

// ActivationReader for W8A16: lane (g, t) reads the same positions 8t .. 8t + 7 of block b, as
// 16-bit values in two 8-byte halves (x16_half_offset). Word i holds positions 8t + 2i (low half)
// and 8t + 2i + 1 (high half), as e4m3x4_to_f16x2x2 places them in frag[i] for W8A8, so it is the
// fragment as it is and both sides of each k16 step pair the same k. No scales: x is used as it
// is.
template <ActivationOperand kX>
struct X16Reader {
  static_assert(kX == ActivationOperand::kBf16 || kX == ActivationOperand::kF16,
                "a 16-bit activation");
  static constexpr ActivationOperand kOperand = kX;
  const std::uint8_t* values;

  __device__ __forceinline__ X16Reader(const StagedActivation& s, int tile, int g, int t)
      : values(s.values + min(8 * tile + g, s.tokens - 1) * s.stride + x16_half_offset(t, 0)) {}

  __device__ __forceinline__ void fragments(int b, std::uint32_t (&frag)[4]) const {
    const std::uint8_t* const block = values + 2 * kBlockSize * b;
    const uint2 step0 = *reinterpret_cast<const uint2*>(block);
    const uint2 step1 = *reinterpret_cast<const uint2*>(block + x16_half_offset(0, 1));
    frag[0] = step0.x;
    frag[1] = step0.y;
    frag[2] = step1.x;
    frag[3] = step1.y;
  }
};

}  // namespace mxlinear::device::gemv_detail
