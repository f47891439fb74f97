// The generic MXFP8 GEMM: correct for every M >= 0, N >= 1 and K % 32 == 0, on any sm_90 GPU.
//
// Design: a cp.async multistage pipeline of e4m3 tiles (BK = 128 bytes per row, XOR-swizzled so
// ldmatrix is conflict-free). Each MX block (k32) is one pair of m16n8k16 f16 mma.sync: e4m3
// fragments are widened to f16 exactly (cvt.rn.f16x2.e4m3x2), the pair's fp32 partial sum is
// promoted into the accumulator as acc += (partial * sa) * sb. The scales are powers of two, so
// the promotion rounds once (in the fma), and the result follows the MX contract exactly.
//
// W8A16 (GemmParams::x_as_is): the activation tile holds the caller's bf16 or fp16 x as it is
// (256 bytes per row and stage), the weights are widened exactly to x's type, and each block's
// partial sum is promoted with the weight scale alone: acc = fma(partial, sw, acc). Every product
// is exact in fp32; the scale is never folded into a 16-bit operand, where it could round or
// overflow.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "device/common/epilogue.cuh"
#include "device/common/gemm_params.hpp"
#include "device/common/mma_16bit.cuh"
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

// Shared memory of a tile of `shape` (GenericTile::kSmemBytes), for the host to fit W8A16
// instances: a stage holds the activation (1 byte per K for e4m3, 2 for x as it is), the weights
// and the raw scale bytes (none for an activation used as it is); after the stages, the float
// scales of the stage being computed.
constexpr int generic_smem_bytes(const GenericShape& shape, bool x_as_is) {
  constexpr int kBK = 128, kBlocksPerStage = kBK / kBlockSize;
  const int a_scale_rows = x_as_is ? 0 : shape.bm;
  const int scale_entries = kBlocksPerStage * (a_scale_rows + shape.bn);
  const int a_bytes = shape.bm * kBK * (x_as_is ? 2 : 1);
  const int stage_bytes = (a_bytes + shape.bn * kBK + scale_entries + 127) / 128 * 128;
  return shape.stages * stage_bytes + scale_entries * 4;
}

template <GenericShape kShape, ActivationOperand kActivation = ActivationOperand::kMx>
struct GenericTile {
  static constexpr ActivationOperand kAct = kActivation;
  static constexpr bool kXAsIs = kActivation != ActivationOperand::kMx;
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
  // An activation row of a stage: kBK e4m3 bytes, or kBK 16-bit elements of x as it is.
  static constexpr int kARowBytes = kXAsIs ? 2 * kBK : kBK;
  static constexpr int kADataBytes = kBM * kARowBytes, kWDataBytes = kBN * kBK;
  // Activation rows with scales: none when x is used as it is.
  static constexpr int kAScaleRows = kXAsIs ? 0 : kBM;
  static constexpr int kScaleEntries = kBlocksPerStage * (kAScaleRows + kBN);
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
  static_assert(kSmemBytes == generic_smem_bytes(kShape, kXAsIs), "the host's size must agree");
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

// --- W8A16 -----------------------------------------------------------------------------------

// Byte offset of 16-byte chunk `chunk` (0..15) of row `row` of a W8A16 activation tile (256-byte
// rows: 128 16-bit elements). The chunk index is XORed with 2 * (row % 8): the 8-byte fragment
// reads of one k16 half of a block (32 bytes of each of 8 rows) then hit distinct banks in each
// half-warp, and the two chunks of each 32-byte run stay side by side.
__device__ __forceinline__ int x_chunk_offset(int row, int chunk) {
  return row * 256 + ((chunk ^ ((row & 7) << 1)) << 4);
}

__device__ __forceinline__ void ld_shared_u32x2(std::uint32_t addr, std::uint32_t& lo,
                                                std::uint32_t& hi) {
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(lo), "=r"(hi) : "r"(addr));
}

__device__ __forceinline__ void st_shared_u32x4(std::uint32_t addr, const std::uint32_t (&v)[4]) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v[0]), "r"(v[1]),
               "r"(v[2]), "r"(v[3])
               : "memory");
}

// The weights of a W8A16 stage, as load_data_stage copies them.
template <class Tile>
__device__ __forceinline__ void load_weight_stage(const GemmParams& p, std::uint8_t* stage, int kt,
                                                  int n0) {
  const int k0 = kt * Tile::kBK;
  const std::uint32_t w_base = ptx::smem_address(stage) + Tile::kADataBytes;
  constexpr int kChunksPerRow = Tile::kBK / 16;
  for (int c = threadIdx.x; c < Tile::kBN * kChunksPerRow; c += Tile::kThreads) {
    const int row = c / kChunksPerRow;
    const int chunk = c % kChunksPerRow;
    const int k = k0 + chunk * 16;
    const int global_row = n0 + row;
    const bool valid = global_row < p.n && k < p.k;
    const std::uint8_t* src = valid ? p.w + global_row * p.ld_w + k : p.w;
    ptx::cp_async_16(w_base + chunk_offset(row, chunk), src, valid ? 16 : 0);
  }
}

// The x of a W8A16 stage, 8 elements per 16-byte chunk; rows past M and K past the end read as
// zeros. With 16-byte aligned rows (base and stride) by cp.async; otherwise (any 2-byte
// alignment) by plain loads and a shared store, which the barrier before the stage's compute
// makes visible as it does the cp.async copies.
template <class Tile>
__device__ __forceinline__ void load_x_stage(const GemmParams& p, bool x_rows_16_byte_aligned,
                                             std::uint8_t* stage, int kt, int m0) {
  constexpr int kElementsPerChunk = 8;
  constexpr int kChunksPerRow = Tile::kBK / kElementsPerChunk;
  const int k0 = kt * Tile::kBK;
  const std::uint32_t a_base = ptx::smem_address(stage);
  const auto* x = static_cast<const std::uint16_t*>(p.x);
  for (int c = threadIdx.x; c < Tile::kBM * kChunksPerRow; c += Tile::kThreads) {
    const int row = c / kChunksPerRow;
    const int chunk = c % kChunksPerRow;
    const int k = k0 + chunk * kElementsPerChunk;
    const int global_row = m0 + row;
    const bool valid = global_row < p.m && k < p.k;
    const std::uint16_t* src = valid ? x + global_row * p.ld_x + k : x;
    const std::uint32_t dst = a_base + x_chunk_offset(row, chunk);
    if (x_rows_16_byte_aligned) {
      ptx::cp_async_16(dst, src, valid ? 16 : 0);
    } else {
      std::uint32_t v[4] = {0, 0, 0, 0};
      if (valid) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          v[i] = static_cast<std::uint32_t>(src[2 * i]) |
                 (static_cast<std::uint32_t>(src[2 * i + 1]) << 16);
        }
      }
      st_shared_u32x4(dst, v);
    }
  }
}

// The stage's scale bytes: for each row, the 4 blocks of this stage in one 4-byte cp.async. Used
// only when every scale row is 4-byte aligned (K % 128 == 0 and aligned bases); otherwise
// widen_scales reads global memory itself.
template <class Tile>
__device__ __forceinline__ void load_scale_stage(const GemmParams& p, std::uint8_t* stage, int kt,
                                                 int m0, int n0) {
  const std::uint32_t base = ptx::smem_address(stage + Tile::kADataBytes + Tile::kWDataBytes);
  for (int r = threadIdx.x; r < Tile::kAScaleRows + Tile::kBN; r += Tile::kThreads) {
    const bool is_a = r < Tile::kAScaleRows;
    const int row = (is_a ? m0 + r : n0 + r - Tile::kAScaleRows);
    const bool valid = row < (is_a ? p.m : p.n);
    const std::uint8_t* src =
        is_a ? p.a_scales + row * p.ld_a_scales : p.w_scales + row * p.ld_w_scales;
    // A zero-byte copy still names a source: one that is set (a_scales is unused in W8A16).
    const std::uint8_t* unused_src = Tile::kXAsIs ? p.w_scales : p.a_scales;
    ptx::cp_async_4(base + 4 * r, valid ? src + kt * Tile::kBlocksPerStage : unused_src,
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
    const bool is_a = e < Tile::kBlocksPerStage * Tile::kAScaleRows;
    const int local = is_a ? e : e - Tile::kBlocksPerStage * Tile::kAScaleRows;
    const int rows = is_a ? Tile::kAScaleRows : Tile::kBN;
    const int j = local / rows;
    const int r = local % rows;
    const int row = (is_a ? m0 : n0) + r;
    const int block = kt * Tile::kBlocksPerStage + j;
    float value = 0.0f;
    if (row < (is_a ? p.m : p.n) && block < k_blocks) {
      const std::uint8_t b = p.scales_via_cp_async
                                 ? bytes[4 * (is_a ? r : Tile::kAScaleRows + r) + j]
                                 : (is_a ? p.a_scales[row * p.ld_a_scales + block]
                                         : p.w_scales[row * p.ld_w_scales + block]);
      value = e8m0_to_float(b);
    }
    scales[e] = value;
  }
}

// Block j's B fragments of this warp's weight rows, widened exactly to the mma's 16-bit type
// (f16 for W8A8 and fp16 x, bf16 for bf16 x). Logical k 2t+e of an m16n8k16 takes physical byte
// 4t+e and 2t+8+e takes 4t+2+e; the A fragments use the same map.
template <class Tile>
__device__ __forceinline__ void weight_fragments(std::uint32_t w_base, int j, int warp_n, int lane,
                                                 std::uint32_t (&bf)[Tile::kNF][2][2]) {
#pragma unroll
  for (int np = 0; np < Tile::kNF / 2; ++np) {
    const int row = warp_n * Tile::kWN + np * 16 + (lane & 7) + ((lane >> 4) & 1) * 8;
    std::uint32_t q[4];
    ptx::ldmatrix_x4(q, w_base + chunk_offset(row, 2 * j + ((lane >> 3) & 1)));
    widen_weights<Tile::kAct>(q[0], bf[2 * np][0][0], bf[2 * np][0][1]);
    widen_weights<Tile::kAct>(q[1], bf[2 * np][1][0], bf[2 * np][1][1]);
    widen_weights<Tile::kAct>(q[2], bf[2 * np + 1][0][0], bf[2 * np + 1][0][1]);
    widen_weights<Tile::kAct>(q[3], bf[2 * np + 1][1][0], bf[2 * np + 1][1][1]);
  }
}

// Block j's weight scales of this lane's two columns of each n8 fragment.
template <class Tile>
__device__ __forceinline__ void weight_scales(const float* w_scales, int j, int warp_n, int t,
                                              float (&sb)[Tile::kNF][2]) {
#pragma unroll
  for (int nf = 0; nf < Tile::kNF; ++nf) {
    const float2 s = *reinterpret_cast<const float2*>(
        &w_scales[j * Tile::kBN + warp_n * Tile::kWN + nf * 8 + 2 * t]);
    sb[nf][0] = s.x;
    sb[nf][1] = s.y;
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
      // fragments (weight_fragments) use the same map, so the dot product is unchanged.
      ptx::e4m3x4_to_f16x2x2(r[0], af[mf][0][0], af[mf][0][2]);
      ptx::e4m3x4_to_f16x2x2(r[1], af[mf][0][1], af[mf][0][3]);
      ptx::e4m3x4_to_f16x2x2(r[2], af[mf][1][0], af[mf][1][2]);
      ptx::e4m3x4_to_f16x2x2(r[3], af[mf][1][1], af[mf][1][3]);
    }
    std::uint32_t bf[Tile::kNF][2][2];
    weight_fragments<Tile>(w_base, j, warp_n, lane, bf);
    float sa[Tile::kMF][2];
#pragma unroll
    for (int mf = 0; mf < Tile::kMF; ++mf) {
      const int row = warp_m * Tile::kWM + mf * 16 + g;
      sa[mf][0] = a_scales[j * Tile::kBM + row];
      sa[mf][1] = a_scales[j * Tile::kBM + row + 8];
    }
    float sb[Tile::kNF][2];
    weight_scales<Tile>(w_scales, j, warp_n, t, sb);
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

// compute_stage for W8A16: the weights widened exactly to x's type, x's fragments read as they
// are, each block's fp32 partial sum promoted with the weight scale alone.
template <class Tile>
__device__ __forceinline__ void compute_stage_as_is(const std::uint8_t* stage,
                                                    const float* w_scales, int blocks_left,
                                                    int warp_k, int warp_m, int warp_n,
                                                    float (&acc)[Tile::kMF][Tile::kNF][4]) {
  static_assert(Tile::kAScaleRows == 0, "the float scales are the weights' alone");
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const std::uint32_t a_base = ptx::smem_address(stage);
  const std::uint32_t w_base = a_base + Tile::kADataBytes;

#pragma unroll
  for (int step = 0; step < Tile::kBlocksPerStage / Tile::kWarpsK; ++step) {
    const int j = step * Tile::kWarpsK + warp_k;
    if (j >= blocks_left) break;  // the K tail: uniform across the warp
    // The e4m3 B fragments (weight_fragments) give lane (g, t), in k16 half h of the block, the
    // weights at physical k 16h + 4t + e as logical k 2t + e, and 16h + 4t + 2 + e as 2t + 8 + e (e
    // = 0, 1). The A fragment takes x at the same physical k: one 8-byte read of elements 16h + 4t
    // .. 16h + 4t + 3 per row, the low word to a0/a1 (logical 2t, 2t + 1), the high one to a2/a3
    // (logical 2t + 8, 2t + 9). So the dot product is the block's, in another order.
    std::uint32_t af[Tile::kMF][2][4];
#pragma unroll
    for (int mf = 0; mf < Tile::kMF; ++mf) {
      const int row = warp_m * Tile::kWM + mf * 16 + g;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int chunk = 4 * j + 2 * h + (t >> 1);
        const int byte = (t & 1) * 8;
        ld_shared_u32x2(a_base + x_chunk_offset(row, chunk) + byte, af[mf][h][0], af[mf][h][2]);
        ld_shared_u32x2(a_base + x_chunk_offset(row + 8, chunk) + byte, af[mf][h][1], af[mf][h][3]);
      }
    }
    std::uint32_t bf[Tile::kNF][2][2];
    weight_fragments<Tile>(w_base, j, warp_n, lane, bf);
    float sb[Tile::kNF][2];
    weight_scales<Tile>(w_scales, j, warp_n, t, sb);
#pragma unroll
    for (int mf = 0; mf < Tile::kMF; ++mf) {
#pragma unroll
      for (int nf = 0; nf < Tile::kNF; ++nf) {
        float partial[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_16816<Tile::kAct>(partial, af[mf][0], bf[nf][0][0], bf[nf][0][1], partial);
        mma_16816<Tile::kAct>(partial, af[mf][1], bf[nf][1][0], bf[nf][1][1], partial);
        acc[mf][nf][0] = fmaf(partial[0], sb[nf][0], acc[mf][nf][0]);
        acc[mf][nf][1] = fmaf(partial[1], sb[nf][1], acc[mf][nf][1]);
        acc[mf][nf][2] = fmaf(partial[2], sb[nf][0], acc[mf][nf][2]);
        acc[mf][nf][3] = fmaf(partial[3], sb[nf][1], acc[mf][nf][3]);
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

  // W8A16: cp.async needs x's rows 16-byte aligned, base and stride.
  [[maybe_unused]] const bool x_rows_16_byte_aligned =
      Tile::kXAsIs && reinterpret_cast<std::uintptr_t>(p.x) % 16 == 0 && p.ld_x % 8 == 0;
  auto load_stage = [&](int kt) {
    std::uint8_t* stage = smem + (kt % Tile::kStages) * Tile::kStageBytes;
    if constexpr (Tile::kXAsIs) {
      // Weights first: their copies run while a misaligned x is loaded element by element.
      load_weight_stage<Tile>(p, stage, kt, n0);
      load_x_stage<Tile>(p, x_rows_16_byte_aligned, stage, kt, m0);
    } else {
      load_data_stage<Tile>(p, stage, kt, m0, n0);
    }
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
    if constexpr (Tile::kXAsIs) {
      compute_stage_as_is<Tile>(stage, scales, k_blocks - kt * Tile::kBlocksPerStage, warp_k,
                                warp_m, warp_n, acc);
    } else {
      compute_stage<Tile>(stage, scales, k_blocks - kt * Tile::kBlocksPerStage, warp_k, warp_m,
                          warp_n, acc);
    }
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
