#include <array>

#include "device/common/launch_util.hpp"
#include "device/common/timeline.hpp"
#include "device/kernels/gemv/gemv_gemm.cuh"
#include "device/kernels/gemv/gemv_gemm.hpp"

namespace mxlinear::device {
namespace {

// The instances compiled, each alias spelling its config name (16 weight rows unless it says
// W48, W32 or W8): 8 tokens with 4 or 8 K ranges per CTA and 16 tokens with 8, weights through
// registers; 8 tokens through a per-warp shared-memory ring of 8 (4 warps) or 4 (8 warps) slots,
// about 70 KiB per CTA with one token.
using T8Kw4 = GemvTile<GemvShape{.kwarps = 4}>;
using T8Kw8 = GemvTile<GemvShape{.kwarps = 8}>;
using T16Kw8 = GemvTile<GemvShape{.token_tiles = 2, .kwarps = 8}>;
using T8Kw4St8 = GemvTile<GemvShape{.kwarps = 4, .stages = 8}>;
using T8Kw8St4 = GemvTile<GemvShape{.kwarps = 8, .stages = 4}>;
// A deeper ring (~101 KiB per CTA, two CTAs per SM): a warp of a K = 6144 layer requests 5 of
// its 6 stages before the wait on the previous kernel, where the 4-slot ring requests 3 and
// leaves the rest to the main loop. (cp.async.wait_group takes at most 7 pending groups, so 8
// slots is the deepest ring.)
using T8Kw8St6 = GemvTile<GemvShape{.kwarps = 8, .stages = 6}>;
// Shallow rings for short K (~28 and ~37 KiB per CTA at K = 768, 71 registers): 7 and 6 CTAs
// per SM, so the next layer's CTAs can be resident, their weights in flight, while this one runs
// (the 8-slot ring fits 3 CTAs per SM: a kernel's 384 CTAs of an N = 6144 layer, and almost none
// of the next one's).
using T8Kw4St3 = GemvTile<GemvShape{.kwarps = 4, .stages = 3}>;
using T8Kw4St4 = GemvTile<GemvShape{.kwarps = 4, .stages = 4}>;
// K split over a cluster of two CTAs, for layers with fewer 16-row tiles than SMs (N = 1536 and
// 1280: 96 and 80), which then give every SM work. Where N = 2304-2560 the split's 288-320 CTAs
// of ~68 KiB leave no room for the next layer's, and it is 40-50% slower.
using T8Kw8Split2 = GemvTile<GemvShape{.kwarps = 8, .splits = 2}>;
using T8Kw8St4Split2 = GemvTile<GemvShape{.kwarps = 8, .stages = 4, .splits = 2}>;
// K split four ways over 4-warp CTAs of a 3- or 4-slot ring (~26 and ~35 KiB at K = 6144): an
// N = 2560 layer's 640 CTAs fill the SMs evenly (4.8 per SM) where 160 leave 28 SMs with two and
// a 3.4 us tail, and each warp's 3 stages are all in flight before the wait.
using T8Kw4St3Split4 = GemvTile<GemvShape{.kwarps = 4, .stages = 3, .splits = 4}>;
using T8Kw4St4Split4 = GemvTile<GemvShape{.kwarps = 4, .stages = 4, .splits = 4}>;
// Three row tiles of four warps on 3- or 4-slot rings (~81 and ~107 KiB per CTA at K = 768): an
// N = 6144 layer runs as 128 CTAs, one per SM with room for the next layer's, and its tokens are
// read from L2 by 128 CTAs instead of 384.
using W48T8Kw4St3 = GemvTile<GemvShape{.kwarps = 4, .stages = 3, .row_tiles = 3}>;
using W48T8Kw4St4 = GemvTile<GemvShape{.kwarps = 4, .stages = 4, .row_tiles = 3}>;

// The batch-invariant mode's K parts (k_parts: the prefill kernel's order): four warps per
// 8-row tile, each taking whole parts of K's batch_invariant_parts(K) (1 to 8) through its ring;
// warps beyond the parts idle. A part is one serial mma chain.
// Eight rows per warp, the weights as the mma's B operand, up to 16 tokens an mma (its A rows).
// 16-row tiles with the weights as A (4 or 8 warps; measured and removed) had half the chains,
// each twice as long, and ran 1.2-1.6x these at M = 1 (W8A8, pre-quantized: 14.1 against 12.1 us
// on 2560 x 6144, 27.8 against 19.9 on 6144 x 6144, 40.4 against 28.6 on 10240 x 5120). 8 or 16
// tokens on 6 ring slots: six CTAs an SM hold 6144 x 6144's 768 in one wave, and 16 16-bit rows of
// K = 6144 fit. Each staged token is such a row (12 KiB at K = 6144), so from M = 4 fewer CTAs fit
// an SM and the grid runs in waves (2560 x 6144: 24.0 us at M = 4, 39.8 at M = 8, before the
// scaled domain). An 8-slot ring (removed) was never more than 2% faster at M = 1-4 on the
// benchmark's four layers and up to 1.6x slower (fewer CTAs an SM; W8A8, pre-quantized, 8 / 6
// slots: 10.4 / 10.6 us on 2560 x 6144 at M = 1, 20.6 / 12.7 at M = 4; 21.4 / 17.4 on 6144 x 6144
// and 29.5 / 26.2 on 10240 x 5120 at M = 2), where the cost model, counting whole waves, priced
// both the same.
using W8T8Kw4St6Parts = GemvTile<GemvShape{.kwarps = 4, .stages = 6, .k_parts = true, .rows = 8}>;
using W8T16Kw4St6Parts =
    GemvTile<GemvShape{.token_tiles = 2, .kwarps = 4, .stages = 6, .k_parts = true, .rows = 8}>;
// For layers whose K is one part (P(K) = 1, K <= 3968: 6144 x 2048, say): there the 4-warp
// 8-row tile has one working warp per CTA and three idle ones. A CTA of four 8-row chains, one
// warp each (32 rows), stages the token once for 32 rows and puts four chains on each of the
// CTA's SM slots. On layers of 2-3 parts each warp chains its parts in turn, where the 4-warp
// tile runs them side by side; the cost model weighs the two per layer and M.
using W32T8St6Parts =
    GemvTile<GemvShape{.kwarps = 1, .stages = 6, .row_tiles = 4, .k_parts = true, .rows = 8}>;

// The W8A16 instance of a W8A8 tile: the same shape on a bf16 or fp16 activation used as it is.
template <class Tile, ActivationOperand kOperand>
using AsIs = GemvTile<Tile::kShape, kOperand>;

// Whether both W8A16 variants of a tile take the same shared memory (k-parts tiles have no fp16
// variant: the prefill kernel's order is on bf16).
template <class Tile>
constexpr bool one_w8a16_size() {
  if constexpr (Tile::kKParts) {
    return true;
  } else {
    return AsIs<Tile, ActivationOperand::kBf16>::smem_bytes(4096, 8) ==
           AsIs<Tile, ActivationOperand::kF16>::smem_bytes(4096, 8);
  }
}

template <class Tile>
int staged_tokens(std::int64_t m) {
  return static_cast<int>(m < Tile::kTokens ? m : Tile::kTokens);
}

template <class Tile>
cudaError_t launch(const GemmParams& p, cudaStream_t stream) {
  if (cudaError_t e = ensure_max_dynamic_smem<gemv_gemm_kernel<Tile>>(kSm90MaxSmemPerCta);
      e != cudaSuccess)
    return e;
  const int smem = Tile::smem_bytes(p.k, staged_tokens<Tile>(p.m));
  if (smem > kSm90MaxSmemPerCta) return cudaErrorInvalidValue;
  const dim3 grid((p.n + Tile::kCtaRows - 1) / Tile::kCtaRows, Tile::kSplits,
                  (p.m + Tile::kTokens - 1) / Tile::kTokens);
  if (grid.z > 65535u) return cudaErrorInvalidConfiguration;  // host code checks M first
  return launch_programmatic(gemv_gemm_kernel<Tile>, grid, dim3(Tile::kThreads),
                             static_cast<std::size_t>(smem), stream,
                             Tile::kSplits > 1 ? Tile::kSplits : 0, p);
}

// W8A8, or W8A16 when p.x_as_is: the bf16 or fp16 instance by p.x_is_f16 (p.x must be set).
template <class Tile>
cudaError_t launch_operand(const GemmParams& p, cudaStream_t stream) {
  if (!p.x_as_is) return launch<Tile>(p, stream);
  if (p.x == nullptr) return cudaErrorInvalidValue;
  if constexpr (Tile::kKParts) {
    if (p.x_is_f16) return cudaErrorInvalidValue;
    return launch<AsIs<Tile, ActivationOperand::kBf16>>(p, stream);
  } else {
    return p.x_is_f16 ? launch<AsIs<Tile, ActivationOperand::kF16>>(p, stream)
                      : launch<AsIs<Tile, ActivationOperand::kBf16>>(p, stream);
  }
}

template <class Tile>
int smem_bytes(std::int64_t m, int k) {
  return Tile::smem_bytes(k, staged_tokens<Tile>(m));
}

// The compiled instances, in the order of their indices; one list for the infos, sizers and
// launchers. Every instance has W8A16 variants (bf16 and fp16 x; k-parts tiles bf16 only), whose
// shared memory is the same for both (16-bit rows, no scales).
template <class... Tiles>
struct Instances {
  static constexpr std::array<GemvInstanceInfo, sizeof...(Tiles)> kInfos = {GemvInstanceInfo{
      Tiles::kTokens, Tiles::kWarps, Tiles::kStages, Tiles::kSplits, Tiles::kCtaRows, Tiles::kRows,
      Tiles::kKParts, Tiles::kQuantizesUnscaled}...};
  static constexpr std::array<int (*)(std::int64_t, int), sizeof...(Tiles)> kSizers = {
      smem_bytes<Tiles>...};
  static constexpr std::array<int (*)(std::int64_t, int), sizeof...(Tiles)> kSizersAsIs = {
      smem_bytes<AsIs<Tiles, ActivationOperand::kBf16>>...};
  static constexpr std::array<cudaError_t (*)(const GemmParams&, cudaStream_t), sizeof...(Tiles)>
      kLaunchers = {launch_operand<Tiles>...};
  static_assert((one_w8a16_size<Tiles>() && ...), "one W8A16 size for both 16-bit types");
};
using Compiled = Instances<T8Kw4, T8Kw8, T16Kw8, T8Kw4St8, T8Kw8St4, T8Kw8St6, T8Kw4St3, T8Kw4St4,
                           T8Kw8Split2, T8Kw8St4Split2, T8Kw4St3Split4, T8Kw4St4Split4, W48T8Kw4St3,
                           W48T8Kw4St4, W8T8Kw4St6Parts, W8T16Kw4St6Parts, W32T8St6Parts>;

}  // namespace

std::span<const GemvInstanceInfo> gemv_gemm_instances() { return Compiled::kInfos; }

int gemv_gemm_smem_bytes(int instance, std::int64_t m, int k, bool x_as_is) {
  if (instance < 0 || instance >= static_cast<int>(Compiled::kSizers.size())) return 0;
  const auto& sizers = x_as_is ? Compiled::kSizersAsIs : Compiled::kSizers;
  return sizers[static_cast<std::size_t>(instance)](m, k);
}

int gemv_gemm_smem_bytes(int instance, std::int64_t m, int k) {
  return gemv_gemm_smem_bytes(instance, m, k, false);
}

std::string_view gemv_gemm_unsupported(const GemmParams& p) {
  auto aligned = [](const void* base, std::int64_t ld, std::int64_t rows, std::uintptr_t a) {
    return reinterpret_cast<std::uintptr_t>(base) % a == 0 &&
           (rows <= 1 || static_cast<std::uintptr_t>(ld) % a == 0);
  };
  if (p.k % 32 != 0) return "K must be a multiple of 32";
  if (!aligned(p.w, p.ld_w, p.n, 16)) return "e4m3 weight rows must be 16-byte aligned";
  if (p.x == nullptr && !aligned(p.a, p.ld_a, p.m, 4)) {
    return "e4m3 activation rows must be 4-byte aligned";
  }
  if (p.x_as_is && p.x == nullptr) return "W8A16 (x_as_is) needs the bf16/fp16 activation x";
  if (p.x != nullptr && !aligned(p.x, p.ld_x * 2, p.m, 16)) {
    return "bf16/fp16 activation rows must be 16-byte aligned";
  }
  return {};
}

cudaError_t launch_gemv_gemm(const GemmParams& p, int instance, cudaStream_t stream) {
  if (instance < 0 || instance >= static_cast<int>(Compiled::kLaunchers.size())) {
    return cudaErrorInvalidValue;
  }
  return Compiled::kLaunchers[static_cast<std::size_t>(instance)](p, stream);
}

// This translation unit's buffer pointer (timeline.cuh).
cudaError_t timeline::set_gemv_buffer(std::uint32_t* buffer, std::uint64_t capacity_ctas) {
  return timeline::set_buffer(buffer, capacity_ctas);
}

}  // namespace mxlinear::device
