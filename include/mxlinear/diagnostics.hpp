// Per-CTA phase timestamps of the decode, gemv and prefill kernels, to see where a short kernel's
// microseconds go (`mxlinear timeline`). Only a library configured with -DMXLINEAR_TIMELINE=ON
// records them; the stamps change the kernels' code, so time nothing else with such a build.
#pragma once

#include <cstdint>
#include <string_view>

namespace mxlinear {

// 32-bit words per CTA: word `phase` is the low 32 bits of %globaltimer (ns) when the CTA's
// thread 0 reached that phase, 0 if it did not. CTA index: blockIdx.x + gridDim.x * (blockIdx.y
// + gridDim.y * blockIdx.z).
inline constexpr int kTimelineStamps = 8;
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

}  // namespace mxlinear
