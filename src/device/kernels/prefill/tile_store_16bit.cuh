// A CTA's whole output tile in a 16-bit output type, stored from the wgmma accumulators: the
// bias added and each value rounded once in registers, the tile staged in shared memory by
// stmatrix in the output's own layout (token-major, 16-bit), then stored 16 bytes a thread.
// Against the fp32 staging (write_accumulator_tile, then store_whole_tile), a thread of a
// 128-token tile issues 8 stmatrix instead of 64 scalar shared stores and reads back half the
// bytes. The same values as the fp32 path: fp32 sum + bias, one rounding.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "device/common/epilogue.cuh"
#include "device/common/gemm_params.hpp"
#include "device/kernels/prefill/tile16_layout.hpp"
#include "device/ptx/hopper_ptx.cuh"

namespace mxlinear::device {

// Whether the tile at (n0, t0) takes this path: a 16-bit output whose rows all start 16-byte
// aligned, and the tile wholly inside it.
template <class Layout>
__device__ __forceinline__ bool takes_16bit_tile_store(const GemmParams& p, int n0, int t0) {
  return p.out_type != OutType::kF32 && epilogue::rows_16_byte_aligned(p) &&
         t0 + Layout::kTokens <= p.m && n0 + Layout::kRows <= p.n;
}

namespace tile_16bit_detail {

template <class T>
__device__ __forceinline__ std::uint32_t packed(float lo, float hi) {
  const typename epilogue::OutputTraits<T>::Pair pair = epilogue::OutputTraits<T>::two(lo, hi);
  std::uint32_t bits;
  std::memcpy(&bits, &pair, 4);
  return bits;
}

// One warpgroup's 64 rows (row_base .. row_base + 63 of the tile) into the staged tile at
// `tile` (shared-window address). acc is wgmma's m64nN fragment: register i holds row
// 16 warp + lane / 4 + 8 ((i / 2) % 2), token 8 (i / 4) + 2 (lane % 4) + i % 2.
template <class T, class Layout>
__device__ __forceinline__ void stage(std::uint32_t tile, const float (&acc)[Layout::kTokens / 2],
                                      const GemmParams& p, int n0, int row_base) {
  const int warp = (static_cast<int>(threadIdx.x) % 128) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int row = row_base + 16 * warp + (lane >> 2);
  // Without a bias nothing is added: acc + 0 would turn -0 into +0.
  const bool has_bias = p.bias_type != BiasType::kNone;
  const float bias0 = has_bias ? epilogue::load_bias(p, n0 + row) : 0.0f;
  const float bias8 = has_bias ? epilogue::load_bias(p, n0 + row + 8) : 0.0f;
  auto pair = [&](int i, float bias) {
    return has_bias ? packed<T>(acc[i] + bias, acc[i + 1] + bias) : packed<T>(acc[i], acc[i + 1]);
  };
  const std::uint32_t address =
      tile + static_cast<std::uint32_t>(Layout::stmatrix_row_offset(warp, lane, row_base));
#pragma unroll
  for (int j = 0; j < Layout::kTokens / 8; j += 2) {
    hopper::stmatrix_x4_trans(
        address + static_cast<std::uint32_t>(8 * j * Layout::kStrideBytes),
        pair(Layout::accumulator_of(j, 0), bias0), pair(Layout::accumulator_of(j, 1), bias8),
        pair(Layout::accumulator_of(j, 2), bias0), pair(Layout::accumulator_of(j, 3), bias8));
  }
}

}  // namespace tile_16bit_detail

// Every consumer warpgroup stages its rows (64 * warpgroup on); a barrier over the consumer
// threads must follow before store_16bit_tile.
template <class Layout>
__device__ __forceinline__ void stage_16bit_tile(std::uint32_t tile,
                                                 const float (&acc)[Layout::kTokens / 2],
                                                 const GemmParams& p, int n0, int row_base) {
  if (p.out_type == OutType::kBF16) {
    tile_16bit_detail::stage<__nv_bfloat16, Layout>(tile, acc, p, n0, row_base);
  } else {
    tile_16bit_detail::stage<__half, Layout>(tile, acc, p, n0, row_base);
  }
}

// The staged tile to the output, as straight-line code: a token's kRows values are 2 kRows
// contiguous bytes of its output row, 16 bytes a thread and step.
template <class Layout, int kThreads>
__device__ __forceinline__ void store_16bit_tile(const GemmParams& p, const std::uint8_t* tile,
                                                 int n0, int t0, int tid) {
  constexpr int kPieces = Layout::kRows / 8;  // 16-byte pieces a token
  static_assert(kThreads % kPieces == 0 && Layout::kTokens % (kThreads / kPieces) == 0,
                "whole steps");
  constexpr int kTokensPerStep = kThreads / kPieces;
  const int piece = tid % kPieces, first_token = tid / kPieces;
  auto* out = static_cast<std::uint8_t*>(p.out) +
              2 * (static_cast<std::int64_t>(t0) * p.ld_out + n0 + 8 * piece);
#pragma unroll
  for (int s = 0; s < Layout::kTokens / kTokensPerStep; ++s) {
    const int token = first_token + s * kTokensPerStep;
    const uint4 v = *reinterpret_cast<const uint4*>(tile + Layout::offset(8 * piece, token));
    *reinterpret_cast<uint4*>(out + 2 * static_cast<std::int64_t>(token) * p.ld_out) = v;
  }
}

}  // namespace mxlinear::device
