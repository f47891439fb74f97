// Host side of the per-CTA phase timestamps (timeline.cuh): the buffer layout and, per kernel,
// where its CTAs write. A build without -DMXLINEAR_TIMELINE=ON returns cudaErrorNotSupported.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mxlinear::device::timeline {

// Stamps per CTA, each the low 32 bits of %globaltimer (ns; differences are taken modulo 2^32):
// buffer[cta * kStamps + phase], cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y *
// blockIdx.z).
inline constexpr int kStamps = 8;
// The last word of a CTA's stamps: 1 + its SM (%smid), so that slow CTAs can be placed.
inline constexpr int kSmWord = kStamps - 1;

// The phases the kernels mark: in this order in the decode and gemv kernels; the prefill
// kernel's consumers wait on the previous kernel only after their main loop (before they
// write the output), so there kWaited comes after kMainLoop.
enum Phase : int {
  kEntry = 0,     // the CTA's first instruction
  kWaited = 1,    // past the wait on the previous kernel (griddepcontrol.wait)
  kPrologue = 2,  // activation staged or its first tiles issued; dependents may launch
  kMainLoop = 3,  // this thread's share of the K loop done
  // The CTA's (or cluster's) partial sums met; prefill splits over a cluster: ready to meet; in
  // memory: marked by the last split only, once every split's tile is in.
  kReduced = 4,
  kStored = 5,  // the output tile written
};

// Points the decode (gemv, prefill) kernel's CTAs at `buffer` (device memory of capacity_ctas *
// kStamps words; CTAs past the capacity record nothing), or back at nothing with nullptr.
cudaError_t set_decode_buffer(std::uint32_t* buffer, std::uint64_t capacity_ctas);
cudaError_t set_gemv_buffer(std::uint32_t* buffer, std::uint64_t capacity_ctas);
cudaError_t set_prefill_buffer(std::uint32_t* buffer, std::uint64_t capacity_ctas);

}  // namespace mxlinear::device::timeline
