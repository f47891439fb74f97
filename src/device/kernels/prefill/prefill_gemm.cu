#include <algorithm>
#include <array>
#include <limits>

#include "device/common/launch_util.hpp"
#include "device/common/timeline.hpp"
#include "device/common/tma_map.hpp"
#include "device/kernels/prefill/prefill_gemm.cuh"
#include "device/kernels/prefill/prefill_gemm.hpp"

namespace mxlinear::device {

static_assert(kPrefillMaxSplits <= kMaxClusterSplits,
              "the split-K reduction holds one value per split");
namespace {

// The only instances compiled: 128 x 128 tiles with a 4-stage ring, and a 3-stage one for K
// whose scales would not fit beside four stages (K > 8192), each without and with one stage's
// wgmma kept in flight; 64-row tiles of 32 and 64 tokens for the middle M buckets; and a
// 128 x 256 tile (two stages fit; no stage kept in flight, so the producer refills a stage
// while the next one is converted), which converts each weight fragment once per 256 tokens
// instead of 128: half the conversion work per flop; and a 128 x 64 tile, twice the tiles of
// 128 x 128 for the M where those fill the last wave badly (M = 2048: 2.4 waves of 128 x 128
// on the 2560-row layers); and 128 x 192 tiles, the widest whose ring holds three stages
// beside the scales of K = 6144, without and with one stage's wgmma in flight: in the 128 x 256
// tile both consumer warpgroups convert a stage's weights at the same time while the tensor
// pipe idles, and its producer is only one stage ahead (ncu: tensor pipe 75%); and the 128 x 256
// tile with stages of 64 K, four of them, with and without one stage's wgmma in flight: the
// same bytes of ring, the producer three half stages ahead instead of one whole one. And the
// 64 x 32 and 64 x 64 tiles with two warpgroups taking alternate stages of an 8-stage ring (four
// stages ahead for each).
using Tile4 = PrefillTile<PrefillShape{.stages = 4, .consumer_groups = 2, .tokens = 128}>;
using Tile3 = PrefillTile<PrefillShape{.stages = 3, .consumer_groups = 2, .tokens = 128}>;
using Tile4Overlap =
    PrefillTile<PrefillShape{.stages = 4, .overlap = true, .consumer_groups = 2, .tokens = 128}>;
using Tile3Overlap =
    PrefillTile<PrefillShape{.stages = 3, .overlap = true, .consumer_groups = 2, .tokens = 128}>;
using Tile64x32 =
    PrefillTile<PrefillShape{.stages = 4, .overlap = true, .consumer_groups = 1, .tokens = 32}>;
using Tile64x64 =
    PrefillTile<PrefillShape{.stages = 4, .overlap = true, .consumer_groups = 1, .tokens = 64}>;
using Tile128x256 = PrefillTile<PrefillShape{.stages = 2, .consumer_groups = 2, .tokens = 256}>;
using Tile128x64 =
    PrefillTile<PrefillShape{.stages = 4, .overlap = true, .consumer_groups = 2, .tokens = 64}>;
using Tile128x192 = PrefillTile<PrefillShape{.stages = 3, .consumer_groups = 2, .tokens = 192}>;
using Tile128x192Overlap =
    PrefillTile<PrefillShape{.stages = 3, .overlap = true, .consumer_groups = 2, .tokens = 192}>;
using Tile128x256Bk64 =
    PrefillTile<PrefillShape{.stages = 4, .consumer_groups = 2, .tokens = 256, .bk = 64}>;
using Tile128x256Bk64Overlap = PrefillTile<PrefillShape{
    .stages = 4, .overlap = true, .consumer_groups = 2, .tokens = 256, .bk = 64}>;
// 160 tokens: the grids of the narrow seed layers at M = 2048 fill whole waves (qkv: 20 x 13 =
// 260 CTAs on 132 SMs, where 192 tokens give 220 and 256 give 160). A 4-stage 64-K overlapped
// twin was measured slower and is not compiled.
using Tile128x160 = PrefillTile<PrefillShape{.stages = 3, .consumer_groups = 2, .tokens = 160}>;
// 192 x 128 (three consumer warpgroups): the 6144-row layers at M = 512 make 32 x 4 = 128 tiles
// for 132 SMs, where 128 x 256 leaves 36 SMs idle (96 tiles) and 128 x 192 needs 1.09 waves. Its
// main loop is ~15% slower per flop than 128 x 256 (weights converted once per 128 tokens, not
// 256), so it is faster only where the fill gains more (o_proj and dense gate_up). The
// overlapped and 6-stage 64-K twins were faster nowhere and are not compiled.
using Tile192x128 = PrefillTile<PrefillShape{.stages = 3, .consumer_groups = 3, .tokens = 128}>;
// Persistent (one CTA per SM walks the output tiles; the next tile's copies overlap this one's
// epilogue): the 64-K overlapped 128 x 256 tile, the fastest for shared down at M = 2048 and
// 8192. Its 2-stage, 128 x 192 and 128 x 160 twins were faster nowhere and are not compiled.
using Tile128x256Bk64OverlapPersistent = PrefillTile<PrefillShape{.stages = 4,
                                                                  .overlap = true,
                                                                  .consumer_groups = 2,
                                                                  .tokens = 256,
                                                                  .bk = 64,
                                                                  .persistent = true}>;
// Stream-K on the same walk: every SM gets the same share of (tile, 128-K chunk) units whatever
// the tile count (draft qkv at M = 2048: 144 tiles of 128 x 256 for 132 SMs).
using Tile128x256Bk64OverlapStreamK = PrefillTile<PrefillShape{.stages = 4,
                                                               .overlap = true,
                                                               .consumer_groups = 2,
                                                               .tokens = 256,
                                                               .bk = 64,
                                                               .persistent = true,
                                                               .stream_k = true}>;
using Tile64x32Alternating = PrefillTile<PrefillShape{
    .stages = 8, .overlap = true, .consumer_groups = 2, .tokens = 32, .alternating = true}>;
using Tile64x64Alternating = PrefillTile<PrefillShape{
    .stages = 8, .overlap = true, .consumer_groups = 2, .tokens = 64, .alternating = true}>;
// 64 x 128: at M = 128 one CTA holds every token of its 64 weight rows, so each weight is
// widened once per call (64 x 64 widens it twice, in two CTAs), and the 6144-row layers make 96
// CTAs, one an SM, where 64 x 64's 192 put two on 60 SMs (six M = 128 rows). Its twin with two
// warpgroups on alternate stages was faster nowhere (their sums met through shared memory in
// 1.6 us) and is not compiled.
using Tile64x128 =
    PrefillTile<PrefillShape{.stages = 4, .overlap = true, .consumer_groups = 1, .tokens = 128}>;
// The batch-invariant mode's unsplit tiles (PrefillTile::kKParts): twins of the tiles that
// serve it from small M to large, whose two accumulator sets fit the registers. From 64 tokens
// on two warpgroups and from 128 on one, a second fragment set (overlap) spilled. Wider tiles
// take that order only split over a cluster of batch_invariant_parts(K) CTAs.
using Tile64x32KParts = PrefillTile<PrefillShape{
    .stages = 4, .overlap = true, .consumer_groups = 1, .tokens = 32, .k_parts = true}>;
using Tile64x64KParts = PrefillTile<PrefillShape{
    .stages = 4, .overlap = true, .consumer_groups = 1, .tokens = 64, .k_parts = true}>;
using Tile64x128KParts =
    PrefillTile<PrefillShape{.stages = 4, .consumer_groups = 1, .tokens = 128, .k_parts = true}>;
using Tile128x64KParts =
    PrefillTile<PrefillShape{.stages = 4, .consumer_groups = 2, .tokens = 64, .k_parts = true}>;
using Tile4KParts =
    PrefillTile<PrefillShape{.stages = 4, .consumer_groups = 2, .tokens = 128, .k_parts = true}>;
// The large-M tiles, their part sums in their SM's slot of L2.
using Tile128x256Bk64OverlapKParts = PrefillTile<PrefillShape{
    .stages = 4, .overlap = true, .consumer_groups = 2, .tokens = 256, .bk = 64, .k_parts = true}>;
using Tile128x192KParts =
    PrefillTile<PrefillShape{.stages = 3, .consumer_groups = 2, .tokens = 192, .k_parts = true}>;
using Tile192x128KParts =
    PrefillTile<PrefillShape{.stages = 3, .consumer_groups = 3, .tokens = 128, .k_parts = true}>;

template <class Tile>
constexpr PrefillInstanceInfo info() {
  return {Tile::kRows,           Tile::kTokens,  Tile::kStages,      Tile::kOverlap,
          Tile::kFixedSmemBytes, Tile::kBK,      Tile::kAlternating, Tile::kBarrierOffset,
          Tile::kPersistent,     Tile::kStreamK, Tile::kKParts,      Tile::kPartSumsInMemory,
          Tile::kSplitsInMemory};
}

// Every compiled instance, in the order of their index (the registry's config names go by it).
// The instance table, the launchers and the footprint queries are all made from this one list.
template <class... Tiles>
struct TileList {};
using CompiledTiles =
    TileList<Tile4, Tile3, Tile4Overlap, Tile3Overlap, Tile64x32, Tile64x64, Tile128x256,
             Tile128x64, Tile128x192, Tile128x192Overlap, Tile128x256Bk64, Tile128x256Bk64Overlap,
             Tile64x32Alternating, Tile64x64Alternating, Tile128x160, Tile192x128,
             Tile128x256Bk64OverlapPersistent, Tile128x256Bk64OverlapStreamK, Tile64x128,
             Tile64x32KParts, Tile64x64KParts, Tile64x128KParts, Tile128x64KParts, Tile4KParts,
             Tile128x256Bk64OverlapKParts, Tile128x192KParts, Tile192x128KParts>;

template <class... Tiles>
constexpr std::array<PrefillInstanceInfo, sizeof...(Tiles)> infos_of(TileList<Tiles...>) {
  return {info<Tiles>()...};
}
constexpr auto kInstances = infos_of(CompiledTiles{});

int chunks_per_cta(int k, int splits) { return ((k + 127) / 128 + splits - 1) / splits; }

// The grid of a launch for M x N x K split `splits` ways: x row tiles, y splits, z token tiles;
// or, persistent, one CTA per SM at most (stream-K: per unit at most, and at most
// `stream_k_ctas`, the CTAs the workspace holds partial tiles and flags for).
template <class Tile>
cudaError_t grid_of(int m, int n, int k, int splits, int stream_k_ctas, dim3* grid) {
  *grid = dim3((n + Tile::kRows - 1) / Tile::kRows, static_cast<unsigned>(splits),
               (m + Tile::kTokens - 1) / Tile::kTokens);
  if (grid->z > 65535u) return cudaErrorInvalidConfiguration;  // host code checks M first
  if constexpr (Tile::kPersistent) {
    int sms = 0;
    if (cudaError_t e = current_sm_count(sms); e != cudaSuccess) return e;
    const unsigned tiles = grid->x * grid->z;  // both at most 65535 (N and M are int)
    unsigned ctas = tiles < static_cast<unsigned>(sms) ? tiles : static_cast<unsigned>(sms);
    if constexpr (Tile::kStreamK) {
      // Every SM, fewer tiles or not; but at least one unit a CTA (a CTA with none would never
      // publish), and at most the workspace's CTAs.
      const unsigned long long units = static_cast<unsigned long long>(tiles) * ((k + 127) / 128);
      ctas = units < static_cast<unsigned>(sms) ? static_cast<unsigned>(units)
                                                : static_cast<unsigned>(sms);
      if (stream_k_ctas < 1) return cudaErrorInvalidValue;
      if (ctas > static_cast<unsigned>(stream_k_ctas)) ctas = static_cast<unsigned>(stream_k_ctas);
    }
    *grid = dim3(ctas, 1, 1);
  }
  return cudaSuccess;
}

// PrefillRegisterMoves of a tile: the consumers' registers after setmaxnreg.inc and the
// producer warpgroup's after .dec, spread over the CTA's threads, against ptxas's count (asked
// once: it is a property of the binary).
template <class Tile>
cudaError_t register_moves(PrefillRegisterMoves* out) {
  *out = {};
  if constexpr (Tile::kMovesRegisters) {
    struct Answer {
      cudaError_t error;
      PrefillRegisterMoves moves;
    };
    static const Answer kAnswer = [] {
      cudaFuncAttributes attributes{};
      const cudaError_t e = cudaFuncGetAttributes(&attributes, prefill_gemm_kernel<Tile>);
      constexpr int kMoved = Tile::kConsumerThreads * Tile::kConsumerRegisters +
                             (Tile::kThreads - Tile::kConsumerThreads) * Tile::kProducerRegisters;
      return Answer{e, {attributes.numRegs, (kMoved + Tile::kThreads - 1) / Tile::kThreads}};
    }();
    if (kAnswer.error != cudaSuccess) return kAnswer.error;
    *out = kAnswer.moves;
  }
  return cudaSuccess;
}

template <class Tile>
cudaError_t launch(const GemmParams& p, const void* a_bf16, std::int64_t ld_a_bf16, int splits,
                   cudaStream_t stream) {
  if (cudaError_t e = ensure_max_dynamic_smem<prefill_gemm_kernel<Tile>>(kSm90MaxSmemPerCta);
      e != cudaSuccess)
    return e;
  PrefillRegisterMoves moves;
  if (cudaError_t e = register_moves<Tile>(&moves); e != cudaSuccess) return e;
  if (moves.compiled < moves.needed) return cudaErrorInvalidConfiguration;
  const int smem = Tile::smem_bytes(chunks_per_cta(p.k, splits));
  if (smem > kSm90MaxSmemPerCta) return cudaErrorInvalidValue;
  CUtensorMap w_map{}, a_map{};
  if (!encode_tma_2d(&w_map, TmaElement::kU8, p.w, p.n, p.k, p.ld_w, Tile::kBK, Tile::kRows,
                     Tile::kBK == 64 ? TmaSwizzle::k64B : TmaSwizzle::k128B) ||
      !encode_tma_2d(&a_map, TmaElement::kBF16, a_bf16, p.m, p.k, ld_a_bf16 * 2, 64,
                     Tile::kTokens)) {
    return cudaErrorInvalidValue;
  }
  dim3 grid;
  if (cudaError_t e = grid_of<Tile>(p.m, p.n, p.k, splits, p.stream_k_ctas, &grid);
      e != cudaSuccess)
    return e;
  // The flags must be zero: the pass before zeroes them (GemmParams::flags), and the kernel
  // reads them only after its wait on that pass.
  if constexpr (Tile::kStreamK) {
    if (p.partials == nullptr || p.flags == nullptr) return cudaErrorInvalidValue;
  }
  int sms = 0;
  if (cudaError_t e = current_sm_count(sms); e != cudaSuccess) return e;
  // A slot for every SM a CTA may run on.
  if constexpr (Tile::kPartSumsInMemory) {
    if (p.part_sums == nullptr || p.part_sum_slots < sms) return cudaErrorInvalidValue;
  }
  // Splits met in memory: a slot for every CTA's tile and an arrival word for every output
  // tile.
  const bool clustered = splits > 1 && p.split_tiles == nullptr;
  if (splits > 1 && !clustered) {
    if (!Tile::kSplitsInMemory) return cudaErrorInvalidValue;
    const long long tiles = static_cast<long long>(grid.x) * grid.z;
    if (p.split_arrivals == nullptr || tiles > p.split_arrival_words ||
        tiles * splits * Tile::kRows * Tile::kTokens > p.split_tile_floats) {
      return cudaErrorInvalidValue;
    }
  }
  // One CTA an SM for a grid that fits the SMs so (prefill_launch_smem). Only splits met over a
  // cluster launch one.
  const int launched = prefill_launch_smem(static_cast<long long>(grid.x) * grid.y * grid.z, sms,
                                           clustered, Tile::kPersistent, smem);
  return launch_programmatic(prefill_gemm_kernel<Tile>, grid, dim3(Tile::kThreads),
                             static_cast<std::size_t>(launched), stream,
                             clustered ? static_cast<unsigned>(splits) : 0u, w_map, a_map, p);
}

// The launch's CTAs and how many the device holds at once: whole clusters of `splits` CTAs
// (cudaOccupancyMaxActiveClusters, which also knows how clusters fit the GPCs), or CTAs per SM
// times SMs for a plain launch.
template <class Tile>
cudaError_t footprint(int m, int n, int k, int splits, bool in_memory, PrefillFootprint* out) {
  if (cudaError_t e = ensure_max_dynamic_smem<prefill_gemm_kernel<Tile>>(kSm90MaxSmemPerCta);
      e != cudaSuccess)
    return e;
  const int smem = Tile::smem_bytes(chunks_per_cta(k, splits));
  if (smem > kSm90MaxSmemPerCta) return cudaErrorInvalidValue;
  // A call's workspace is sized for one CTA per SM of its device: no cap below that.
  dim3 grid;
  if (cudaError_t e = grid_of<Tile>(m, n, k, splits, std::numeric_limits<int>::max(), &grid);
      e != cudaSuccess)
    return e;
  out->ctas = static_cast<long long>(grid.x) * grid.y * grid.z;
  if (splits == 1 || in_memory) {
    int sms = 0, per_sm = 0;
    if (cudaError_t e = current_sm_count(sms); e != cudaSuccess) return e;
    // With the shared memory the launch asks for (one CTA an SM where the grid fits so).
    const int launched = prefill_launch_smem(out->ctas, sms, false, Tile::kPersistent, smem);
    if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, prefill_gemm_kernel<Tile>, Tile::kThreads, static_cast<std::size_t>(launched));
        e != cudaSuccess) {
      return e;
    }
    out->resident_ctas = static_cast<long long>(per_sm) * sms;
    return cudaSuccess;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1, static_cast<unsigned>(splits), 1);
  config.blockDim = dim3(Tile::kThreads);
  config.dynamicSmemBytes = static_cast<std::size_t>(smem);
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = 1;
  cluster.val.clusterDim.y = static_cast<unsigned>(splits);
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, prefill_gemm_kernel<Tile>, &config);
      e != cudaSuccess) {
    return e;
  }
  out->resident_ctas = static_cast<long long>(clusters) * splits;
  return cudaSuccess;
}

using Launcher = cudaError_t (*)(const GemmParams&, const void*, std::int64_t, int, cudaStream_t);
template <class... Tiles>
constexpr std::array<Launcher, sizeof...(Tiles)> launchers_of(TileList<Tiles...>) {
  return {launch<Tiles>...};
}

using MovesQuery = cudaError_t (*)(PrefillRegisterMoves*);
template <class... Tiles>
constexpr std::array<MovesQuery, sizeof...(Tiles)> moves_queries_of(TileList<Tiles...>) {
  return {register_moves<Tiles>...};
}

using Query = cudaError_t (*)(int, int, int, int, bool, PrefillFootprint*);
template <class... Tiles>
constexpr std::array<Query, sizeof...(Tiles)> queries_of(TileList<Tiles...>) {
  return {footprint<Tiles>...};
}

}  // namespace

std::span<const PrefillInstanceInfo> prefill_gemm_instances() { return kInstances; }

namespace {

// The bytes of the largest fp32 output tile of the instances with `flag` set (0: none), and
// `per_cta` more for each, times `ctas`, rounded up to 256.
std::size_t tile_bytes_times(bool PrefillInstanceInfo::*flag, std::size_t per_cta, int ctas) {
  std::size_t tile_bytes = 0;
  for (const PrefillInstanceInfo& i : kInstances) {
    if (i.*flag) tile_bytes = std::max(tile_bytes, static_cast<std::size_t>(i.rows) * i.tokens * 4);
  }
  if (tile_bytes == 0 || ctas < 1) return 0;
  const std::size_t bytes = (tile_bytes + per_cta) * static_cast<std::size_t>(ctas);
  return (bytes + 255) / 256 * 256;
}

}  // namespace

// A partial tile and a flag word per CTA.
std::size_t prefill_stream_k_bytes(int ctas) {
  return tile_bytes_times(&PrefillInstanceInfo::stream_k, 4, ctas);
}

std::size_t prefill_part_sum_bytes(int sms) {
  return tile_bytes_times(&PrefillInstanceInfo::part_sums_in_memory, 0, sms);
}

// A tile and an arrival word per CTA.
std::size_t prefill_split_tile_bytes(int sms) {
  return tile_bytes_times(&PrefillInstanceInfo::splits_in_memory, 4, sms);
}

int prefill_gemm_smem_bytes(int instance, int k, int splits) {
  const PrefillInstanceInfo& i = kInstances[static_cast<std::size_t>(instance)];
  return i.fixed_smem_bytes + i.rows * prefill_scale_row_bytes(chunks_per_cta(k, splits));
}

std::string_view prefill_gemm_unsupported(const GemmParams& p) {
  // A last 128-K chunk of 32, 64 or 96 is zero-filled by TMA past K; its scales are copied byte
  // by byte (stage_scales), as are scale rows that are not 4-byte aligned.
  if (p.k % 32 != 0) return "K must be a multiple of 32";
  if (reinterpret_cast<std::uintptr_t>(p.w) % 16 != 0 || (p.n > 1 && p.ld_w % 16 != 0)) {
    return "e4m3 weight rows must be 16-byte aligned";
  }
  if (!tma_available()) return "the driver has no cuTensorMapEncodeTiled";
  return {};
}

bool prefill_gemm_splits_fit(int instance, int splits) {
  if (instance < 0 || instance >= static_cast<int>(kInstances.size()) || splits < 1 ||
      splits > kPrefillMaxSplits) {
    return false;
  }
  const PrefillInstanceInfo& i = kInstances[static_cast<std::size_t>(instance)];
  if (i.persistent || i.k_parts) return splits == 1;
  return share_tile_bytes(i.rows, i.tokens, splits) <= i.ring_bytes;
}

cudaError_t launch_prefill_gemm(const GemmParams& p, const void* a_bf16, std::int64_t ld_a_bf16,
                                int instance, int splits, cudaStream_t stream) {
  if (!prefill_gemm_splits_fit(instance, splits) || splits > (p.k + 127) / 128) {
    return cudaErrorInvalidValue;
  }
  if (reinterpret_cast<std::uintptr_t>(a_bf16) % 16 != 0 || (p.m > 1 && ld_a_bf16 % 8 != 0)) {
    return cudaErrorInvalidValue;
  }
  constexpr auto kLaunchers = launchers_of(CompiledTiles{});
  if (instance < 0 || instance >= static_cast<int>(kInstances.size())) {
    return cudaErrorInvalidValue;
  }
  return kLaunchers[static_cast<std::size_t>(instance)](p, a_bf16, ld_a_bf16, splits, stream);
}

cudaError_t prefill_gemm_footprint(int instance, int m, int n, int k, int splits, bool in_memory,
                                   PrefillFootprint* out) {
  if (!prefill_gemm_splits_fit(instance, splits) || splits > (k + 127) / 128 || m < 1 || n < 1) {
    return cudaErrorInvalidValue;
  }
  constexpr auto kQueries = queries_of(CompiledTiles{});
  return kQueries[static_cast<std::size_t>(instance)](m, n, k, splits, in_memory, out);
}

cudaError_t prefill_gemm_register_moves(int instance, PrefillRegisterMoves* out) {
  if (instance < 0 || instance >= static_cast<int>(kInstances.size()) || out == nullptr) {
    return cudaErrorInvalidValue;
  }
  constexpr auto kQueries = moves_queries_of(CompiledTiles{});
  return kQueries[static_cast<std::size_t>(instance)](out);
}

// This translation unit's buffer pointer (timeline.cuh).
cudaError_t timeline::set_prefill_buffer(std::uint32_t* buffer, std::uint64_t capacity_ctas) {
  return timeline::set_buffer(buffer, capacity_ctas);
}

}  // namespace mxlinear::device
