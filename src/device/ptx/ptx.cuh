// One small wrapper per PTX instruction the kernels use. Device code only.
#pragma once

#include <cstdint>

namespace mxlinear::device::ptx {

__device__ __forceinline__ std::uint32_t smem_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy; bytes past src_bytes (0 or 16) are zero-filled, so out-of-range
// rows and K tails read as zeros without a branch around the copy.
__device__ __forceinline__ void cp_async_16(std::uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}

// 4-byte global->shared copy (both addresses 4-byte aligned), zero-filled past src_bytes.
__device__ __forceinline__ void cp_async_4(std::uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

// A 4-byte store to a shared-memory address in the form cp.async takes its destinations.
__device__ __forceinline__ void st_shared_u32(std::uint32_t dst, std::uint32_t value) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(dst), "r"(value) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  static_assert(kPending >= 0 && kPending < 8, "cp.async.wait_group takes 0..7");
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i. On byte data a
// thread receives 4 consecutive bytes of one row: the e4m3 mma fragment layout.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Four e4m3 bytes -> two f16x2 (bytes 0,1 -> lo; bytes 2,3 -> hi; low byte to the low half).
// Exact: every e4m3 value, NaN included, is an f16 value.
__device__ __forceinline__ void e4m3x4_to_f16x2x2(std::uint32_t x, std::uint32_t& lo,
                                                  std::uint32_t& hi) {
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\n"
      "cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(x));
}

// Four e4m3 bytes -> two bf16x2, in e4m3x4_to_f16x2x2's layout. Exact: e4m3 -> f16 exactly,
// f16 -> f32 exactly, and every e4m3 value (at most 4 significant bits, magnitudes 2^-9 .. 448,
// or zero) is a normal bf16 number, so the rounding pack changes nothing; NaN stays NaN.
__device__ __forceinline__ void e4m3x4_to_bf16x2x2(std::uint32_t x, std::uint32_t& lo,
                                                   std::uint32_t& hi) {
  asm("{\n.reg .b16 l, h, l0, l1, h0, h1;\n.reg .b32 fl, fh;\n.reg .f32 a0, a1, b0, b1;\n"
      "mov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 fl, l;\ncvt.rn.f16x2.e4m3x2 fh, h;\n"
      "mov.b32 {l0, l1}, fl;\nmov.b32 {h0, h1}, fh;\n"
      "cvt.f32.f16 a0, l0;\ncvt.f32.f16 a1, l1;\ncvt.f32.f16 b0, h0;\ncvt.f32.f16 b1, h1;\n"
      "cvt.rn.bf16x2.f32 %0, a1, a0;\ncvt.rn.bf16x2.f32 %1, b1, b0;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(x));
}

// Two fp32 -> e4m3x2, round to nearest even, saturating to +-448 (hi -> high byte).
__device__ __forceinline__ std::uint16_t f32x2_to_e4m3x2(float hi, float lo) {
  std::uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// Per 16-bit half, the larger unsigned value (sm_90's packed integer max).
__device__ __forceinline__ std::uint32_t max_u16x2(std::uint32_t a, std::uint32_t b) {
  std::uint32_t r;
  asm("max.u16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// The smaller of each pair of unsigned 16-bit halves.
__device__ __forceinline__ std::uint32_t min_u16x2(std::uint32_t a, std::uint32_t b) {
  std::uint32_t r;
  asm("min.u16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// D = A * B + C, m16n8k16, f16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], const std::uint32_t (&a)[4],
                                              std::uint32_t b0, std::uint32_t b1,
                                              const float (&c)[4]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}

// D = A * B + C, m16n8k16, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const std::uint32_t (&a)[4],
                                               std::uint32_t b0, std::uint32_t b1,
                                               const float (&c)[4]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}

}  // namespace mxlinear::device::ptx
