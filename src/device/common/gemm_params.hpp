// What a GEMM launch needs, as plain data shared by host launchers and device kernels.
#pragma once

#include <cstdint>

namespace mxlinear::device {

enum class OutType : std::uint8_t { kBF16, kF16, kF32 };
enum class BiasType : std::uint8_t { kNone, kBF16, kF32 };

// Where a GEMV CTA lets the next programmatically dependent kernel start launching: once its
// activation is staged, right after its wait on the previous kernel, or at its entry. Earlier
// lets the next kernel's CTAs take SM slots and start their weight copies sooner; later keeps
// them off the SMs while this kernel stages its activation. Which is faster depends on the layer,
// so it is part of the GEMV's configs. The other kernels ignore it.
enum class NextLaunch : std::uint8_t { kAfterActivation, kAfterWait, kAtEntry };

// out[m, n] = sum_k deq(a)[m, k] * deq(w)[n, k] (+ bias[n]) (W8A8), or the same with x as it is
// in place of deq(a) (W8A16, x_as_is). Strides are in elements.
struct GemmParams {
  const std::uint8_t* a = nullptr;         // [M, K] e4m3, rows 16-byte aligned
  const std::uint8_t* a_scales = nullptr;  // [M, K/32] e8m0
  const std::uint8_t* w = nullptr;         // [N, K] e4m3, rows 16-byte aligned
  const std::uint8_t* w_scales = nullptr;  // [N, K/32] e8m0
  const void* bias = nullptr;              // [N]
  void* out = nullptr;                     // [M, N] with row stride ld_out
  std::int64_t ld_a = 0, ld_a_scales = 0, ld_w = 0, ld_w_scales = 0, ld_out = 0;
  int m = 0, n = 0, k = 0;
  OutType out_type = OutType::kBF16;
  BiasType bias_type = BiasType::kNone;
  // Both scale matrices have 4-byte aligned rows (base and stride), so the pipeline can copy a
  // stage's 4 scale bytes per row with cp.async; otherwise they are read from global memory.
  bool scales_via_cp_async = false;
  // The caller's [M, K] bf16 or fp16 activation (stride ld_x elements), read instead of a and
  // a_scales when set: the GEMV quantizes it with RCEIL exactly as the quantize kernel would, or
  // with x_as_is multiplies it as it is. The GEMV needs 16-byte aligned rows; the generic
  // kernel (x_as_is) takes rows of any 2-byte alignment.
  const void* x = nullptr;
  std::int64_t ld_x = 0;
  bool x_is_f16 = false;
  // W8A16 (docs/MXFP8.md): with x set, multiply deq(w) by x as it is, with no quantization, for
  // out[m, n] = sum_k x[m, k] * deq(w)[n, k] (+ bias[n]). Every product is exact in fp32 (an
  // e4m3 significand has 4 bits, a bf16 one 8 and an fp16 one 11). a and a_scales are unused.
  bool x_as_is = false;
  NextLaunch next_launch = NextLaunch::kAfterActivation;
  // The prefill kernel's stream-K configs: one fp32 partial tile per CTA and one flag word per
  // CTA, zero when the kernel starts (the pass before it zeroes them: ZeroedWords), for at most
  // stream_k_ctas CTAs: the launcher caps its grid there, so partials and flags sized for one
  // device are never overrun on a device of more SMs. Read by the launcher only.
  float* partials = nullptr;
  std::uint32_t* flags = nullptr;
  int stream_k_ctas = 0;
  // The prefill kernel's K splits met in memory instead of over a thread-block cluster, when
  // split_tiles is set: one fp32 tile per CTA (split_tile_floats floats in all) and one arrival
  // word per output tile (split_arrival_words in all), zero when the kernel starts (the pass
  // before it zeroes them: ZeroedWords). The launcher checks both counts against its grid.
  float* split_tiles = nullptr;
  std::uint32_t* split_arrivals = nullptr;
  std::int64_t split_tile_floats = 0;
  int split_arrival_words = 0;
  // The prefill kernel's k-parts tiles wider than 128 x 128: one fp32 tile per SM (%smid) where
  // a CTA keeps the sum of the K parts it has finished, for at least every SM of the device (the
  // launcher checks). Such a tile's shared memory holds one CTA an SM, so the slot is its own.
  float* part_sums = nullptr;
  int part_sum_slots = 0;
};

}  // namespace mxlinear::device
