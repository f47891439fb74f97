// Device-side random fills for benchmark operands (fast enough for gigabytes of weights), and the
// read-bandwidth probe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mxlinear::bench {

// Finite e4m3 codes (never 0x7F/0xFF), uniform over the rest.
void fill_e4m3(std::uint8_t* data, std::size_t count, std::uint64_t seed, cudaStream_t stream);
// E8M0 scale bytes in [lo, hi].
void fill_scales(std::uint8_t* data, std::size_t count, std::uint64_t seed, int lo, int hi,
                 cudaStream_t stream);
// bf16 values uniform in [-1, 1).
void fill_bf16(void* data, std::size_t count, std::uint64_t seed, cudaStream_t stream);

// Reads `bytes` (a multiple of 16) once with 16-byte loads and reduces them into *sink; the time
// of this kernel gives the read bandwidth.
void read_all(const void* data, std::size_t bytes, unsigned* sink, cudaStream_t stream);

// Reads `bytes` (a multiple of 16) once, four 16-byte loads per thread issued together, in a grid
// of as many CTAs as that takes: how fast a plain kernel streams a layer's weights.
void stream_read(const void* data, std::size_t bytes, unsigned* sink, cudaStream_t stream);

// stream_read launched as a programmatic dependent that lets the next kernel launch at its entry
// and never waits: a chain of them overlaps each read with the next one's launch and ramp, the
// least time any chain of kernels reading those weights in order can take.
cudaError_t stream_read_overlapped(const void* data, std::size_t bytes, unsigned* sink,
                                   cudaStream_t stream);

// stream_read_overlapped with the dependency a GEMM has: each thread waits for the previous grid
// to complete after issuing all but `loads_after_wait` (0 to 4) of its four loads, and issues
// those after the wait. A chain of them with 0 costs what waiting for the previous kernel costs
// when all of a kernel's reads went out before; with 2, half of each read waits.
cudaError_t stream_read_dependent(const void* data, std::size_t bytes, unsigned* sink,
                                  cudaStream_t stream, int loads_after_wait);

// Reads the [n, k] e4m3 weight the way the decode kernel's CTAs do (64-row tiles, `splits` K
// ranges, 128-byte pieces a row apart), all loads issued at once; does nothing for shapes
// outside that pattern (n % 64, k % (128 splits), K / splits > 768).
void read_tiles(const void* data, std::int64_t n, std::int64_t k, int splits, unsigned* sink,
                cudaStream_t stream);
// The quantizer's bytes without its arithmetic: `elements` bf16 (a multiple of 32) in, one byte
// each out, and one byte per 32 into `scales`.
void narrowing_copy(const void* in, std::size_t elements, void* out, void* scales,
                    cudaStream_t stream);

}  // namespace mxlinear::bench
