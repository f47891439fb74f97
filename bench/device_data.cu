#include <cuda_bf16.h>

#include "device_data.hpp"

#include <algorithm>

namespace mxlinear::bench {
namespace {

__device__ std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

__global__ void fill_e4m3_kernel(std::uint8_t* data, std::size_t count, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint8_t v = static_cast<std::uint8_t>(mix(seed ^ (i * 0x9E3779B97F4A7C15ULL)));
    if ((v & 0x7F) == 0x7F) v ^= 0x40;
    data[i] = v;
  }
}

__global__ void fill_scales_kernel(std::uint8_t* data, std::size_t count, std::uint64_t seed,
                                   int lo, int span) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    data[i] = static_cast<std::uint8_t>(lo + mix(seed ^ (i * 0x9E3779B97F4A7C15ULL)) % span);
  }
}

__global__ void fill_bf16_kernel(__nv_bfloat16* data, std::size_t count, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t r = mix(seed ^ (i * 0x9E3779B97F4A7C15ULL));
    data[i] = __float2bfloat16_rn(static_cast<float>(r >> 40) * 0x1p-23f - 1.0f);
  }
}

__global__ void read_all_kernel(const uint4* data, std::size_t count, unsigned* sink) {
  unsigned acc = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(data + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads; practically never stores
}

// Every thread issues its four 16-byte loads before it uses any, and the grid is as small as
// that allows, so a few megabytes go out in one wave of loads: the read a weight-streaming GEMM
// would ideally do, without the GEMM.
constexpr int kStreamLoads = 4;

__device__ __forceinline__ void stream_read_words(const uint4* data, std::size_t count,
                                                  unsigned* sink) {
  const std::size_t first =
      (blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x) * kStreamLoads;
  uint4 v[kStreamLoads];
#pragma unroll
  for (int i = 0; i < kStreamLoads; ++i)
    v[i] = first + i < count ? __ldcs(data + first + i) : uint4{};
  unsigned acc = 0;
#pragma unroll
  for (int i = 0; i < kStreamLoads; ++i) acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
  if (acc == 0x12345678u) *sink = acc;
}

__global__ void stream_read_kernel(const uint4* data, std::size_t count, unsigned* sink) {
  stream_read_words(data, count, sink);
}

// The same read as a programmatic dependent that lets the next kernel launch at once and never
// waits for the one before (it reads only weights, which nothing writes): consecutive reads
// overlap as far as the hardware lets them, with no launch gap or tail between them.
__global__ void stream_read_overlapped_kernel(const uint4* data, std::size_t count,
                                              unsigned* sink) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  stream_read_words(data, count, sink);
}

// As stream_read_overlapped, but each thread waits for the previous grid to complete (as a GEMM
// must before it reads the activation the previous kernel wrote) after issuing its first
// kStreamLoads - loads_after_wait loads, and issues the rest after the wait.
__global__ void stream_read_dependent_kernel(const uint4* data, std::size_t count, unsigned* sink,
                                             int loads_after_wait) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const std::size_t first =
      (blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x) * kStreamLoads;
  const int before = kStreamLoads - loads_after_wait;
  uint4 v[kStreamLoads];
#pragma unroll
  for (int i = 0; i < kStreamLoads; ++i)
    v[i] = i < before && first + i < count ? __ldcs(data + first + i) : uint4{};
  asm volatile("griddepcontrol.wait;" ::: "memory");
#pragma unroll
  for (int i = 0; i < kStreamLoads; ++i)
    if (i >= before && first + i < count) v[i] = __ldcs(data + first + i);
  unsigned acc = 0;
#pragma unroll
  for (int i = 0; i < kStreamLoads; ++i) acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
  if (acc == 0x12345678u) *sink = acc;
}

// The decode kernel's access pattern without its arithmetic: CTA (tile, split) reads rows
// [64 tile, 64 tile + 64) of K columns [split K / splits, ...) in 128-byte pieces, one row per
// 8 lanes, every load issued before any is used. Against stream_read (the same bytes in
// order) it shows what reading a weight in 128-byte pieces a row stride apart costs.
constexpr int kTileRows = 64;
constexpr int kPieceLoads = 24;  // loads per thread at most (K / splits <= 768 bytes)

__global__ void read_tiles_kernel(const std::uint8_t* data, int k, int k_per_split,
                                  unsigned* sink) {
  const int pieces = k_per_split / 128;
  const std::uint8_t* tile =
      data + static_cast<std::size_t>(blockIdx.x) * kTileRows * k + blockIdx.y * k_per_split;
  uint4 v[kPieceLoads];
  const int words = kTileRows * pieces * 8;  // 16-byte words in the CTA's share
#pragma unroll
  for (int i = 0; i < kPieceLoads; ++i) {
    const int word = static_cast<int>(threadIdx.x) + i * static_cast<int>(blockDim.x);
    // Word w: piece w / (64 * 8), row (w / 8) % 64, 16-byte column w % 8.
    const int piece = word / (kTileRows * 8), row = (word / 8) % kTileRows, col = word % 8;
    v[i] = word < words ? __ldcs(reinterpret_cast<const uint4*>(
                                     tile + static_cast<std::size_t>(row) * k + piece * 128) +
                                 col)
                        : uint4{};
  }
  unsigned acc = 0;
#pragma unroll
  for (int i = 0; i < kPieceLoads; ++i) acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
  if (acc == 0x12345678u) *sink = acc;
}

// The quantizer's traffic without its arithmetic, coalesced: thread i loads bf16 elements
// 8i..8i+7 (16 bytes: a warp reads 512 contiguous bytes), stores their high bytes (8 bytes: a
// warp writes 256 contiguous bytes), and every fourth thread one byte per 32 elements. (The first
// version gave each thread four neighbouring 16-byte pieces, so every store instruction of a
// warp touched 32 different 32-byte sectors, likely why it ran 1.5x slower than the quantizer.)
__global__ void narrowing_copy_kernel(const uint4* in, std::size_t words, uint2* out,
                                      std::uint8_t* scales) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += stride) {
    const uint4 v = __ldcs(in + i);
    const auto hi = [](unsigned a, unsigned b) { return __byte_perm(a, b, 0x7531); };
    out[i] = make_uint2(hi(v.x, v.y), hi(v.z, v.w));
    if (i % 4 == 0) scales[i / 4] = static_cast<std::uint8_t>(v.x);
  }
}

constexpr int kThreads = 256;
constexpr int kBlocks = 132 * 16;

}  // namespace

void fill_e4m3(std::uint8_t* data, std::size_t count, std::uint64_t seed, cudaStream_t stream) {
  fill_e4m3_kernel<<<kBlocks, kThreads, 0, stream>>>(data, count, seed);
}

void fill_scales(std::uint8_t* data, std::size_t count, std::uint64_t seed, int lo, int hi,
                 cudaStream_t stream) {
  fill_scales_kernel<<<kBlocks, kThreads, 0, stream>>>(data, count, seed, lo, hi - lo + 1);
}

void fill_bf16(void* data, std::size_t count, std::uint64_t seed, cudaStream_t stream) {
  fill_bf16_kernel<<<kBlocks, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(data), count,
                                                     seed);
}

void read_all(const void* data, std::size_t bytes, unsigned* sink, cudaStream_t stream) {
  read_all_kernel<<<kBlocks * 2, kThreads, 0, stream>>>(static_cast<const uint4*>(data), bytes / 16,
                                                        sink);
}

namespace {

// CTAs of a stream read of `count` 16-byte words: kStreamLoads a thread.
unsigned stream_read_ctas(std::size_t count) {
  const std::size_t per_block = std::size_t{kThreads} * kStreamLoads;
  return static_cast<unsigned>((count + per_block - 1) / per_block);
}

template <typename... Args>
cudaError_t launch_stream_read_programmatic(void (*kernel)(const uint4*, std::size_t, unsigned*,
                                                           Args...),
                                            const void* data, std::size_t bytes, unsigned* sink,
                                            cudaStream_t stream, Args... args) {
  const std::size_t count = bytes / 16;
  const unsigned blocks = stream_read_ctas(count);
  if (blocks == 0) return cudaSuccess;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, static_cast<const uint4*>(data), count, sink, args...);
}

}  // namespace

void stream_read(const void* data, std::size_t bytes, unsigned* sink, cudaStream_t stream) {
  const std::size_t count = bytes / 16;
  const unsigned blocks = stream_read_ctas(count);
  if (blocks == 0) return;
  stream_read_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const uint4*>(data), count, sink);
}

cudaError_t stream_read_overlapped(const void* data, std::size_t bytes, unsigned* sink,
                                   cudaStream_t stream) {
  return launch_stream_read_programmatic(stream_read_overlapped_kernel, data, bytes, sink, stream);
}

cudaError_t stream_read_dependent(const void* data, std::size_t bytes, unsigned* sink,
                                  cudaStream_t stream, int loads_after_wait) {
  if (loads_after_wait < 0 || loads_after_wait > kStreamLoads) return cudaErrorInvalidValue;
  return launch_stream_read_programmatic(stream_read_dependent_kernel, data, bytes, sink, stream,
                                         loads_after_wait);
}

void read_tiles(const void* data, std::int64_t n, std::int64_t k, int splits, unsigned* sink,
                cudaStream_t stream) {
  const auto k_per_split = static_cast<int>(k / splits);
  if (n % kTileRows != 0 || k % splits != 0 || k_per_split % 128 != 0 ||
      k_per_split / 128 * kTileRows * 8 > kPieceLoads * kThreads) {
    return;
  }
  read_tiles_kernel<<<dim3(static_cast<unsigned>(n / kTileRows), static_cast<unsigned>(splits)),
                      kThreads, 0, stream>>>(static_cast<const std::uint8_t*>(data),
                                             static_cast<int>(k), k_per_split, sink);
}

void narrowing_copy(const void* in, std::size_t elements, void* out, void* scales,
                    cudaStream_t stream) {
  const std::size_t words = elements / 8;
  // One word per thread up to 64 resident-sized waves of CTAs; a grid-stride loop beyond.
  const auto blocks = static_cast<unsigned>(
      std::min<std::size_t>((words + kThreads - 1) / kThreads, std::size_t{kBlocks} * 64));
  if (blocks == 0) return;
  narrowing_copy_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const uint4*>(in), words,
                                                         static_cast<uint2*>(out),
                                                         static_cast<std::uint8_t*>(scales));
}

}  // namespace mxlinear::bench
