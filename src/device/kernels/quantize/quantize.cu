// Activation quantization: 2 threads per MX block, 16 elements per thread, so the block's amax
// and its "any non-finite" flag are one shuffle away and every thread stores 16 bytes at once.
// The kernel is bound by instructions issued as much as by memory: per-group work (the walk, the
// scale, the shuffle, the addresses) is paid once per 16 elements (paying it per 8 was slower).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device/common/grid_walk.hpp"
#include "device/common/launch_util.hpp"
#include "device/common/mx_convert.cuh"
#include "device/kernels/quantize/quantize.hpp"
#include "device/ptx/hopper_ptx.cuh"
#include "device/ptx/ptx.cuh"

namespace mxlinear::device {
namespace {

constexpr int kElemsPerThread = 16;
static_assert(kBlockSize / kElemsPerThread == 2, "a block's lanes combine by mx::max_of_lane_pair");
constexpr int kThreadsPerBlock = 256;

template <InType kIn>
struct InputTraits;
template <>
struct InputTraits<InType::kBF16> {
  using T = __nv_bfloat16;
};
template <>
struct InputTraits<InType::kF16> {
  using T = __half;
};
template <>
struct InputTraits<InType::kF32> {
  using T = float;
};

// A group: 16 consecutive elements of a row, starting at element `col` (a multiple of 16).
struct Group {
  int row, col;
};

// A group's elements as loaded, widened to fp32 only when quantized: a 16-bit group is two
// 16-byte register quads, so a thread keeps several loads in flight in few registers.
template <InType kIn>
struct RawGroup {
  static constexpr int kBytes = kElemsPerThread * sizeof(typename InputTraits<kIn>::T);
  uint4 words[kBytes / 16];
};

// Element i of a loaded group.
template <InType kIn>
__device__ __forceinline__ float widen(const RawGroup<kIn>& raw, int i) {
  const auto* bits = reinterpret_cast<const std::uint32_t*>(raw.words);
  if constexpr (kIn == InType::kF32) {
    return __uint_as_float(bits[i]);
  } else {
    if constexpr (kIn == InType::kBF16) {
      return __uint_as_float(i % 2 == 0 ? bits[i / 2] << 16 : bits[i / 2] & 0xFFFF0000u);
    }
    return __half2float(
        __ushort_as_half(static_cast<unsigned short>(bits[i / 2] >> (16 * (i % 2)))));
  }
}

// Loads a group (zeros where inactive).
template <InType kIn, bool kVector>
__device__ __forceinline__ RawGroup<kIn> load_group(const QuantizeParams& p, Group g, bool active) {
  using T = typename InputTraits<kIn>::T;
  RawGroup<kIn> raw;
  const std::int64_t row = active ? g.row : 0;
  const int col = active ? g.col : 0;
  const T* src = static_cast<const T*>(p.x) + row * p.ld_x + col;
  if constexpr (kVector) {
#pragma unroll
    for (int i = 0; i < RawGroup<kIn>::kBytes / 16; ++i)
      raw.words[i] = active ? __ldg(reinterpret_cast<const uint4*>(src) + i) : uint4{};
  } else {
    // Element-wise (unaligned rows): each element's bits into its place in the words.
    constexpr int kPerWord = 4 / sizeof(T);
    auto* bits = reinterpret_cast<std::uint32_t*>(raw.words);
#pragma unroll
    for (int w = 0; w < RawGroup<kIn>::kBytes / 4; ++w) {
      std::uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < kPerWord; ++j) {
        std::uint32_t e = 0;
        if (active) {
          if constexpr (sizeof(T) == 4) {
            e = __float_as_uint(static_cast<float>(src[w]));
          } else {
            e = reinterpret_cast<const unsigned short*>(src)[w * kPerWord + j];
          }
        }
        word |= e << (16 * j);
      }
      bits[w] = word;
    }
  }
  return raw;
}

// Stores a group's bf16 values in the prefill kernel's layout, the block's at `dst`: piece[i]
// holds this lane's positions 4h .. 4h + 3 of the block's 8-element stripe i (h = upper: the
// half of the block the group is). The lane pair swaps half of the pieces so that each lane stores
// stripes h and 2 + h whole (16 bytes; its partner the other 16 of the same 32-byte sector in the
// same instruction): stored as they are, the pieces put 4 partial writes on every sector, and the
// L2's write operations, not DRAM, then bound the pass (v8's first version ran 2x slower). Every
// lane of the warp must call it (shuffles); inactive lanes store nothing.
__device__ __forceinline__ void store_pieces(std::uint16_t* dst, bool upper, bool active,
                                             const uint2 (&piece)[4]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // This lane stores stripe 2r + h and sends its piece of stripe 2r + (1 - h).
    const uint2 mine = upper ? piece[2 * r + 1] : piece[2 * r];
    const uint2 send = upper ? piece[2 * r] : piece[2 * r + 1];
    const uint2 got = make_uint2(__shfl_xor_sync(0xFFFFFFFFu, send.x, 1),
                                 __shfl_xor_sync(0xFFFFFFFFu, send.y, 1));
    const uint4 stripe =
        upper ? make_uint4(got.x, got.y, mine.x, mine.y) : make_uint4(mine.x, mine.y, got.x, got.y);
    if (active) *reinterpret_cast<uint4*>(dst + 8 * (2 * r + (upper ? 1 : 0))) = stripe;
  }
}

// Quantizes one group: the 2 lanes of its MX block share amax and the non-finite flag by one
// shuffle, then each active lane stores its 16 bytes and the block's first lane its scale; with
// kDequantize also the group's bf16 dequantized values where the activation pre-pass puts them
// (the same conversion, so the same bits). Every lane of the warp runs it to the end (shuffles);
// inactive lanes (rows past M) hold zeros and store nothing.
template <InType kIn, bool kDequantize>
__device__ __forceinline__ void quantize_group(const QuantizeParams& p, Group g, bool active,
                                               const RawGroup<kIn>& raw) {
  // The block's largest magnitude as sign-cleared bits (inactive lanes hold zeros).
  const auto* bits = reinterpret_cast<const std::uint32_t*>(raw.words);
  std::uint32_t magnitude;
  if constexpr (kIn == InType::kF32) {
    magnitude = mx::max_magnitude_bits_32<kElemsPerThread>(bits);
  } else {
    magnitude = mx::max_magnitude_bits_16<kElemsPerThread / 2>(bits);
  }
  magnitude = mx::max_of_lane_pair(magnitude);
  const std::int64_t row = g.row;
  const int col = g.col;

  float amax;
  std::uint32_t non_finite_from;  // the smallest Inf/NaN pattern
  if constexpr (kIn == InType::kF32) {
    amax = __uint_as_float(magnitude);
    non_finite_from = 0x7F800000u;
  } else if constexpr (kIn == InType::kBF16) {
    amax = __uint_as_float(magnitude << 16);
    non_finite_from = 0x7F80u;
  } else {
    amax = __half2float(__ushort_as_half(static_cast<unsigned short>(magnitude)));
    non_finite_from = 0x7C00u;
  }
  float v[kElemsPerThread];
#pragma unroll
  for (int i = 0; i < kElemsPerThread; ++i) v[i] = widen<kIn>(raw, i);
  std::uint32_t words[kElemsPerThread / 4];
  const std::uint8_t scale =
      mx::quantize_values(v, amax, magnitude >= non_finite_from, p.rule, words);
  const auto block = static_cast<unsigned>(col) / kBlockSize;
  const bool upper = (static_cast<unsigned>(col) % kBlockSize) != 0;  // the block's second half
  if (active && p.q != nullptr) {
    // Rows of q are 16-byte aligned (the API requires it of its output and of the workspace).
    *reinterpret_cast<uint4*>(p.q + row * p.ld_q + col) =
        make_uint4(words[0], words[1], words[2], words[3]);
    if (!upper) p.scales[row * p.ld_s + block] = scale;
  }
  if constexpr (kDequantize) {
    // Bytes 8t..8t+7 of a block become bf16 pairs at positions 2t, 8 + 2t, 16 + 2t, 24 + 2t,
    // so this lane (t = 2h, 2h + 1 for its half h) holds 4 bf16 at 8i + 4h of each 8-element
    // stripe i = 0..3 (store_pieces).
    const float s = mx::scale_from_byte(scale);
    uint2 piece[4];  // piece[i]: stripe i's positions 4h .. 4h + 3
    {
      std::uint32_t lo[4], hi[4];
      mx::e4m3x4_scaled_to_bf16x2x2(words[0], s, lo[0], lo[1]);
      mx::e4m3x4_scaled_to_bf16x2x2(words[1], s, lo[2], lo[3]);
      mx::e4m3x4_scaled_to_bf16x2x2(words[2], s, hi[0], hi[1]);
      mx::e4m3x4_scaled_to_bf16x2x2(words[3], s, hi[2], hi[3]);
#pragma unroll
      for (int i = 0; i < 4; ++i) piece[i] = make_uint2(lo[i], hi[i]);
    }
    store_pieces(static_cast<std::uint16_t*>(p.dequantized) + row * p.ld_dq + kBlockSize * block,
                 upper, active, piece);
  }
}

// W8A16: a bf16 group copied as it is into the layout quantize_group<kIn, true> writes. The
// group's 16 values are 8 words, element 2i in the low half of word i; byte j of the e4m3 words
// above is value j, so the pieces take the same pairs: stripe i's 4 positions of this lane are
// values 2i, 2i + 1 (word i) and 8 + 2i, 9 + 2i (word 4 + i). The lane pair trades pieces as
// there, so that each lane stores whole 16-byte stripes.
__device__ __forceinline__ void copy_group_as_is(const QuantizeParams& p, Group g, bool active,
                                                 const RawGroup<InType::kBF16>& raw) {
  const auto* bits = reinterpret_cast<const std::uint32_t*>(raw.words);
  uint2 piece[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) piece[i] = make_uint2(bits[i], bits[4 + i]);
  const auto block = static_cast<unsigned>(g.col) / kBlockSize;
  store_pieces(static_cast<std::uint16_t*>(p.dequantized) +
                   static_cast<std::int64_t>(g.row) * p.ld_dq + kBlockSize * block,
               (static_cast<unsigned>(g.col) % kBlockSize) != 0, active, piece);
}

// A grid of one resident wave walks the groups (2 per MX block) in row-major order: a warp
// takes kWalks runs of 32 consecutive groups, a grid-stride apart, and loads the next kWalks
// groups before it quantizes the current ones, so 64 bytes of loads per thread stay in flight
// across iterations (keeping 32 streamed at 70% of the read ceiling counting the bytes
// written). Positions advance by a fixed (rows, groups) step: no division per group.
template <InType kIn>
constexpr int kWalksFor = 64 / RawGroup<kIn>::kBytes;
// Three CTAs per SM (up to 85 registers a thread) hold 48 KiB of loads in flight per SM; left
// alone, ptxas capped the bf16 kernel at 64 registers and spilled.
constexpr int kMinResidentCtas = 3;

// kAsIs: W8A16's copy of a bf16 x (copy_group_as_is) in place of quantize_group.
template <InType kIn, bool kVector, bool kDequantize, bool kAsIs = false>
__global__ void __launch_bounds__(kThreadsPerBlock, kMinResidentCtas)
    quantize_kernel(const QuantizeParams p) {
  static_assert(!kAsIs || (kIn == InType::kBF16 && kDequantize), "W8A16 copies a bf16 x");
  // A GEMM launched next as a programmatic dependent may start at once: it prefetches static
  // weights and reads what this kernel writes only after griddepcontrol.wait. Letting it launch
  // here rather than past this kernel's wait took the decode step at M = 32 from 2.385 to
  // 2.331 ms (M = 128 level).
  hopper::allow_dependent_launch();
  // Launched as a programmatic dependent itself: the previous kernel (say the previous layer's
  // GEMM, which may still read the workspace this kernel writes, or the producer of x) must
  // finish first; only the launch and the CTAs' start overlap its tail.
  hopper::wait_prerequisite_grids();
  p.zero_for_next.zero();
  const int groups_per_row = p.k / kElemsPerThread;
  const std::int64_t total = static_cast<std::int64_t>(p.m) * groups_per_row;
  const int stride = static_cast<int>(gridDim.x) * kThreadsPerBlock;  // the grid's groups
  const int first = static_cast<int>(blockIdx.x) * kThreadsPerBlock + static_cast<int>(threadIdx.x);
  auto group_of = [](GroupPosition g) { return Group{g.row, g.group * kElemsPerThread}; };
  // Walk i visits first + (i + kWalks * j) * stride, j = 0, 1, ...
  constexpr int kWalks = kWalksFor<kIn>;
  const GroupStepper stepper(kWalks * stride, groups_per_row);
  GroupPosition at[kWalks];
  RawGroup<kIn> current[kWalks];
#pragma unroll
  for (int i = 0; i < kWalks; ++i) {
    at[i] = stepper.position(first + i * stride);
    current[i] = load_group<kIn, kVector>(p, group_of(at[i]), at[i].row < p.m);
  }
  // Warp-uniform loop bounds (the warp's first group), so every lane reaches the shuffles.
  for (std::int64_t base = first - (static_cast<int>(threadIdx.x) & 31); base < total;
       base += kWalks * static_cast<std::int64_t>(stride)) {
    GroupPosition next_at[kWalks];
    RawGroup<kIn> next[kWalks];
#pragma unroll
    for (int i = 0; i < kWalks; ++i) {
      next_at[i] = at[i];
      stepper.advance(next_at[i]);
      next[i] = load_group<kIn, kVector>(p, group_of(next_at[i]), next_at[i].row < p.m);
    }
#pragma unroll
    for (int i = 0; i < kWalks; ++i) {
      if constexpr (kAsIs) {
        copy_group_as_is(p, group_of(at[i]), at[i].row < p.m, current[i]);
      } else {
        quantize_group<kIn, kDequantize>(p, group_of(at[i]), at[i].row < p.m, current[i]);
      }
      current[i] = next[i];
      at[i] = next_at[i];
    }
  }
}

// One resident wave of CTAs (at most kMinResidentCtas or a few more per SM).
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
  if constexpr (kIn == InType::kBF16) {
    if (p.as_is && vector) return launch_walk<quantize_kernel<kIn, true, true, true>>(p, stream);
    if (p.as_is) return launch_walk<quantize_kernel<kIn, false, true, true>>(p, stream);
  }
  if (vector && dequantize) return launch_walk<quantize_kernel<kIn, true, true>>(p, stream);
  if (vector) return launch_walk<quantize_kernel<kIn, true, false>>(p, stream);
  if (dequantize) return launch_walk<quantize_kernel<kIn, false, true>>(p, stream);
  return launch_walk<quantize_kernel<kIn, false, false>>(p, stream);
}

}  // namespace

cudaError_t launch_quantize(const QuantizeParams& p, cudaStream_t stream) {
  if (p.m == 0) return cudaSuccess;
  const std::size_t elem = p.in_type == InType::kF32 ? 4 : 2;
  // Stores are 16 bytes wide: the caller guarantees 16-byte aligned output rows.
  const auto aligned_rows = [&](const void* ptr, std::int64_t ld_bytes) {
    return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0 && (p.m == 1 || ld_bytes % 16 == 0);
  };
  // No e4m3 output (q and scales both null) only where the bf16 values are the output.
  const bool quantized_out = p.q != nullptr;
  if (quantized_out != (p.scales != nullptr) || (!quantized_out && p.dequantized == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (p.as_is && (quantized_out || p.in_type != InType::kBF16)) return cudaErrorInvalidValue;
  if ((quantized_out && !aligned_rows(p.q, p.ld_q)) ||
      (p.dequantized != nullptr && !aligned_rows(p.dequantized, p.ld_dq * 2))) {
    return cudaErrorInvalidValue;
  }
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
