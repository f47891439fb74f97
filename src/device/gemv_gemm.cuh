// The CUDA-core MX GEMV for the smallest M (1-2 tokens per CTA): at these sizes a layer is its
// weight bytes, and a tensor-core tile of 8+ tokens wastes its work while its per-stage chain
// (barriers, fences, waits) bounds the stream. HOPPER.md: the fixed cost is as large as the
// streaming time, so loads must be in flight from the first microsecond.
//
// Design:
// - kRows weight rows per warp (as many as tokens, so each activation value read from shared
//   memory serves kRows * kTokens products), 4 warps per CTA. Each lane streams 16-byte columns
//   of its rows (half an MX block; the two halves of block b sit in lanes 2q and 2q + 1 of the
//   same round); 16 columns per lane are in flight, 8 KiB per warp.
// - The CTA's tokens are widened once into shared memory as fp32 (e4m3 values, unscaled),
//   laid out so that a warp's 16-byte reads are consecutive (no bank conflicts), with their
//   block scales decoded to fp32.
// - Per column, row and token: 16 fp32 products summed in order; the block's partial is the
//   even half plus the odd half (one shuffle), promoted as acc += (partial * sa) * sw like the
//   other kernels; the lanes' sums meet in a fixed shuffle tree. Deterministic, no atomics.
// - The first round of weight loads is issued before waiting on the previous kernel (weights
//   are static), and the next kernel may launch once this one has its activations.
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

template <int kTokens_>
struct GemvTile {
  static constexpr int kTokens = kTokens_;  // activation rows per CTA
  static constexpr int kRows = kTokens_;    // weight rows per warp
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRowsPerCta = kRows * kWarps;
  // Per row and round: 16 columns in flight per lane (8 KiB per warp), so a row of K <= 8192
  // (t1; 4096 for t2) is one round: one memory round trip, issued before the activations are
  // staged. (8 per lane took two dependent round trips at K = 6144.)
  static constexpr int kColumnsPerLane = 16 / kRows;
  static constexpr int kRound = 32 * kColumnsPerLane;  // columns per row per round

  // [kTokens][K] fp32 activation values, then [kTokens][K/32] fp32 scales.
  static constexpr int smem_bytes(int k) { return kTokens * (k + k / kBlockSize) * 4; }

  static_assert(kTokens == 1 || kTokens == 2, "compiled GEMV widths");
};

namespace gemv_detail {

// 16 e4m3 bytes -> 16 floats (exact: every e4m3 value is a normal f16).
__device__ __forceinline__ void widen16(const uint4& bytes, float (&out)[16]) {
  const std::uint32_t words[4] = {bytes.x, bytes.y, bytes.z, bytes.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    std::uint32_t lo, hi;
    ptx::e4m3x4_to_f16x2x2(words[i], lo, hi);
    const float2 l = __half22float2(*reinterpret_cast<const __half2*>(&lo));
    const float2 h = __half22float2(*reinterpret_cast<const __half2*>(&hi));
    out[4 * i + 0] = l.x;
    out[4 * i + 1] = l.y;
    out[4 * i + 2] = h.x;
    out[4 * i + 3] = h.y;
  }
}

// The CTA's tokens into shared memory: values (unscaled) as float4 groups [t][q][c], where
// group q of 16-byte column c holds k = 16c + 4q .. 16c + 4q + 3 (so lanes reading consecutive
// columns read consecutive addresses), and scales [t][K/32]; tokens past M read as zeros with
// scale 0.
template <class Tile>
__device__ __forceinline__ void load_activations(const GemmParams& p, int t0, float4* values,
                                                 float* scales) {
  // Every load of a thread in flight before its first store: a plain loop waits out a memory
  // round trip per 4 bytes (12 of them per thread at K = 6144) before the first FMA.
  const int groups = p.k / 4, columns = p.k / 16;
  copy_in_batches<16>(
      Tile::kTokens, groups, static_cast<int>(threadIdx.x), Tile::kThreads,
      [&](int t, int g) {
        return t0 + t < p.m ? *reinterpret_cast<const std::uint32_t*>(
                                  p.a + static_cast<std::int64_t>(t0 + t) * p.ld_a + 4 * g)
                            : 0u;
      },
      [&](int t, int g, std::uint32_t x) {
        std::uint32_t lo, hi;
        ptx::e4m3x4_to_f16x2x2(x, lo, hi);
        const float2 l = __half22float2(*reinterpret_cast<const __half2*>(&lo));
        const float2 h = __half22float2(*reinterpret_cast<const __half2*>(&hi));
        values[t * groups + (g & 3) * columns + (g >> 2)] = make_float4(l.x, l.y, h.x, h.y);
      });
  const int blocks = p.k / kBlockSize;
  copy_in_batches<8>(
      Tile::kTokens, blocks, static_cast<int>(threadIdx.x), Tile::kThreads,
      [&](int t, int b) {
        return t0 + t < p.m ? mx::scale_from_byte(
                                  p.a_scales[static_cast<std::int64_t>(t0 + t) * p.ld_a_scales + b])
                            : 0.0f;
      },
      [&](int t, int b, float s) { scales[t * blocks + b] = s; });
}

// The CTA's tokens quantized from p.x (bf16 or fp16) the way the quantize kernel does it
// (RCEIL; the same amax, scale and rounding, so the same bytes), then stored like
// load_activations stores them. One thread per 32-element block.
template <class Tile>
__device__ __forceinline__ void quantize_activations(const GemmParams& p, int t0, float4* values,
                                                     float* scales) {
  const int blocks = p.k / kBlockSize, columns = p.k / 16, groups = p.k / 4;
  for (int e = static_cast<int>(threadIdx.x); e < Tile::kTokens * blocks; e += Tile::kThreads) {
    const int t = e / blocks, b = e % blocks;
    const bool token = t0 + t < p.m;
    float v[kBlockSize];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint4 raw = make_uint4(0, 0, 0, 0);
      if (token) {
        raw = __ldg(reinterpret_cast<const uint4*>(static_cast<const std::uint16_t*>(p.x) +
                                                   static_cast<std::int64_t>(t0 + t) * p.ld_x +
                                                   kBlockSize * b) +
                    i);
      }
      const std::uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float2 f;
        if (p.x_is_f16) {
          f = __half22float2(*reinterpret_cast<const __half2*>(&words[j]));
        } else {
          f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[j]));
        }
        v[8 * i + 2 * j] = f.x;
        v[8 * i + 2 * j + 1] = f.y;
      }
    }
    float amax = 0.0f;
    bool non_finite = false;
#pragma unroll
    for (int i = 0; i < kBlockSize; ++i) {
      non_finite |= !isfinite(v[i]);
      amax = fmaxf(amax, fabsf(v[i]));
    }
    std::uint8_t scale = 0;
    std::uint32_t bytes[8];
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      scale = mx::quantize_eight(reinterpret_cast<const float(&)[8]>(v[8 * g]), amax, non_finite,
                                 ScaleRule::kRceil,
                                 reinterpret_cast<std::uint32_t(&)[2]>(bytes[2 * g]));
    }
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      std::uint32_t lo, hi;
      ptx::e4m3x4_to_f16x2x2(bytes[w], lo, hi);
      const float2 l = __half22float2(*reinterpret_cast<const __half2*>(&lo));
      const float2 h = __half22float2(*reinterpret_cast<const __half2*>(&hi));
      const int g = 8 * b + w;  // k = 4g .. 4g + 3
      values[t * groups + (g & 3) * columns + (g >> 2)] =
          token ? make_float4(l.x, l.y, h.x, h.y) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    scales[t * blocks + b] = token ? mx::scale_from_byte(scale) : 0.0f;
  }
}

}  // namespace gemv_detail

// Grid: x = groups of kRowsPerCta weight rows, y = token tiles of kTokens.
template <class Tile>
__global__ void __launch_bounds__(Tile::kThreads) gemv_gemm_kernel(const GemmParams p) {
  using namespace gemv_detail;
  extern __shared__ float4 smem_f4[];
  float4* const values = smem_f4;
  float* const a_scales = reinterpret_cast<float*>(smem_f4 + Tile::kTokens * (p.k / 4));
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int n0 = (static_cast<int>(blockIdx.x) * Tile::kWarps + warp) * Tile::kRows;
  const int t0 = static_cast<int>(blockIdx.y) * Tile::kTokens;
  const int columns = p.k / 16;
  const std::uint8_t* w_rows[Tile::kRows];
  const std::uint8_t* sw_rows[Tile::kRows];
#pragma unroll
  for (int r = 0; r < Tile::kRows; ++r) {
    const std::int64_t n = n0 + r < p.n ? n0 + r : 0;
    w_rows[r] = p.w + n * p.ld_w;
    sw_rows[r] = p.w_scales + n * p.ld_w_scales;
  }

  // One round of this lane's weight columns base + lane + 32 i of every row, zeros past the
  // row or past N.
  uint4 w[Tile::kRows][Tile::kColumnsPerLane];
  std::uint8_t sw[Tile::kRows][Tile::kColumnsPerLane];
  auto load_round = [&](int base) {
#pragma unroll
    for (int r = 0; r < Tile::kRows; ++r) {
#pragma unroll
      for (int i = 0; i < Tile::kColumnsPerLane; ++i) {
        const int c = base + lane + 32 * i;
        const bool valid = n0 + r < p.n && c < columns;
        w[r][i] =
            valid ? __ldg(reinterpret_cast<const uint4*>(w_rows[r]) + c) : make_uint4(0, 0, 0, 0);
        sw[r][i] = valid ? sw_rows[r][c >> 1] : std::uint8_t{0};
      }
    }
  };
  load_round(0);  // static weights: in flight while the previous kernel finishes
  hopper::wait_prerequisite_grids();
  if (p.x != nullptr) {
    quantize_activations<Tile>(p, t0, values, a_scales);
  } else {
    load_activations<Tile>(p, t0, values, a_scales);
  }
  __syncthreads();
  hopper::allow_dependent_launch();

  float acc[Tile::kRows][Tile::kTokens];
#pragma unroll
  for (int r = 0; r < Tile::kRows; ++r) {
#pragma unroll
    for (int t = 0; t < Tile::kTokens; ++t) acc[r][t] = 0.0f;
  }
  const int groups = p.k / 4, blocks = p.k / kBlockSize;
  for (int base = 0; base < columns; base += Tile::kRound) {
    if (base > 0) load_round(base);
#pragma unroll
    for (int i = 0; i < Tile::kColumnsPerLane; ++i) {
      const int c = base + lane + 32 * i;  // c and c ^ 1 (the neighbour lane) share block c / 2
      const bool column_valid = c < columns;
      float partial[Tile::kRows][Tile::kTokens];
#pragma unroll
      for (int r = 0; r < Tile::kRows; ++r) {
#pragma unroll
        for (int t = 0; t < Tile::kTokens; ++t) partial[r][t] = 0.0f;
      }
      if (column_valid) {
        float wf[Tile::kRows][16];
#pragma unroll
        for (int r = 0; r < Tile::kRows; ++r) widen16(w[r][i], wf[r]);
#pragma unroll
        for (int t = 0; t < Tile::kTokens; ++t) {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const float4 v = values[t * groups + q * columns + c];
#pragma unroll
            for (int r = 0; r < Tile::kRows; ++r) {
              partial[r][t] = fmaf(wf[r][4 * q + 0], v.x, partial[r][t]);
              partial[r][t] = fmaf(wf[r][4 * q + 1], v.y, partial[r][t]);
              partial[r][t] = fmaf(wf[r][4 * q + 2], v.z, partial[r][t]);
              partial[r][t] = fmaf(wf[r][4 * q + 3], v.w, partial[r][t]);
            }
          }
        }
      }
#pragma unroll
      for (int r = 0; r < Tile::kRows; ++r) {
#pragma unroll
        for (int t = 0; t < Tile::kTokens; ++t) {
          partial[r][t] += __shfl_xor_sync(0xFFFFFFFFu, partial[r][t], 1);
        }
      }
      if ((lane & 1) == 0 && column_valid) {
#pragma unroll
        for (int r = 0; r < Tile::kRows; ++r) {
          const float s = mx::scale_from_byte(sw[r][i]);
#pragma unroll
          for (int t = 0; t < Tile::kTokens; ++t) {
            acc[r][t] = fmaf(partial[r][t] * a_scales[t * blocks + (c >> 1)], s, acc[r][t]);
          }
        }
      }
    }
  }
  // The lanes' block sums in a fixed tree (odd lanes hold zeros).
#pragma unroll
  for (int r = 0; r < Tile::kRows; ++r) {
#pragma unroll
    for (int t = 0; t < Tile::kTokens; ++t) {
#pragma unroll
      for (int offset = 16; offset >= 1; offset >>= 1) {
        acc[r][t] += __shfl_xor_sync(0xFFFFFFFFu, acc[r][t], offset);
      }
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < Tile::kRows; ++r) {
      const int n = n0 + r;
      if (n >= p.n) continue;
#pragma unroll
      for (int t = 0; t < Tile::kTokens; ++t) {
        if (t0 + t >= p.m) continue;
        const float v =
            p.bias_type != BiasType::kNone ? acc[r][t] + epilogue::load_bias(p, n) : acc[r][t];
        epilogue::store_one(p, t0 + t, n, v);
      }
    }
  }
}

}  // namespace mxlinear::device
