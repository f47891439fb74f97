#include <array>

#include "device/launch_util.hpp"
#include "device/prefill_gemm.cuh"
#include "device/prefill_gemm.hpp"
#include "device/tma_map.hpp"

namespace mxlinear::device {
namespace {

// The only instances compiled: a 4-stage ring, and a 3-stage one for K whose scales would not
// fit beside four stages (K > 8192).
using Tile4 = PrefillTile<4>;
using Tile3 = PrefillTile<3>;

constexpr int kMaxSmemBytes = 227 * 1024;

constexpr std::array<PrefillInstanceInfo, 2> kInstances = {
    PrefillInstanceInfo{Tile4::kStages, Tile4::kFixedSmemBytes},
    PrefillInstanceInfo{Tile3::kStages, Tile3::kFixedSmemBytes}};

template <class Tile>
cudaError_t launch(const GemmParams& p, const void* a_bf16, std::int64_t ld_a_bf16,
                   cudaStream_t stream) {
  if (cudaError_t e = ensure_max_dynamic_smem<prefill_gemm_kernel<Tile>>(kMaxSmemBytes);
      e != cudaSuccess)
    return e;
  const int smem = Tile::smem_bytes(p.k);
  if (smem > kMaxSmemBytes) return cudaErrorInvalidValue;
  CUtensorMap w_map{}, a_map{};
  if (!encode_tma_2d(&w_map, TmaElement::kU8, p.w, p.n, p.k, p.ld_w, Tile::kBK, Tile::kRows) ||
      !encode_tma_2d(&a_map, TmaElement::kBF16, a_bf16, p.m, p.k, ld_a_bf16 * 2, 64,
                     Tile::kTokens)) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid((p.n + Tile::kRows - 1) / Tile::kRows, (p.m + Tile::kTokens - 1) / Tile::kTokens);
  if (grid.y > 65535u) return cudaErrorInvalidConfiguration;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(Tile::kThreads);
  config.dynamicSmemBytes = static_cast<std::size_t>(smem);
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, prefill_gemm_kernel<Tile>, w_map, a_map, p);
}

}  // namespace

std::span<const PrefillInstanceInfo> prefill_gemm_instances() { return kInstances; }

int prefill_gemm_smem_bytes(int instance, int k) {
  return kInstances[static_cast<std::size_t>(instance)].fixed_smem_bytes +
         Tile4::kRows * (k / kBlockSize);
}

std::string_view prefill_gemm_unsupported(const GemmParams& p) {
  if (p.k % 128 != 0) return "K must be a multiple of 128";
  if (reinterpret_cast<std::uintptr_t>(p.w) % 16 != 0 || (p.n > 1 && p.ld_w % 16 != 0)) {
    return "e4m3 weight rows must be 16-byte aligned";
  }
  if (!tma_available()) return "the driver has no cuTensorMapEncodeTiled";
  return {};
}

cudaError_t launch_prefill_gemm(const GemmParams& p, const void* a_bf16, std::int64_t ld_a_bf16,
                                int instance, cudaStream_t stream) {
  if (reinterpret_cast<std::uintptr_t>(a_bf16) % 16 != 0 || (p.m > 1 && ld_a_bf16 % 8 != 0)) {
    return cudaErrorInvalidValue;
  }
  switch (instance) {
    case 0:
      return launch<Tile4>(p, a_bf16, ld_a_bf16, stream);
    case 1:
      return launch<Tile3>(p, a_bf16, ld_a_bf16, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace mxlinear::device
