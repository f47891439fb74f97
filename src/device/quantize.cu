// Activation quantization: 4 threads per MX block, 8 elements per thread, so the block's amax and
// its "any non-finite" flag are two shuffles away and every thread stores 8 bytes at once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device/grid_walk.hpp"
#include "device/hopper_ptx.cuh"
#include "device/launch_util.hpp"
#include "device/mx_convert.cuh"
#include "device/ptx.cuh"
#include "device/quantize.hpp"

namespace mxlinear::device {
namespace {

constexpr int kElemsPerThread = 8;
constexpr int kThreadsPerBlock = 256;

template <InType kIn>
struct InputTraits;
template <>
struct InputTraits<InType::kBF16> {
  using T = __nv_bfloat16;
  static __device__ float widen(T v) { return __bfloat162float(v); }
};
template <>
struct InputTraits<InType::kF16> {
  using T = __half;
  static __device__ float widen(T v) { return __half2float(v); }
};
template <>
struct InputTraits<InType::kF32> {
  using T = float;
  static __device__ float widen(T v) { return v; }
};

// A group: 8 consecutive elements of a row, starting at element `col` (a multiple of 8).
struct Group {
  int row, col;
};

// Loads a group widened to fp32 (zeros where inactive).
template <InType kIn, bool kVector>
__device__ __forceinline__ void load_group(const QuantizeParams& p, Group g, bool active,
                                           float (&v)[kElemsPerThread]) {
  using Traits = InputTraits<kIn>;
  using T = typename Traits::T;
  const std::int64_t row = active ? g.row : 0;
  const int col = active ? g.col : 0;
  const T* src = static_cast<const T*>(p.x) + row * p.ld_x + col;
  if constexpr (kVector) {
    constexpr int kVecs = kElemsPerThread * sizeof(T) / 16;
    uint4 raw[kVecs];
#pragma unroll
    for (int i = 0; i < kVecs; ++i)
      raw[i] = active ? __ldg(reinterpret_cast<const uint4*>(src) + i) : uint4{};
    const T* elems = reinterpret_cast<const T*>(raw);
#pragma unroll
    for (int i = 0; i < kElemsPerThread; ++i) v[i] = Traits::widen(elems[i]);
  } else {
#pragma unroll
    for (int i = 0; i < kElemsPerThread; ++i) v[i] = active ? Traits::widen(src[i]) : 0.0f;
  }
}

// Quantizes one group: the 4 lanes of its MX block share amax and the non-finite flag by two
// shuffles (every lane of the warp takes part), then each active lane stores its 8 bytes and
// the block's first lane its scale; with kDequantize also the group's bf16 dequantized values
// where the activation pre-pass puts them (the same conversion, so the same bits).
template <bool kDequantize>
__device__ __forceinline__ void quantize_group(const QuantizeParams& p, Group g, bool active,
                                               const float (&v)[kElemsPerThread]) {
  float amax = 0.0f;
  bool non_finite = false;
#pragma unroll
  for (int i = 0; i < kElemsPerThread; ++i) {
    non_finite |= !isfinite(v[i]);
    amax = fmaxf(amax, fabsf(v[i]));
  }
#pragma unroll
  for (int offset = 1; offset < 4; offset <<= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    non_finite |= __shfl_xor_sync(0xffffffffu, static_cast<int>(non_finite), offset) != 0;
  }
  if (!active) return;
  const std::int64_t row = g.row;
  const int col = g.col;

  std::uint8_t scale = kE8M0NaN;
  uint2 packed = make_uint2(0x7F7F7F7Fu, 0x7F7F7F7Fu);
  if (!non_finite) {
    scale = e8m0_scale_for_amax(amax, p.rule);
    const float inverse = e8m0_inverse_to_float(scale);
    std::uint32_t words[2];
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const std::uint32_t lo = ptx::f32x2_to_e4m3x2(v[4 * w + 1] * inverse, v[4 * w] * inverse);
      const std::uint32_t hi = ptx::f32x2_to_e4m3x2(v[4 * w + 3] * inverse, v[4 * w + 2] * inverse);
      words[w] = lo | (hi << 16);
    }
    packed = make_uint2(words[0], words[1]);
  }
  *reinterpret_cast<uint2*>(p.q + row * p.ld_q + col) = packed;
  if ((col % kBlockSize) == 0) p.scales[row * p.ld_s + col / kBlockSize] = scale;
  if constexpr (kDequantize) {
    // Bytes 8t..8t+7 of a block become bf16 pairs at positions 2t, 8 + 2t, 16 + 2t, 24 + 2t.
    const float s = mx::scale_from_byte(scale);
    std::uint32_t out[4];
    mx::e4m3x4_scaled_to_bf16x2x2(packed.x, s, out[0], out[1]);
    mx::e4m3x4_scaled_to_bf16x2x2(packed.y, s, out[2], out[3]);
    const int block = col / kBlockSize, t = (col % kBlockSize) / kElemsPerThread;
    auto* dst =
        static_cast<std::uint16_t*>(p.dequantized) + row * p.ld_dq + kBlockSize * block + 2 * t;
#pragma unroll
    for (int i = 0; i < 4; ++i) *reinterpret_cast<std::uint32_t*>(dst + 8 * i) = out[i];
  }
}

// A grid of at most a few CTAs per SM walks the groups (4 per MX block) in row-major order:
// each warp takes 32 consecutive groups and the 32 one grid-stride later, and loads the next
// pair before it quantizes the current one, so loads stay in flight across iterations (v2
// loaded only after its stores and streamed no faster than v1). Positions advance by a fixed
// (rows, groups) step (GroupWalk): no division per group.
template <InType kIn, bool kVector, bool kDequantize>
__global__ void __launch_bounds__(kThreadsPerBlock) quantize_kernel(const QuantizeParams p) {
  // Launched as a programmatic dependent itself: the previous kernel (say the previous layer's
  // GEMM, which may still read the workspace this kernel writes, or the producer of x) must
  // finish first; only the launch and the CTAs' start overlap its tail.
  hopper::wait_prerequisite_grids();
  // A GEMM launched next as a programmatic dependent may start now: it prefetches static
  // weights and reads what this kernel writes only after griddepcontrol.wait.
  hopper::allow_dependent_launch();
  const int groups_per_row = p.k / kElemsPerThread;
  const std::int64_t total = static_cast<std::int64_t>(p.m) * groups_per_row;
  const int stride = static_cast<int>(gridDim.x) * kThreadsPerBlock;  // the grid's groups
  const int first = static_cast<int>(blockIdx.x) * kThreadsPerBlock + static_cast<int>(threadIdx.x);
  // Two walks of step 2 * stride: this thread's groups first + 2i * stride and the ones a stride
  // later.
  GroupWalk w0(first, 2 * stride, groups_per_row), w1(first + stride, 2 * stride, groups_per_row);
  auto group_of = [](GroupPosition g) { return Group{g.row, g.group * kElemsPerThread}; };
  GroupPosition g0 = w0.at, g1 = w1.at;
  float v0[kElemsPerThread], v1[kElemsPerThread];
  load_group<kIn, kVector>(p, group_of(g0), g0.row < p.m, v0);
  load_group<kIn, kVector>(p, group_of(g1), g1.row < p.m, v1);
  // Warp-uniform loop bounds (the warp's first group), so every lane reaches the shuffles.
  for (std::int64_t base = first - (static_cast<int>(threadIdx.x) & 31); base < total;
       base += 2 * stride) {
    w0.advance();
    w1.advance();
    const GroupPosition n0 = w0.at, n1 = w1.at;
    float next0[kElemsPerThread], next1[kElemsPerThread];
    load_group<kIn, kVector>(p, group_of(n0), n0.row < p.m, next0);
    load_group<kIn, kVector>(p, group_of(n1), n1.row < p.m, next1);
    quantize_group<kDequantize>(p, group_of(g0), g0.row < p.m, v0);
    quantize_group<kDequantize>(p, group_of(g1), g1.row < p.m, v1);
#pragma unroll
    for (int i = 0; i < kElemsPerThread; ++i) {
      v0[i] = next0[i];
      v1[i] = next1[i];
    }
    g0 = n0;
    g1 = n1;
  }
}

// One resident wave of CTAs (64 registers a thread hold an SM to 4 CTAs of 256).
template <auto kKernel>
cudaError_t launch_walk(const QuantizeParams& p, cudaStream_t stream) {
  dim3 grid;
  if (cudaError_t e = one_wave_grid<kKernel>(
          static_cast<std::int64_t>(p.m) * (p.k / kElemsPerThread), kThreadsPerBlock, grid);
      e != cudaSuccess) {
    return e;
  }
  return launch_programmatic(kKernel, grid, dim3(kThreadsPerBlock), 0, stream, 0, p);
}

template <InType kIn>
cudaError_t launch_typed(const QuantizeParams& p, bool vector, cudaStream_t stream) {
  const bool dequantize = p.dequantized != nullptr;
  if (vector && dequantize) return launch_walk<quantize_kernel<kIn, true, true>>(p, stream);
  if (vector) return launch_walk<quantize_kernel<kIn, true, false>>(p, stream);
  if (dequantize) return launch_walk<quantize_kernel<kIn, false, true>>(p, stream);
  return launch_walk<quantize_kernel<kIn, false, false>>(p, stream);
}

}  // namespace

cudaError_t launch_quantize(const QuantizeParams& p, cudaStream_t stream) {
  if (p.m == 0) return cudaSuccess;
  const std::size_t elem = p.in_type == InType::kF32 ? 4 : 2;
  // 16-byte loads need 16-byte aligned rows; anything else takes the element-wise path.
  const bool vector = reinterpret_cast<std::uintptr_t>(p.x) % 16 == 0 &&
                      (static_cast<std::size_t>(p.ld_x) * elem) % 16 == 0;
  switch (p.in_type) {
    case InType::kBF16:
      return launch_typed<InType::kBF16>(p, vector, stream);
    case InType::kF16:
      return launch_typed<InType::kF16>(p, vector, stream);
    case InType::kF32:
      return launch_typed<InType::kF32>(p, vector, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mxlinear::device
