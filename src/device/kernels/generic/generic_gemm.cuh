// The generic MXFP8 GEMM: correct for every M >= 0, N >= 1 and K % 32 == 0, on any sm_90 GPU.
//
// Design: a cp.async multistage pipeline of e4m3 tiles (BK = 128 bytes per row, XOR-swizzled so
// ldmatrix is conflict-free). Each MX block (k32) is one pair of m16n8k16 f16 mma.sync: e4m3
// fragments are widened to f16 exactly (cvt.rn.f16x2.e4m3x2), the pair's fp32 partial sum is
// promoted into the accumulator as acc += (partial * sa) * sb. The scales are powers of two, so
// the promotion rounds once (in the fma), and the result follows the MX contract exactly.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "device/common/epilogue.cuh"
#include "device/common/gemm_params.hpp"
#include "device/common/mx_format.hpp"
#include "device/common/sm90.hpp"
#include "device/common/swizzle.cuh"
#include "device/ptx/ptx.cuh"

namespace mxlinear::device {

// A tile's shape, the template argument of GenericTile: GenericTile<GenericShape{.bm = 16, ...}>.
struct GenericShape {
  int bm;  // activation rows (tokens) per CTA
  int bn;  // weight rows per CTA
  int wm;  // activation rows of each warp's tile
  int wn;  // weight rows of each warp's tile
  // Warps that share each warp tile and take turns over the MX blocks of a stage; their partial
  // sums meet in shared memory at the end, always in the same order (deterministic). It gives
  // small-M tiles more warps, and each warp less serial work per stage.
  int warps_k = 1;
  int stages = 4;
  int min_blocks_per_sm = 1;  // __launch_bounds__
};

template <GenericShape kShape>
struct GenericTile {
  static constexpr int kBM = kShape.bm, kBN = kShape.bn, kWM = kShape.wm, kWN = kShape.wn,
                       kStages = kShape.stages;
  static constexpr int kWarpsK = kShape.warps_k;
  static constexpr int kMinBlocksPerSm = kShape.min_blocks_per_sm;
  static constexpr int kBK = 128;  // bytes (= e4m3 elements) of K per stage: 4 MX blocks
  static constexpr int kBlocksPerStage = kBK / kBlockSize;
  static constexpr int kWarpsM = kBM / kWM, kWarpsN = kBN / kWN;
  static constexpr int kWarpsMN = kWarpsM * kWarpsN;
  static constexpr int kThreads = 32 * kWarpsMN * kWarpsK;
  static constexpr int kMF = kWM / 16, kNF = kWN / 8;  // mma fragments per warp
  static constexpr int kADataBytes = kBM * kBK, kWDataBytes = kBN * kBK;
  static constexpr int kScaleEntries = kBlocksPerStage * (kBM + kBN);
  // A stage holds the raw scale bytes, [row][block]; the stage being computed has them widened
  // once into one shared float buffer, [block][row], so fragments read them without conversion.
  static constexpr int kStageBytes = (kADataBytes + kWDataBytes + kScaleEntries + 127) / 128 * 128;
  static constexpr int kScaleFloatOffset = kStages * kStageBytes;
  static constexpr int kSmemBytes = kScaleFloatOffset + kScaleEntries * 4;

  static_assert(kBM % kWM == 0 && kBN % kWN == 0, "warp tiles must cover the CTA tile");
  static_assert(kWM % 16 == 0 && kWN % 16 == 0, "B fragments are loaded in pairs of n8");
  static_assert(kStages >= 2, "a pipeline needs two stages");
  static_assert(kStageBytes % 128 == 0, "stages keep 128-byte alignment for the swizzle");
  static_assert(kBlocksPerStage == 4, "a row's scales for one stage are one 4-byte copy");
  static_assert(kBlocksPerStage % kWarpsK == 0, "K warps split a stage's blocks evenly");
  static constexpr int kReduceBytes = (kWarpsK - 1) * kBM * kBN * 4;
  static_assert(kReduceBytes <= kSmemBytes, "the K-warp reduction reuses the pipeline's memory");
  static_assert(kSmemBytes <= kSm90MaxSmemPerCta, "over the sm_90 shared-memory limit");
};

namespace generic_detail {

// Byte offset of 16-byte chunk `chunk` of tile row `row` (rows are 128 bytes, swizzled as TMA's
// 128-byte mode does, though cp.async writes them here).
__device__ __forceinline__ int chunk_offset(int row, int chunk) {
  return swizzle128_offset(row, 16 * chunk);
}

template <class Tile>
__device__ __forceinline__ void load_data_stage(const GemmParams& p, std::uint8_t* stage, int kt,
                                                int m0, int n0) {
  const int k0 = kt * Tile::kBK;
  const std::uint32_t a_base = ptx::smem_address(stage);
  const std::uint32_t w_base = a_base + Tile::kADataBytes;
  constexpr int kChunksPerRow = Tile::kBK / 16;
  for (int c = threadIdx.x; c < (Tile::kBM + Tile::kBN) * kChunksPerRow; c += Tile::kThreads) {
    const bool is_a = c < Tile::kBM * kChunksPerRow;
    const int local = is_a ? c : c - Tile::kBM * kChunksPerRow;
    const int row = local / kChunksPerRow;
    const int chunk = local % kChunksPerRow;
    const int k = k0 + chunk * 16;
    const int global_row = (is_a ? m0 : n0) + row;
    const bool valid = global_row < (is_a ? p.m : p.n) && k < p.k;
    const std::uint8_t* base = is_a ? p.a : p.w;
    const std::int64_t ld = is_a ? p.ld_a : p.ld_w;
    const std::uint8_t* src = valid ? base + global_row * ld + k : base;
    ptx::cp_async_16((is_a ? a_base : w_base) + chunk_offset(row, chunk), src, valid ? 16 : 0);
  }
}

// The stage's scale bytes: for each row, the 4 blocks of this stage in one 4-byte cp.async. Used
// only when every scale row is 4-byte aligned (K % 128 == 0 and aligned bases); otherwise
// widen_scales reads global memory itself.
template <class Tile>
__device__ __forceinline__ void load_scale_stage(const GemmParams& p, std::uint8_t* stage, int kt,
                                                 int m0, int n0) {
  const std::uint32_t base = ptx::smem_address(stage + Tile::kADataBytes + Tile::kWDataBytes);
  for (int r = threadIdx.x; r < Tile::kBM + Tile::kBN; r += Tile::kThreads) {
    const bool is_a = r < Tile::kBM;
    const int row = (is_a ? m0 + r : n0 + r - Tile::kBM);
    const bool valid = row < (is_a ? p.m : p.n);
    const std::uint8_t* src =
        is_a ? p.a_scales + row * p.ld_a_scales : p.w_scales + row * p.ld_w_scales;
    ptx::cp_async_4(base + 4 * r, valid ? src + kt * Tile::kBlocksPerStage : p.a_scales,
                    valid ? 4 : 0);
  }
}

// Widens stage kt's scales into the shared float buffer; entries outside the matrix become 0.
template <class Tile>
__device__ __forceinline__ void widen_scales(const GemmParams& p, const std::uint8_t* stage,
                                             float* scales, int kt, int m0, int n0) {
  const std::uint8_t* bytes = stage + Tile::kADataBytes + Tile::kWDataBytes;
  const int k_blocks = p.k / kBlockSize;
  for (int e = threadIdx.x; e < Tile::kScaleEntries; e += Tile::kThreads) {
    const bool is_a = e < Tile::kBlocksPerStage * Tile::kBM;
    const int local = is_a ? e : e - Tile::kBlocksPerStage * Tile::kBM;
    const int rows = is_a ? Tile::kBM : Tile::kBN;
    const int j = local / rows;
    const int r = local % rows;
    const int row = (is_a ? m0 : n0) + r;
    const int block = kt * Tile::kBlocksPerStage + j;
    float value = 0.0f;
    if (row < (is_a ? p.m : p.n) && block < k_blocks) {
      const std::uint8_t b = p.scales_via_cp_async
                                 ? bytes[4 * (is_a ? r : Tile::kBM + r) + j]
                                 : (is_a ? p.a_scales[row * p.ld_a_scales + block]
                                         : p.w_scales[row * p.ld_w_scales + block]);
      value = e8m0_to_float(b);
    }
    scales[e] = value;
  }
}

template <class Tile>
__device__ __forceinline__ void compute_stage(const std::uint8_t* stage, const float* a_scales,
                                              int blocks_left, int warp_k, int warp_m, int warp_n,
                                              float (&acc)[Tile::kMF][Tile::kNF][4]) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const std::uint32_t a_base = ptx::smem_address(stage);
  const std::uint32_t w_base = a_base + Tile::kADataBytes;
  const float* w_scales = a_scales + Tile::kBlocksPerStage * Tile::kBM;

#pragma unroll
  for (int step = 0; step < Tile::kBlocksPerStage / Tile::kWarpsK; ++step) {
    const int j = step * Tile::kWarpsK + warp_k;
    if (j >= blocks_left) break;  // the K tail: uniform across the warp
    std::uint32_t af[Tile::kMF][2][4];
#pragma unroll
    for (int mf = 0; mf < Tile::kMF; ++mf) {
      const int row = warp_m * Tile::kWM + mf * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      std::uint32_t r[4];
      ptx::ldmatrix_x4(r, a_base + chunk_offset(row, 2 * j + (lane >> 4)));
      // Logical k 2t+e of an m16n8k16 takes physical byte 4t+e, and 2t+8+e takes 4t+2+e; the B
      // fragments below use the same map, so the dot product is unchanged.
      ptx::e4m3x4_to_f16x2x2(r[0], af[mf][0][0], af[mf][0][2]);
      ptx::e4m3x4_to_f16x2x2(r[1], af[mf][0][1], af[mf][0][3]);
      ptx::e4m3x4_to_f16x2x2(r[2], af[mf][1][0], af[mf][1][2]);
      ptx::e4m3x4_to_f16x2x2(r[3], af[mf][1][1], af[mf][1][3]);
    }
    std::uint32_t bf[Tile::kNF][2][2];
#pragma unroll
    for (int np = 0; np < Tile::kNF / 2; ++np) {
      const int row = warp_n * Tile::kWN + np * 16 + (lane & 7) + ((lane >> 4) & 1) * 8;
      std::uint32_t q[4];
      ptx::ldmatrix_x4(q, w_base + chunk_offset(row, 2 * j + ((lane >> 3) & 1)));
      ptx::e4m3x4_to_f16x2x2(q[0], bf[2 * np][0][0], bf[2 * np][0][1]);
      ptx::e4m3x4_to_f16x2x2(q[1], bf[2 * np][1][0], bf[2 * np][1][1]);
      ptx::e4m3x4_to_f16x2x2(q[2], bf[2 * np + 1][0][0], bf[2 * np + 1][0][1]);
      ptx::e4m3x4_to_f16x2x2(q[3], bf[2 * np + 1][1][0], bf[2 * np + 1][1][1]);
    }
    float sa[Tile::kMF][2];
#pragma unroll
    for (int mf = 0; mf < Tile::kMF; ++mf) {
      const int row = warp_m * Tile::kWM + mf * 16 + g;
      sa[mf][0] = a_scales[j * Tile::kBM + row];
      sa[mf][1] = a_scales[j * Tile::kBM + row + 8];
    }
    float sb[Tile::kNF][2];
#pragma unroll
    for (int nf = 0; nf < Tile::kNF; ++nf) {
      const float2 s = *reinterpret_cast<const float2*>(
          &w_scales[j * Tile::kBN + warp_n * Tile::kWN + nf * 8 + 2 * t]);
      sb[nf][0] = s.x;
      sb[nf][1] = s.y;
    }
#pragma unroll
    for (int mf = 0; mf < Tile::kMF; ++mf) {
#pragma unroll
      for (int nf = 0; nf < Tile::kNF; ++nf) {
        float partial[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        ptx::mma_f16_16816(partial, af[mf][0], bf[nf][0][0], bf[nf][0][1], partial);
        ptx::mma_f16_16816(partial, af[mf][1], bf[nf][1][0], bf[nf][1][1], partial);
        acc[mf][nf][0] = fmaf(partial[0] * sa[mf][0], sb[nf][0], acc[mf][nf][0]);
        acc[mf][nf][1] = fmaf(partial[1] * sa[mf][0], sb[nf][1], acc[mf][nf][1]);
        acc[mf][nf][2] = fmaf(partial[2] * sa[mf][1], sb[nf][0], acc[mf][nf][2]);
        acc[mf][nf][3] = fmaf(partial[3] * sa[mf][1], sb[nf][1], acc[mf][nf][3]);
      }
    }
  }
}

// Calls f(accumulator, index) for each of a lane's accumulators with the index of its word in
// a warp's block of the exchange buffer (lanes interleaved, so each store is coalesced).
template <class Tile, class F>
__device__ __forceinline__ void for_each_accumulator(float (&acc)[Tile::kMF][Tile::kNF][4],
                                                     int lane, F&& f) {
#pragma unroll
  for (int mf = 0; mf < Tile::kMF; ++mf)
#pragma unroll
    for (int nf = 0; nf < Tile::kNF; ++nf)
#pragma unroll
      for (int i = 0; i < 4; ++i) f(acc[mf][nf][i], ((mf * Tile::kNF + nf) * 4 + i) * 32 + lane);
}

// Sums the K warps' accumulators into warp_k == 0 in a fixed order; returns whether this warp
// holds the result.
template <class Tile>
__device__ __forceinline__ bool reduce_over_k_warps(std::uint8_t* smem, int warp_k,
                                                    float (&acc)[Tile::kMF][Tile::kNF][4]) {
  constexpr int kPerWarp = Tile::kMF * Tile::kNF * 4 * 32;
  auto* partials = reinterpret_cast<float*>(smem);
  const int lane = threadIdx.x & 31;
  const int slot = (threadIdx.x >> 5) % Tile::kWarpsMN;
  __syncthreads();  // every warp is past the main loop: the pipeline's memory is free
  if (warp_k > 0) {
    float* mine = partials + ((warp_k - 1) * Tile::kWarpsMN + slot) * kPerWarp;
    for_each_accumulator<Tile>(acc, lane, [&](float& a, int at) { mine[at] = a; });
  }
  __syncthreads();
  if (warp_k > 0) return false;
#pragma unroll 1
  for (int k = 1; k < Tile::kWarpsK; ++k) {
    const float* theirs = partials + ((k - 1) * Tile::kWarpsMN + slot) * kPerWarp;
    for_each_accumulator<Tile>(acc, lane, [&](float& a, int at) { a += theirs[at]; });
  }
  return true;
}

}  // namespace generic_detail

template <class Tile>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocksPerSm)
    generic_gemm_kernel(const GemmParams p) {
  using namespace generic_detail;
  using namespace epilogue;
  extern __shared__ __align__(1024) std::uint8_t smem[];
  const int n0 = blockIdx.x * Tile::kBN;
  const int m0 = blockIdx.y * Tile::kBM;
  const int warp = threadIdx.x >> 5;
  const int warp_k = warp / Tile::kWarpsMN;
  const int warp_m = (warp % Tile::kWarpsMN) / Tile::kWarpsN;
  const int warp_n = warp % Tile::kWarpsN;
  const int k_tiles = (p.k + Tile::kBK - 1) / Tile::kBK;
  const int k_blocks = p.k / kBlockSize;

  float acc[Tile::kMF][Tile::kNF][4];
#pragma unroll
  for (int mf = 0; mf < Tile::kMF; ++mf)
#pragma unroll
    for (int nf = 0; nf < Tile::kNF; ++nf)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mf][nf][i] = 0.0f;

  auto load_stage = [&](int kt) {
    std::uint8_t* stage = smem + (kt % Tile::kStages) * Tile::kStageBytes;
    load_data_stage<Tile>(p, stage, kt, m0, n0);
    if (p.scales_via_cp_async) load_scale_stage<Tile>(p, stage, kt, m0, n0);
  };
#pragma unroll 1
  for (int s = 0; s < Tile::kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s);
    ptx::cp_async_commit();
  }

  float* scales = reinterpret_cast<float*>(smem + Tile::kScaleFloatOffset);
#pragma unroll 1
  for (int kt = 0; kt < k_tiles; ++kt) {
    ptx::cp_async_wait<Tile::kStages - 2>();
    // Every warp is done with iteration kt-1: its stage and the float scales may be rewritten.
    __syncthreads();
    if (kt + Tile::kStages - 1 < k_tiles) load_stage(kt + Tile::kStages - 1);
    ptx::cp_async_commit();
    const std::uint8_t* stage = smem + (kt % Tile::kStages) * Tile::kStageBytes;
    widen_scales<Tile>(p, stage, scales, kt, m0, n0);
    __syncthreads();
    compute_stage<Tile>(stage, scales, k_blocks - kt * Tile::kBlocksPerStage, warp_k, warp_m,
                        warp_n, acc);
  }
  ptx::cp_async_wait<0>();
  if constexpr (Tile::kWarpsK > 1) {
    if (!reduce_over_k_warps<Tile>(smem, warp_k, acc)) return;
  }

  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const std::size_t out_align = p.out_type == OutType::kF32 ? 8 : 4;
  const bool pairs_aligned =
      p.ld_out % 2 == 0 && reinterpret_cast<std::uintptr_t>(p.out) % out_align == 0;
#pragma unroll
  for (int nf = 0; nf < Tile::kNF; ++nf) {
    const int col = n0 + warp_n * Tile::kWN + nf * 8 + 2 * t;
    if (col >= p.n) continue;
    float b0 = 0.0f, b1 = 0.0f;
    if (p.bias_type != BiasType::kNone) {
      b0 = load_bias(p, col);
      if (col + 1 < p.n) b1 = load_bias(p, col + 1);
    }
#pragma unroll
    for (int mf = 0; mf < Tile::kMF; ++mf) {
      const int row = m0 + warp_m * Tile::kWM + mf * 16 + g;
      if (row < p.m)
        store_pair(p, pairs_aligned, row, col, acc[mf][nf][0] + b0, acc[mf][nf][1] + b1);
      if (row + 8 < p.m)
        store_pair(p, pairs_aligned, row + 8, col, acc[mf][nf][2] + b0, acc[mf][nf][3] + b1);
    }
  }
}

}  // namespace mxlinear::device
