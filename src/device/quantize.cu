// Activation quantization: 4 threads per MX block, 8 elements per thread, so the block's amax and
// its "any non-finite" flag are two shuffles away and every thread stores 8 bytes at once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device/hopper_ptx.cuh"
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

template <InType kIn, bool kVector>
__global__ void __launch_bounds__(kThreadsPerBlock) quantize_kernel(const QuantizeParams p) {
  // A GEMM launched next as a programmatic dependent (the decode kernel) may start now: it
  // prefetches static weights and reads what this kernel writes only after griddepcontrol.wait.
  // A no-op for kernels launched normally.
  hopper::allow_dependent_launch();
  using Traits = InputTraits<kIn>;
  using T = typename Traits::T;
  const int groups_per_row = p.k / kElemsPerThread;
  const std::int64_t total = static_cast<std::int64_t>(p.m) * groups_per_row;
  // The grid covers `total` rounded up to whole warps, so every lane reaches the shuffles.
  const std::int64_t id = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool active = id < total;
  const std::int64_t row = active ? id / groups_per_row : 0;
  const int col = active ? static_cast<int>(id % groups_per_row) * kElemsPerThread : 0;

  float v[kElemsPerThread];
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
}

template <InType kIn>
cudaError_t launch_typed(const QuantizeParams& p, bool vector, cudaStream_t stream) {
  const std::int64_t threads = static_cast<std::int64_t>(p.m) * (p.k / kElemsPerThread);
  const std::int64_t blocks = (threads + kThreadsPerBlock - 1) / kThreadsPerBlock;
  if (blocks > 0x7FFFFFFF) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned>(blocks));
  if (vector) {
    quantize_kernel<kIn, true><<<grid, kThreadsPerBlock, 0, stream>>>(p);
  } else {
    quantize_kernel<kIn, false><<<grid, kThreadsPerBlock, 0, stream>>>(p);
  }
  return cudaGetLastError();
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
