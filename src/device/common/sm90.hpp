// The limits of the sm_90 (Hopper) architecture that the kernels are sized by, in one place.
// The SM count is not here: it differs between parts (H100 PCIe 114, H100/H200 SXM 132) and is
// read from the device at run time (launch_util.hpp's current_sm_count).
#pragma once

namespace mxlinear::device {

// Dynamic shared memory one CTA may opt into (cudaFuncAttributeMaxDynamicSharedMemorySize).
inline constexpr int kSm90MaxSmemPerCta = 227 * 1024;
// Shared memory of one SM; the runtime reserves 1 KiB of it per resident CTA.
inline constexpr int kSm90SmemPerSm = 228 * 1024;
inline constexpr int kSm90SmemReservedPerCta = 1024;
// Resident threads of one SM.
inline constexpr int kSm90MaxThreadsPerSm = 2048;

// CTAs of `smem_bytes` each that one SM's shared memory holds (the runtime reserves 1 KiB per
// CTA).
constexpr int ctas_per_sm_by_smem(int smem_bytes) {
  return kSm90SmemPerSm / (smem_bytes + kSm90SmemReservedPerCta);
}

}  // namespace mxlinear::device
