// The Hopper decode GEMM (M <= 128): streams the weights at the memory bound.
//
// Design (docs/plans/decode-kernel.md):
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

#include "device/epilogue.cuh"
#include "device/gemm_params.hpp"
#include "device/hopper_ptx.cuh"
#include "device/ptx.cuh"
#include "device/wgmma_f16.cuh"
#include "mxlinear/format.hpp"

namespace mxlinear::device {

template <int kTokens_, int kStages_>
struct DecodeTile {
  static constexpr int kTokens = kTokens_;  // wgmma N: activation rows per CTA
  static constexpr int kStages = kStages_;
  static constexpr int kRows = 64;  // weight rows per CTA (wgmma M)
  static constexpr int kBK = 128;   // K bytes per stage: one 128-byte swizzle row, 4 MX blocks
  static constexpr int kBlocksPerStage = kBK / kBlockSize;
  static constexpr int kConsumerThreads = 128;            // one warpgroup
  static constexpr int kThreads = kConsumerThreads + 32;  // + the producer warp
  static constexpr int kWTileBytes = kRows * kBK;
  static constexpr int kATileBytes = kTokens * kBK;
  static constexpr int kWScaleBytes = kRows * kBlocksPerStage;
  static constexpr int kAScaleBytes = kTokens * kBlocksPerStage;
  // Shared memory, from a 1024-byte aligned base (the swizzle atom):
  static constexpr int kWTileOffset = 0;
  static constexpr int kATileOffset = kWTileOffset + kStages * kWTileBytes;
  static constexpr int kWScaleOffset = kATileOffset + kStages * kATileBytes;
  static constexpr int kAScaleOffset = kWScaleOffset + kStages * kWScaleBytes;
  // The stage's activations widened to f16 (K-major, two 128-byte swizzle atoms along K); after
  // the main loop the same bytes hold the split's fp32 tile for the cluster reduction.
  static constexpr int kWideOffset = (kAScaleOffset + kStages * kAScaleBytes + 1023) / 1024 * 1024;
  static constexpr int kWideBytes = kTokens * kBK * 2;
  static constexpr int kReduceOffset = kWideOffset;
  static constexpr int kBarrierOffset = kWideOffset + kWideBytes;
  static constexpr int kSmemBytes = kBarrierOffset + 2 * kStages * 8 + 1024;  // + alignment slack
  static constexpr std::uint32_t kTxBytes = kWTileBytes + kATileBytes;        // TMA bytes per stage
  static constexpr int kPartialRegs = kTokens / 2;
  // Two partial sums let one block's promotion overlap the next block's wgmma; at 128 tokens
  // the second set would not fit in the register file.
  static constexpr int kPartialSets = kTokens <= 64 ? 2 : 1;

  static_assert(kTokens % 8 == 0 && kTokens >= 8 && kTokens <= 128, "wgmma N is 8..256 step 8");
  static_assert(kATileBytes % 1024 == 0 && kWTileBytes % 1024 == 0,
                "tiles start on 1024-byte boundaries (swizzle atoms)");
  static_assert(kStages >= 2, "a ring needs two stages");
  static_assert(kRows * kTokens * 4 <= kWideBytes, "the reduction tile reuses the f16 buffer");
  static_assert(kSmemBytes <= 227 * 1024, "over the sm_90 shared-memory limit");
};

namespace decode_detail {

// 2^(b - 127) exactly; b = 0 is the subnormal 2^-127, b = 255 NaN.
__device__ __forceinline__ float scale_value(std::uint32_t b) {
  return e8m0_to_float(static_cast<std::uint8_t>(b & 0xFFu));
}

// The producer warp: fills the ring for this CTA's chunk range [c_begin, c_end).
template <class Tile>
__device__ __forceinline__ void produce(const GemmParams& p, const CUtensorMap* w_map,
                                        const CUtensorMap* a_map, std::uint32_t smem,
                                        std::uint32_t full, std::uint32_t empty, int c_begin,
                                        int c_end, int n0, int t0) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int chunks = c_end - c_begin;
  auto weights = [&](int it) {
    const int s = it % Tile::kStages;
    const int c = c_begin + it;
    if (lane == 0) {
      hopper::tma_load_2d(smem + Tile::kWTileOffset + s * Tile::kWTileBytes, w_map, c * Tile::kBK,
                          n0, full + 8 * s);
    }
    const std::uint32_t dst = smem + Tile::kWScaleOffset + s * Tile::kWScaleBytes;
    for (int r = lane; r < Tile::kRows; r += 32) {
      const bool valid = n0 + r < p.n;
      const std::uint8_t* src =
          valid ? p.w_scales + static_cast<std::int64_t>(n0 + r) * p.ld_w_scales + 4 * c
                : p.w_scales;
      ptx::cp_async_4(dst + 4 * r, src, valid ? 4 : 0);
    }
  };
  auto activations = [&](int it) {
    const int s = it % Tile::kStages;
    const int c = c_begin + it;
    if (lane == 0) {
      hopper::tma_load_2d(smem + Tile::kATileOffset + s * Tile::kATileBytes, a_map, c * Tile::kBK,
                          t0, full + 8 * s);
    }
    const std::uint32_t dst = smem + Tile::kAScaleOffset + s * Tile::kAScaleBytes;
    for (int r = lane; r < Tile::kTokens; r += 32) {
      const bool valid = t0 + r < p.m;
      const std::uint8_t* src =
          valid ? p.a_scales + static_cast<std::int64_t>(t0 + r) * p.ld_a_scales + 4 * c
                : p.a_scales;
      ptx::cp_async_4(dst + 4 * r, src, valid ? 4 : 0);
    }
  };
  auto publish = [&](int it) {
    const std::uint32_t bar = full + 8 * (it % Tile::kStages);
    if (lane == 0) hopper::mbarrier_arrive_expect_tx(bar, Tile::kTxBytes);
    hopper::cp_async_mbarrier_arrive(bar);
  };
  // Weights are never written by an earlier kernel: request the first stages before waiting.
  const int prologue = chunks < Tile::kStages ? chunks : Tile::kStages;
  for (int it = 0; it < prologue; ++it) weights(it);
  hopper::wait_prerequisite_grids();
  for (int it = 0; it < prologue; ++it) {
    activations(it);
    publish(it);
  }
  for (int it = prologue; it < chunks; ++it) {
    hopper::mbarrier_wait(empty + 8 * (it % Tile::kStages), (it / Tile::kStages - 1) & 1);
    weights(it);
    activations(it);
    publish(it);
  }
}

// Promotes one block's partial sums: acc += (partial * sa[token]) * sw[row].
template <class Tile>
__device__ __forceinline__ void promote(float (&acc)[Tile::kPartialRegs],
                                        const float (&partial)[Tile::kPartialRegs],
                                        const std::uint32_t (&a_scale_words)[Tile::kTokens / 4],
                                        std::uint32_t w_word0, std::uint32_t w_word1, int block) {
  const float sw0 = scale_value(w_word0 >> (8 * block));
  const float sw1 = scale_value(w_word1 >> (8 * block));
#pragma unroll
  for (int j = 0; j < Tile::kTokens / 8; ++j) {
    const float sa0 = scale_value(a_scale_words[2 * j] >> (8 * block));
    const float sa1 = scale_value(a_scale_words[2 * j + 1] >> (8 * block));
    // Accumulator layout: reg 4j + {0,1} row r, tokens 8j + 2t + {0,1}; 4j + {2,3} row r + 8.
    acc[4 * j + 0] = fmaf(partial[4 * j + 0] * sa0, sw0, acc[4 * j + 0]);
    acc[4 * j + 1] = fmaf(partial[4 * j + 1] * sa1, sw0, acc[4 * j + 1]);
    acc[4 * j + 2] = fmaf(partial[4 * j + 2] * sa0, sw1, acc[4 * j + 2]);
    acc[4 * j + 3] = fmaf(partial[4 * j + 3] * sa1, sw1, acc[4 * j + 3]);
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

// Byte offset of byte `col` of row `row` in a TMA tile of 128-byte rows (128-byte swizzle).
__device__ __forceinline__ int swizzled(int row, int col) {
  return row * 128 + (((col >> 4) ^ (row & 7)) << 4) + (col & 15);
}

// Widens the stage's e4m3 activations to f16, permuting K inside every k16 step: the 4 bytes at
// physical k = 4t..4t+3 of a step go to logical k = 2t, 2t+1 (low pair) and 8+2t, 9+2t (high
// pair), which is where the f16 wgmma A fragment of a thread with lane % 4 = t expects them.
// The weights are read the same way (load_weight_fragments), so every product pairs the same
// k of both operands; only the order of the in-instruction sum changes.
template <class Tile>
__device__ __forceinline__ void widen_activations(const std::uint8_t* tile8, std::uint8_t* wide,
                                                  int tid) {
  for (int w = tid; w < Tile::kTokens * 32; w += Tile::kConsumerThreads) {
    const int token = w >> 5, word = w & 31;
    const std::uint32_t x =
        *reinterpret_cast<const std::uint32_t*>(tile8 + swizzled(token, 4 * word));
    std::uint32_t lo, hi;
    ptx::e4m3x4_to_f16x2x2(x, lo, hi);
    const int byte = 32 * (word >> 2) + 4 * (word & 3);  // f16 bytes of logical k = 2t in the step
    *reinterpret_cast<std::uint32_t*>(wide + wide_offset<Tile>(token, byte)) = lo;
    *reinterpret_cast<std::uint32_t*>(wide + wide_offset<Tile>(token, byte + 16)) = hi;
  }
}

// This thread's f16 A fragments of the stage: [block][k16 step][reg], rows r and r + 8.
template <class Tile>
__device__ __forceinline__ void load_weight_fragments(const std::uint8_t* tile8, int row, int t,
                                                      std::uint32_t (&a)[4][2][4]) {
#pragma unroll
  for (int block = 0; block < 4; ++block) {
#pragma unroll
    for (int step = 0; step < 2; ++step) {
      const int col = 32 * block + 16 * step + 4 * t;
      const std::uint32_t x0 = *reinterpret_cast<const std::uint32_t*>(tile8 + swizzled(row, col));
      const std::uint32_t x1 =
          *reinterpret_cast<const std::uint32_t*>(tile8 + swizzled(row + 8, col));
      ptx::e4m3x4_to_f16x2x2(x0, a[block][step][0], a[block][step][2]);
      ptx::e4m3x4_to_f16x2x2(x1, a[block][step][1], a[block][step][3]);
    }
  }
}

// The consumer warpgroup. Per stage: widen the activations, take the weight fragments into
// registers and release the stage; then per MX block two k16 wgmma into a fresh partial sum
// and its promotion (with two partial sets, one block's promotion overlaps the next's wgmma).
// Leaves the CTA's fp32 tile in `acc`.
template <class Tile>
__device__ __forceinline__ void consume(float (&acc)[Tile::kPartialRegs], std::uint32_t smem,
                                        std::uint8_t* smem_ptr, std::uint32_t full,
                                        std::uint32_t empty, int chunks) {
  using Mma = hopper::WgmmaF16RS<Tile::kTokens>;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5, lane = tid & 31;
  const int row0 = 16 * warp + (lane >> 2);
  std::uint8_t* const wide = smem_ptr + Tile::kWideOffset;
  const std::uint32_t wide_address = smem + Tile::kWideOffset;
  float partial[Tile::kPartialSets][Tile::kPartialRegs];
  for (int it = 0; it < chunks; ++it) {
    const int s = it % Tile::kStages;
    hopper::mbarrier_wait(full + 8 * s, (it / Tile::kStages) & 1);
    const std::uint8_t* w_tile = smem_ptr + Tile::kWTileOffset + s * Tile::kWTileBytes;
    const std::uint8_t* a_tile = smem_ptr + Tile::kATileOffset + s * Tile::kATileBytes;
    const std::uint8_t* w_scales = smem_ptr + Tile::kWScaleOffset + s * Tile::kWScaleBytes;
    const std::uint8_t* a_scales = smem_ptr + Tile::kAScaleOffset + s * Tile::kAScaleBytes;
    // Every warp's wgmma of the previous stage has read the f16 buffer (each waited on its last
    // group before arriving here).
    hopper::named_barrier_sync(1, Tile::kConsumerThreads);
    widen_activations<Tile>(a_tile, wide, tid);
    std::uint32_t a[4][2][4];
    load_weight_fragments<Tile>(w_tile, row0, lane & 3, a);
    const std::uint32_t w_word0 = *reinterpret_cast<const std::uint32_t*>(w_scales + 4 * row0);
    const std::uint32_t w_word1 =
        *reinterpret_cast<const std::uint32_t*>(w_scales + 4 * (row0 + 8));
    std::uint32_t a_words[Tile::kTokens / 4];
#pragma unroll
    for (int j = 0; j < Tile::kTokens / 8; ++j) {
      const int token = 8 * j + 2 * (lane & 3);
      a_words[2 * j] = *reinterpret_cast<const std::uint32_t*>(a_scales + 4 * token);
      a_words[2 * j + 1] = *reinterpret_cast<const std::uint32_t*>(a_scales + 4 * (token + 1));
    }
    // The stage is in registers and the f16 buffer now: hand it back to the producer.
    __syncwarp();
    if (lane == 0) hopper::mbarrier_arrive(empty + 8 * s);
    // The f16 writes must be visible to wgmma (the async proxy) in every warp.
    hopper::fence_proxy_async_shared();
    hopper::named_barrier_sync(1, Tile::kConsumerThreads);

    auto issue = [&](float(&d)[Tile::kPartialRegs], int block) {
      hopper::pin(d);
      hopper::wgmma_fence();
#pragma unroll
      for (int step = 0; step < 2; ++step) {
        const int k16 = 2 * block + step;  // logical k16 step of the stage: 32 bytes each in f16
        const std::uint32_t address =
            wide_address + (k16 >> 2) * Tile::kTokens * 128 + (k16 & 3) * 32;
        Mma::run(d, a[block][step], hopper::kmajor_sw128_descriptor(address), step == 1);
      }
      hopper::wgmma_commit();  // d may be touched again only after a wait covers this group
    };
    if constexpr (Tile::kPartialSets == 2) {
      issue(partial[0], 0);
      issue(partial[1 % Tile::kPartialSets], 1);
      hopper::wgmma_wait<1>();
      hopper::pin(partial[0]);
      promote<Tile>(acc, partial[0], a_words, w_word0, w_word1, 0);
      issue(partial[0], 2);
      hopper::wgmma_wait<1>();
      hopper::pin(partial[1 % Tile::kPartialSets]);
      promote<Tile>(acc, partial[1 % Tile::kPartialSets], a_words, w_word0, w_word1, 1);
      issue(partial[1 % Tile::kPartialSets], 3);
      hopper::wgmma_wait<1>();
      hopper::pin(partial[0]);
      promote<Tile>(acc, partial[0], a_words, w_word0, w_word1, 2);
      hopper::wgmma_wait<0>();
      hopper::pin(partial[1 % Tile::kPartialSets]);
      promote<Tile>(acc, partial[1 % Tile::kPartialSets], a_words, w_word0, w_word1, 3);
    } else {
#pragma unroll
      for (int block = 0; block < 4; ++block) {
        issue(partial[0], block);
        hopper::wgmma_wait<0>();
        hopper::pin(partial[0]);
        promote<Tile>(acc, partial[0], a_words, w_word0, w_word1, block);
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
  using namespace decode_detail;
  extern __shared__ std::uint8_t smem_raw[];
  const std::uint32_t raw = ptx::smem_address(smem_raw);
  const std::uint32_t smem = (raw + 1023u) & ~1023u;
  std::uint8_t* const smem_ptr = smem_raw + (smem - raw);
  const std::uint32_t full = smem + Tile::kBarrierOffset;
  const std::uint32_t empty = full + 8 * Tile::kStages;

  const int n0 = static_cast<int>(blockIdx.x) * Tile::kRows;
  const int split = static_cast<int>(blockIdx.y);
  const int splits = static_cast<int>(gridDim.y);
  const int t0 = static_cast<int>(blockIdx.z) * Tile::kTokens;
  const int k_chunks = p.k / Tile::kBK;
  const int c_begin = split * k_chunks / splits;
  const int c_end = (split + 1) * k_chunks / splits;

  if (threadIdx.x == 0) {
    for (int s = 0; s < Tile::kStages; ++s) {
      hopper::mbarrier_init(full + 8 * s, 1 + 32);  // expect_tx arrive + 32 cp.async arrivals
      hopper::mbarrier_init(empty + 8 * s, 4);      // one per consumer warp
    }
    hopper::fence_mbarrier_init();
  }
  if (threadIdx.x == Tile::kConsumerThreads) {
    hopper::prefetch_tensor_map(&w_map);
    hopper::prefetch_tensor_map(&a_map);
  }
  __syncthreads();
  hopper::allow_dependent_launch();

  float acc[Tile::kPartialRegs];
#pragma unroll
  for (int i = 0; i < Tile::kPartialRegs; ++i) acc[i] = 0.0f;
  // The role as a warp-uniform value ptxas can see (as CUTLASS does), so wgmma is not treated
  // as divergent code.
  const int warpgroup = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x) / 128, 0);
  if (warpgroup == 1) {
    produce<Tile>(p, &w_map, &a_map, smem, full, empty, c_begin, c_end, n0, t0);
  } else {
    // The output may still be read by the kernel before us: wait before anything is written.
    hopper::wait_prerequisite_grids();
    consume<Tile>(acc, smem, smem_ptr, full, empty, c_end - c_begin);
    // This split's tile, token-major, for the cluster reduction; it reuses the f16 buffer, which
    // every warp's last wgmma has finished reading.
    hopper::named_barrier_sync(1, Tile::kConsumerThreads);
    float* tile = reinterpret_cast<float*>(smem_ptr + Tile::kReduceOffset);
    const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
#pragma unroll
    for (int i = 0; i < Tile::kPartialRegs; ++i) {
      const int row = 16 * warp + (lane >> 2) + 8 * ((i >> 1) & 1);
      const int token = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
      tile[token * Tile::kRows + row] = acc[i];
    }
  }
  hopper::cluster_sync();

  // Split r adds rows [r * 64 / splits, (r + 1) * 64 / splits) of every split's tile, in split
  // order, then adds the bias, rounds once and stores.
  const int row_begin = split * Tile::kRows / splits;
  const int rows = (split + 1) * Tile::kRows / splits - row_begin;
  const std::uint32_t tile_address = smem + Tile::kReduceOffset;
  for (int e = static_cast<int>(threadIdx.x); e < rows * Tile::kTokens; e += Tile::kThreads) {
    const int token = e / rows;
    const int row = row_begin + e % rows;
    const int n = n0 + row, m = t0 + token;
    if (n >= p.n || m >= p.m) continue;
    const std::uint32_t local =
        tile_address + 4u * static_cast<std::uint32_t>(token * Tile::kRows + row);
    float sum = hopper::load_cluster_shared(local, 0);
    for (int r = 1; r < splits; ++r) sum += hopper::load_cluster_shared(local, r);
    if (p.bias_type != BiasType::kNone) sum += epilogue::load_bias(p, n);
    epilogue::store_one(p, m, n, sum);
  }
  // No CTA may leave while a peer still reads its tile.
  hopper::cluster_sync();
}

}  // namespace mxlinear::device
