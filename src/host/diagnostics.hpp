// Per-CTA phase timestamps of the decode, gemv and prefill kernels, to see where a short kernel's
// microseconds go (`mxlinear timeline`). Only a library configured with -DMXLINEAR_TIMELINE=ON
// records them; the stamps change the kernels' code, so time nothing else with such a build.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string_view>

#include "mxlinear/linear_types.hpp"

namespace mxlinear {

// 32-bit words per CTA: word `phase` is the low 32 bits of %globaltimer (ns) when the CTA's
// thread 0 reached that phase, 0 if it did not; word kTimelineSmWord is 1 + the SM the CTA ran
// on (%smid). CTA index: blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z).
inline constexpr int kTimelineStamps = 8;
inline constexpr int kTimelineSmWord = kTimelineStamps - 1;
inline constexpr const char* kTimelinePhases[] = {"entry",     "waited",  "prologue",
                                                  "main loop", "reduced", "stored"};

// Whether this build records stamps.
bool timeline_compiled();

// Directs the CTAs of `kernel` ("decode", "gemv" or "prefill") to write their stamps into
// `buffer` (device memory of capacity_ctas x kTimelineStamps words; CTAs past the capacity
// record nothing), or to stop with nullptr. Throws Error: kInvalidArgument for another kernel,
// kUnsupported in a build without stamps.
void set_kernel_timeline(std::string_view kernel, std::uint32_t* buffer,
                         std::uint64_t capacity_ctas = 0);

// Runs the prefill kernel's activation pre-pass alone (what a prefill linear on a pre-quantized
// activation spends before its GEMM; `mxlinear bench` times it): x's e4m3 data and E8M0 scales
// (device, [M, K] and [M, K/32], rows 8-byte aligned) dequantized exactly to bf16, permuted the
// way that kernel's GEMM reads them, into `out` (device, M * K bf16 values, 16-byte aligned).
// Throws Error on bad arguments or a failed launch.
void run_prefill_activation_prepass(const QuantizedActivation& x, void* out, cudaStream_t stream);

}  // namespace mxlinear
