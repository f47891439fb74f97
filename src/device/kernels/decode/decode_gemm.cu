#include <array>
#include <mutex>
#include <type_traits>

#include "device/common/launch_util.hpp"
#include "device/common/timeline.hpp"
#include "device/common/tma_map.hpp"
#include "device/kernels/decode/decode_gemm.cuh"
#include "device/kernels/decode/decode_gemm.hpp"

namespace mxlinear::device {

static_assert(kDecodeMaxSplits <= kMaxClusterSplits,
              "the split-K reduction holds one value per split");
namespace {

// The only instances compiled: one per decode M bucket the tuned tables use, and for 8 and 32
// tokens a two-warpgroup variant (alternate stages; 8 stages for 8 tokens, whose stages are
// small). T8St6: a CTA of the 6144-K layers split 8 ways streams 6 stages, so a 6-stage ring
// requests them all before its first wgmma (a 4-stage ring waits a memory round trip for the
// last two), and at 65 KiB three CTAs still fit an SM (the grid of 320 stays one wave).
using T8St4 = DecodeTile<DecodeShape{.tokens = 8, .stages = 4}>;
using T32St4 = DecodeTile<DecodeShape{.tokens = 32, .stages = 4}>;
using T128St4 = DecodeTile<DecodeShape{.tokens = 128, .stages = 4}>;
using T8St8Alt = DecodeTile<DecodeShape{.tokens = 8, .stages = 8, .consumer_groups = 2}>;
using T32St4Alt = DecodeTile<DecodeShape{.tokens = 32, .stages = 4, .consumer_groups = 2}>;
using T8St6 = DecodeTile<DecodeShape{.tokens = 8, .stages = 6}>;
// Twins that quantize a 16-bit activation themselves (p.x), for the 8-token instances: at a few
// tokens the quantize kernel ahead of the GEMM costs ~2 us of a ~9 us linear.
using T8St4Quantizing = DecodeTile<DecodeShape{.tokens = 8, .stages = 4, .quantizes = true}>;
using T8St8AltQuantizing =
    DecodeTile<DecodeShape{.tokens = 8, .stages = 8, .consumer_groups = 2, .quantizes = true}>;
using T8St6Quantizing = DecodeTile<DecodeShape{.tokens = 8, .stages = 6, .quantizes = true}>;

template <class Tile, class QuantizingTwin = void>
constexpr DecodeInstanceInfo info() {
  int twin_smem = 0;
  if constexpr (!std::is_void_v<QuantizingTwin>) twin_smem = QuantizingTwin::kFixedSmemBytes;
  return {Tile::kTokens,
          Tile::kStages,
          Tile::kConsumerGroups,
          Tile::kFixedSmemBytes,
          Tile::kScaleBytesPerChunk,
          twin_smem};
}

template <class Tile>
cudaError_t launch(const GemmParams& p, int splits, cudaStream_t stream) {
  if (cudaError_t e = ensure_max_dynamic_smem<decode_gemm_kernel<Tile>>(kSm90MaxSmemPerCta);
      e != cudaSuccess)
    return e;
  CUtensorMap w_map{}, a_map{};
  if (!encode_tma_2d(&w_map, TmaElement::kU8, p.w, p.n, p.k, p.ld_w, Tile::kBK, Tile::kRows)) {
    return cudaErrorInvalidValue;
  }
  // The activation: e4m3 rows in 128-byte boxes, or (a quantizing twin) the 16-bit x in boxes of
  // 64 elements; TMA only moves the bits, so bf16 serves fp16 too.
  // TMA wants every row stride 16-byte aligned, even for one row, whose stride is never used
  // (a single-row view may carry any stride): one row gets the dense stride.
  const std::int64_t ld_x_bytes = p.m > 1 ? p.ld_x * 2 : std::int64_t{p.k} * 2;
  const std::int64_t ld_a_bytes = p.m > 1 ? p.ld_a : std::int64_t{p.k};
  const bool a_ok = Tile::kQuantizes ? encode_tma_2d(&a_map, TmaElement::kBF16, p.x, p.m, p.k,
                                                     ld_x_bytes, 64, Tile::kTokens)
                                     : encode_tma_2d(&a_map, TmaElement::kU8, p.a, p.m, p.k,
                                                     ld_a_bytes, Tile::kBK, Tile::kTokens);
  if (!a_ok) return cudaErrorInvalidValue;
  const dim3 grid((p.n + Tile::kRows - 1) / Tile::kRows, static_cast<unsigned>(splits),
                  (p.m + Tile::kTokens - 1) / Tile::kTokens);
  if (grid.z > 65535u) return cudaErrorInvalidConfiguration;  // host code checks M first
  const int chunks_per_cta = ((p.k + 127) / 128 + splits - 1) / splits;
  const auto smem = static_cast<std::size_t>(Tile::smem_bytes(chunks_per_cta));
  if (smem > kSm90MaxSmemPerCta) return cudaErrorInvalidValue;
  return launch_programmatic(decode_gemm_kernel<Tile>, grid, dim3(Tile::kThreads), smem, stream,
                             static_cast<unsigned>(splits), w_map, a_map, p);
}

// An instance: its sizes, its launcher, and its quantizing twin's launcher (null without one).
using Launcher = cudaError_t (*)(const GemmParams&, int, cudaStream_t);
struct Compiled {
  DecodeInstanceInfo info;
  Launcher plain;
  Launcher quantizing;
};

template <class Tile, class QuantizingTwin = void>
constexpr Compiled compiled() {
  Launcher twin = nullptr;
  if constexpr (!std::is_void_v<QuantizingTwin>) twin = launch<QuantizingTwin>;
  return {info<Tile, QuantizingTwin>(), launch<Tile>, twin};
}

// Every compiled instance, in the order of their index (the registry's config names go by it).
constexpr std::array<Compiled, 6> kCompiled = {compiled<T8St4, T8St4Quantizing>(),
                                               compiled<T32St4>(),
                                               compiled<T128St4>(),
                                               compiled<T8St8Alt, T8St8AltQuantizing>(),
                                               compiled<T32St4Alt>(),
                                               compiled<T8St6, T8St6Quantizing>()};

constexpr std::array<DecodeInstanceInfo, kCompiled.size()> infos() {
  std::array<DecodeInstanceInfo, kCompiled.size()> out{};
  for (std::size_t i = 0; i < kCompiled.size(); ++i) out[i] = kCompiled[i].info;
  return out;
}
constexpr auto kInstances = infos();

}  // namespace

std::span<const DecodeInstanceInfo> decode_gemm_instances() { return kInstances; }

std::string_view decode_gemm_unsupported(const GemmParams& p) {
  auto aligned = [](const void* base, std::int64_t ld, std::int64_t rows, std::uintptr_t a) {
    return reinterpret_cast<std::uintptr_t>(base) % a == 0 &&
           (rows <= 1 || static_cast<std::uintptr_t>(ld) % a == 0);
  };
  if (p.k % 32 != 0) return "K must be a multiple of 32";
  if (p.x != nullptr) {
    if (!aligned(p.x, p.ld_x * 2, p.m, 16)) {
      return "bf16/fp16 activation rows must be 16-byte aligned";
    }
  } else if (!aligned(p.a, p.ld_a, p.m, 16)) {
    return "activation e4m3 rows must be 16-byte aligned";
  }
  if (!aligned(p.w, p.ld_w, p.n, 16)) return "weight e4m3 rows must be 16-byte aligned";
  if (!tma_available()) return "the driver has no cuTensorMapEncodeTiled";
  return {};
}

int decode_gemm_smem_bytes(int instance, int k, int splits, bool quantizing) {
  const DecodeInstanceInfo& i = kInstances[static_cast<std::size_t>(instance)];
  return (quantizing ? i.quantizing_fixed_smem_bytes : i.fixed_smem_bytes) +
         ((k + 127) / 128 + splits - 1) / splits * i.scale_bytes_per_chunk;
}

cudaError_t launch_decode_gemm(const GemmParams& p, int instance, int splits, cudaStream_t stream) {
  if (splits < 1 || splits > kDecodeMaxSplits || splits > (p.k + 127) / 128) {
    return cudaErrorInvalidValue;
  }
  if (instance < 0 || instance >= static_cast<int>(kCompiled.size())) {
    return cudaErrorInvalidValue;
  }
  const Compiled& c = kCompiled[static_cast<std::size_t>(instance)];
  // An instance without a quantizing twin has quantizing_fixed_smem_bytes == 0.
  const Launcher launcher = p.x != nullptr ? c.quantizing : c.plain;
  if (launcher == nullptr) return cudaErrorInvalidValue;
  return launcher(p, splits, stream);
}

// This translation unit's buffer pointer (timeline.cuh).
cudaError_t timeline::set_decode_buffer(std::uint32_t* buffer, std::uint64_t capacity_ctas) {
  return timeline::set_buffer(buffer, capacity_ctas);
}

}  // namespace mxlinear::device
