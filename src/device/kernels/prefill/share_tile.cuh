// The device side of the prefill kernel's split-share-major fp32 output tile (share_layout.hpp):
// the accumulators go in, and the cluster's splits add their shares and store them.
#pragma once

#include <cstdint>

#include "device/common/epilogue.cuh"
#include "device/common/gemm_params.hpp"
#include "device/common/split_k.cuh"
#include "device/kernels/prefill/share_layout.hpp"
#include "device/ptx/hopper_ptx.cuh"

namespace mxlinear::device {

// Writes one warpgroup's accumulator (64 rows from row_base x kTokens) into the tile, or with
// kAdd adds it to what another warpgroup wrote there (after a barrier between the two).
template <bool kAdd, int kRows, int kTokens>
__device__ __forceinline__ void put_accumulator_shares(float* tile, const float (&acc)[kTokens / 2],
                                                       int row_base,
                                                       const ShareLayout<kRows, kTokens>& layout) {
  const int row = accumulator_position(0, row_base).row;
  const int offsets[2] = {layout.row_offset(row), layout.row_offset(row + 8)};
#pragma unroll
  for (int i = 0; i < kTokens / 2; ++i) {
    float& slot =
        tile[offsets[(i >> 1) & 1] + accumulator_position(i, row_base).token * layout.stride];
    if constexpr (kAdd) {
      slot += acc[i];
    } else {
      slot = acc[i];
    }
  }
}

template <int kRows, int kTokens>
__device__ __forceinline__ void write_accumulator_shares(
    float* tile, const float (&acc)[kTokens / 2], int row_base,
    const ShareLayout<kRows, kTokens>& layout) {
  put_accumulator_shares<false>(tile, acc, row_base, layout);
}

template <int kRows, int kTokens>
__device__ __forceinline__ void add_accumulator_shares(float* tile, const float (&acc)[kTokens / 2],
                                                       int row_base,
                                                       const ShareLayout<kRows, kTokens>& layout) {
  put_accumulator_shares<true>(tile, acc, row_base, layout);
}

// After a cluster barrier that follows every CTA's write_accumulator_shares: split r adds share
// r of every split's tile (at `tile_address` in each CTA), in split order, 4 outputs (16 bytes
// of each split) per step with every split's load in flight, adds the bias, rounds once and
// stores the 4 outputs together. Workers `worker` of `workers` of the CTA share the work; a
// cluster barrier must follow before any CTA exits.
template <int kRows, int kTokens>
__device__ __forceinline__ void reduce_shares_and_store(const GemmParams& p,
                                                        std::uint32_t tile_address, int n0, int t0,
                                                        int split, int splits,
                                                        const ShareLayout<kRows, kTokens>& layout,
                                                        int worker, int workers) {
  // 16-byte quads per token in this split's share: 2 or more, or none past the last share. Step
  // e takes quad e % 2^quad_shift of token e >> quad_shift, 2^quad_shift the power of two >=
  // quads (no division in the loop); the steps past a token's quads do nothing.
  const int quads = layout.rows_of_share(split) / 4;
  const int quad_shift = quads > 1 ? 32 - __clz(quads - 1) : 0;
  const int row_begin = split * layout.rows;
  const std::uint32_t share =
      tile_address + 4u * static_cast<std::uint32_t>(split * layout.share_floats);
  const bool vector_aligned = epilogue::rows_16_byte_aligned(p);
  for (int e = worker; e < (quads > 0 ? kTokens << quad_shift : 0); e += workers) {
    const int token = e >> quad_shift;
    const int quad = e & ((1 << quad_shift) - 1);
    if (quad >= quads) continue;
    const int n = n0 + row_begin + 4 * quad, m = t0 + token;
    if (n >= p.n || m >= p.m) continue;
    const std::uint32_t local =
        share + 4u * static_cast<std::uint32_t>(token * layout.stride + 4 * quad);
    float4 part[kMaxClusterSplits];
#pragma unroll
    for (int r = 0; r < kMaxClusterSplits; ++r) {
      if (r < splits)
        part[r] = hopper::load_cluster_shared_v4(local, static_cast<std::uint32_t>(r));
    }
    float v[4] = {part[0].x, part[0].y, part[0].z, part[0].w};
#pragma unroll
    for (int r = 1; r < kMaxClusterSplits; ++r) {
      if (r < splits) {
        v[0] += part[r].x;
        v[1] += part[r].y;
        v[2] += part[r].z;
        v[3] += part[r].w;
      }
    }
    epilogue::store_run_with_bias(p, vector_aligned, m, n, v);
  }
}

}  // namespace mxlinear::device
