// Wrappers for the sm_90a instructions of the TMA/wgmma kernels: mbarriers, bulk and tensor
// copies, wgmma descriptors and fences, clusters and programmatic dependent launch. Facts and
// their sources: the PTX ISA. Device code only.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace mxlinear::device::hopper {

// --- mbarrier -----------------------------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes barrier initialisation visible to the async proxy and the rest of the cluster.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also expects `bytes` more transaction bytes in the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// An arrival that fires when this thread's earlier cp.async copies land. It counts against the
// barrier's initial count (.noinc), so each issuing thread is one of the expected arrivals.
__device__ __forceinline__ void cp_async_mbarrier_arrive(std::uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Blocks until the phase with the given parity has completed (acquire).
__device__ __forceinline__ void mbarrier_wait(std::uint32_t bar, std::uint32_t parity) {
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}

// A ring of `stages` full/empty barrier pairs (8 bytes each, fulls first): full barriers expect
// `full_count` arrivals, empty ones `empty_count`. One thread calls it; a block-wide barrier
// must follow before any thread uses the ring.
__device__ __forceinline__ void init_ring(std::uint32_t full, std::uint32_t empty, int stages,
                                          std::uint32_t full_count, std::uint32_t empty_count) {
  for (int s = 0; s < stages; ++s) {
    mbarrier_init(full + 8 * s, full_count);
    mbarrier_init(empty + 8 * s, empty_count);
  }
  fence_mbarrier_init();
}

// --- TMA and bulk copies ------------------------------------------------------------------------

__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

// A 2-D box at (c0 = innermost element, c1 = row) into shared memory; completes on `bar`.
// Out-of-bounds parts of the box read as zeros and still count as delivered bytes.
__device__ __forceinline__ void tma_load_2d(std::uint32_t dst, const CUtensorMap* map, int c0,
                                            int c1, std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// A word another CTA publishes: st.release at GPU scope after the data it guards, ld.acquire
// before reading that data.
__device__ __forceinline__ void store_release_gpu(std::uint32_t* word, std::uint32_t value) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(word), "r"(value) : "memory");
}
__device__ __forceinline__ std::uint32_t load_acquire_gpu(const std::uint32_t* word) {
  std::uint32_t value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(value) : "l"(word) : "memory");
  return value;
}

// Adds to a word at GPU scope, acquire and release: the writes this thread has seen (its CTA's,
// after a barrier) are visible to whoever reads the sum, and what they published to it.
__device__ __forceinline__ std::uint32_t add_acq_rel_gpu(std::uint32_t* word, std::uint32_t value) {
  std::uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;\n"
               : "=r"(old)
               : "l"(word), "r"(value)
               : "memory");
  return old;
}

// Starts moving the box at (c0, c1) of a 2-D tensor map into L2, with no destination and no
// barrier: a later tma_load_2d of the same box then reads L2.
__device__ __forceinline__ void tma_prefetch_l2_2d(const CUtensorMap* map, int c0, int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];\n" ::"l"(map),
               "r"(c0), "r"(c1)
               : "memory");
}

// The dynamic shared-memory window aligned up to 1024 bytes (the 128-byte swizzle atom, which
// TMA tiles and wgmma descriptors with base offset 0 need); the launch reserves 1024 bytes of
// slack for it.
struct AlignedSmem {
  std::uint32_t address;  // shared-window address
  std::uint8_t* pointer;  // the same bytes as a generic pointer
};
__device__ __forceinline__ AlignedSmem align_smem_1024(std::uint8_t* raw) {
  const auto raw_address = static_cast<std::uint32_t>(__cvta_generic_to_shared(raw));
  const std::uint32_t address = (raw_address + 1023u) & ~1023u;
  return {address, raw + (address - raw_address)};
}

// --- wgmma --------------------------------------------------------------------------------------

// Shared-memory matrix descriptor for a K-major tile of 128-byte rows written with the 128-byte
// swizzle (what TMA SWIZZLE_128B writes): 8-row groups 1024 bytes apart. `address` may step
// through a row in 16-byte units (one e4m3 k32 block = 32 bytes) from a 1024-byte aligned tile.
__device__ __forceinline__ std::uint64_t kmajor_sw128_descriptor(std::uint32_t address) {
  constexpr std::uint64_t kLeadingByteOffset = 1;         // unused with swizzling; "1" by custom
  constexpr std::uint64_t kStrideByteOffset = 1024 >> 4;  // between 8-row core-matrix groups
  constexpr std::uint64_t kSwizzle128B = std::uint64_t{1} << 62;
  return ((address & 0x3FFFFu) >> 4) | (kLeadingByteOffset << 16) | (kStrideByteOffset << 32) |
         kSwizzle128B;
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  static_assert(kPending >= 0 && kPending <= 7, "wgmma.wait_group takes 0..7");
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accesses of accumulator registers across wgmma fences/waits.
template <int kN>
__device__ __forceinline__ void pin(float (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Moves a warpgroup's register budget (setmaxnreg): every warp of the warpgroup
// executes it, and ptxas honours it only with an entry register count (__launch_bounds__ with a
// minimum of one CTA) and each role in its own branch with no code after the branches.
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// Four 8 x 8 matrices of 16-bit values from registers into shared memory, each transposed.
// Register r_q holds matrix q in the mma fragment layout (lane l: row l / 4, columns 2 (l % 4)
// and + 1, the lower column in the low half); lane l gives the address of row l % 8 of the
// transposed matrix l / 8 (8 values, 16 bytes, 16-byte aligned).
__device__ __forceinline__ void stmatrix_x4_trans(std::uint32_t address, std::uint32_t r0,
                                                  std::uint32_t r1, std::uint32_t r2,
                                                  std::uint32_t r3) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address),
      "r"(r0), "r"(r1), "r"(r2), "r"(r3)
      : "memory");
}

// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads, a multiple of 32.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// --- clusters and dependent launch --------------------------------------------------------------

__device__ __forceinline__ void cluster_sync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}

// The two halves of a cluster barrier phase, for work between them: arrive (relaxed: orders
// nothing; release: this thread's earlier writes, distributed shared memory included, are
// visible to whoever waits for the phase) and wait (acquire).
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait_acquire() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// Writes a float at the same shared-memory offset in cluster CTA `rank`.
__device__ __forceinline__ void store_cluster_shared(std::uint32_t local, std::uint32_t rank,
                                                     float v) {
  std::uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(remote), "f"(v) : "memory");
}

// Reads a float at the same shared-memory offset in cluster CTA `rank`.
__device__ __forceinline__ float load_cluster_shared(std::uint32_t local, std::uint32_t rank) {
  std::uint32_t remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

// Reads 16 bytes (16-byte aligned) at the same shared-memory offset in cluster CTA `rank`.
__device__ __forceinline__ float4 load_cluster_shared_v4(std::uint32_t local, std::uint32_t rank) {
  std::uint32_t remote;
  float4 v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
  return v;
}

// Waits until the grids this one depends on (programmatic launch) have finished and their
// writes are visible; a no-op for a normal launch.
__device__ __forceinline__ void wait_prerequisite_grids() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
// The SM this thread runs on (%smid: 0 .. SMs - 1 on sm_90; a CTA never moves).
__device__ __forceinline__ unsigned sm_id() {
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  return sm;
}

// Lets a programmatically dependent grid start launching; it still waits for our completion
// before it reads what we write.
__device__ __forceinline__ void allow_dependent_launch() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

}  // namespace mxlinear::device::hopper
