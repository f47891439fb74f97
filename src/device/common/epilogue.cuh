// Output stage shared by the GEMM kernels: bias, rounding once to the output type, stores.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "device/common/gemm_params.hpp"

namespace mxlinear::device::epilogue {

__device__ __forceinline__ float load_bias(const GemmParams& p, int col) {
  if (p.bias_type == BiasType::kF32) return static_cast<const float*>(p.bias)[col];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias)[col]);
}

template <class T>
struct OutputTraits;
template <>
struct OutputTraits<__nv_bfloat16> {
  using Pair = __nv_bfloat162;
  static __device__ __nv_bfloat16 one(float v) { return __float2bfloat16_rn(v); }
  static __device__ Pair two(float a, float b) { return __floats2bfloat162_rn(a, b); }
};
template <>
struct OutputTraits<__half> {
  using Pair = __half2;
  static __device__ __half one(float v) { return __float2half_rn(v); }
  static __device__ Pair two(float a, float b) { return __floats2half2_rn(a, b); }
};
template <>
struct OutputTraits<float> {
  using Pair = float2;
  static __device__ float one(float v) { return v; }
  static __device__ Pair two(float a, float b) { return make_float2(a, b); }
};

// Stores out[row, col] and out[row, col + 1] (the second only if col + 1 < N), rounding once.
template <class T>
__device__ __forceinline__ void store_pair_as(const GemmParams& p, bool pairs_aligned, int row,
                                              int col, float v0, float v1) {
  using Traits = OutputTraits<T>;
  T* out = static_cast<T*>(p.out) + static_cast<std::int64_t>(row) * p.ld_out + col;
  const bool both = col + 1 < p.n;
  if (both && pairs_aligned) {
    *reinterpret_cast<typename Traits::Pair*>(out) = Traits::two(v0, v1);
  } else {
    out[0] = Traits::one(v0);
    if (both) out[1] = Traits::one(v1);
  }
}

__device__ __forceinline__ void store_pair(const GemmParams& p, bool pairs_aligned, int row,
                                           int col, float v0, float v1) {
  switch (p.out_type) {
    case OutType::kBF16:
      return store_pair_as<__nv_bfloat16>(p, pairs_aligned, row, col, v0, v1);
    case OutType::kF16:
      return store_pair_as<__half>(p, pairs_aligned, row, col, v0, v1);
    case OutType::kF32:
      return store_pair_as<float>(p, pairs_aligned, row, col, v0, v1);
  }
}

// Stores out[row, col .. col + kCount - 1], each rounded once, as 16-byte stores (one 8-byte
// store for four 16-bit values): for 16-byte aligned rows, col a multiple of kCount and
// col + kCount <= N.
template <class T, int kCount>
__device__ __forceinline__ void store_vector(const GemmParams& p, int row, int col,
                                             const float (&v)[kCount]) {
  static_assert(kCount == 4 || kCount == 8, "runs of 4 or 8 outputs");
  using Traits = OutputTraits<T>;
  T* out = static_cast<T*>(p.out) + static_cast<std::int64_t>(row) * p.ld_out + col;
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < kCount / 4; ++i) {
      reinterpret_cast<float4*>(out)[i] =
          make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
    }
  } else {
    typename Traits::Pair pairs[kCount / 2];
#pragma unroll
    for (int i = 0; i < kCount / 2; ++i) pairs[i] = Traits::two(v[2 * i], v[2 * i + 1]);
    if constexpr (kCount == 4) {
      *reinterpret_cast<uint2*>(out) = *reinterpret_cast<const uint2*>(pairs);
    } else {
      *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(pairs);
    }
  }
}

// Stores out[row, col .. col + kCount - 1] (those below N), each rounded once: 16-byte stores
// (one 8-byte store for four 16-bit values) where `vector_aligned` (16-byte aligned rows, col a
// multiple of kCount) and all of them are in range.
template <class T, int kCount>
__device__ __forceinline__ void store_run_as(const GemmParams& p, bool vector_aligned, int row,
                                             int col, const float (&v)[kCount]) {
  static_assert(kCount == 4 || kCount == 8, "runs of 4 or 8 outputs");
  if (vector_aligned && col + kCount <= p.n) return store_vector<T, kCount>(p, row, col, v);
  using Traits = OutputTraits<T>;
  T* out = static_cast<T*>(p.out) + static_cast<std::int64_t>(row) * p.ld_out + col;
#pragma unroll
  for (int i = 0; i < kCount; ++i) {
    if (col + i < p.n) out[i] = Traits::one(v[i]);
  }
}

// store_run_as for p.out_type after adding the bias of the columns below N.
template <int kCount>
__device__ __forceinline__ void store_run_with_bias(const GemmParams& p, bool vector_aligned,
                                                    int row, int col, float (&v)[kCount]) {
  if (p.bias_type != BiasType::kNone) {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      if (col + i < p.n) v[i] += load_bias(p, col + i);
    }
  }
  switch (p.out_type) {
    case OutType::kBF16:
      return store_run_as<__nv_bfloat16>(p, vector_aligned, row, col, v);
    case OutType::kF16:
      return store_run_as<__half>(p, vector_aligned, row, col, v);
    case OutType::kF32:
      return store_run_as<float>(p, vector_aligned, row, col, v);
  }
}

// Whether every output row starts 16-byte aligned (store_run_as's vector path).
__device__ __forceinline__ bool rows_16_byte_aligned(const GemmParams& p) {
  const std::int64_t element = p.out_type == OutType::kF32 ? 4 : 2;
  return reinterpret_cast<std::uintptr_t>(p.out) % 16 == 0 && (p.ld_out * element) % 16 == 0;
}

// Stores out[row, col] = v, rounded once to the output type.
__device__ __forceinline__ void store_one(const GemmParams& p, int row, int col, float v) {
  const std::int64_t at = static_cast<std::int64_t>(row) * p.ld_out + col;
  switch (p.out_type) {
    case OutType::kBF16:
      static_cast<__nv_bfloat16*>(p.out)[at] = __float2bfloat16_rn(v);
      return;
    case OutType::kF16:
      static_cast<__half*>(p.out)[at] = __float2half_rn(v);
      return;
    case OutType::kF32:
      static_cast<float*>(p.out)[at] = v;
      return;
  }
}

}  // namespace mxlinear::device::epilogue
