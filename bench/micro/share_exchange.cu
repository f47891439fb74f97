// How fast the CTAs of a cluster can meet: the prefill kernel's split-K tiles spend 1.3-3.2 us
// from their main loop to their stores (docs/PERFORMANCE.md, "Measured limits") where an unsplit
// tile stores as many outputs in 0.3-0.6 us (measured on the H200), and three ways of moving the
// fp32 shares (remote loads, scalar remote stores, one bulk copy a share) cost about the same at
// 128 tokens. This times the
// meeting alone: every CTA of a cluster of S holds a tile of S fp32 shares of F floats in its
// shared memory, ends up with the sum of share r of all S tiles (r its rank), and stores it as
// bf16; by
//   own     its own share only, no exchange (the floor: an unsplit tile's stores);
//   sync    the same, then the cluster barrier that ends every exchange (its fixed cost);
//   pull    16-byte distributed shared memory loads of every peer's share (the shipped meeting);
//   push    16-byte distributed shared memory stores into each peer's inbox, then local adds;
//   bulk    one cp.async.bulk copy a peer into its inbox, completing on its mbarrier;
//   global  16-byte stores of the peers' shares to global memory (L2), a cluster barrier, then
//           16-byte loads of this CTA's share from the peers' slots;
//   bulk-l2 the same through L2 by bulk copies: one cp.async.bulk a peer's share out to global,
//           a cluster barrier, one a peer's slot back into the inbox, completing on the mbarrier;
//   l2-read only bulk-l2's reads (no writes, no barrier): what bringing the bytes in from L2
//           costs alone. It reads the slots bulk-l2 left, so it runs right after it.
//   build/bench/mxlinear_share_exchange (the CMake target mxlinear_share_exchange)
// Prints, per case, the median and maximum microseconds from a CTA's start (after a cluster
// barrier) to its last store issued, over the last of five launches (after ~100 us of every SM
// kept busy, so the clocks are up; the median SM clock over the spans is printed), and whether
// that launch's
// sums are right (checked on the host; the program fails if not). The 64 x T split-4 cases
// sweep the share's size at one split count and CTA shape: a time that grows with the bytes is
// the exchange's bandwidth, one that does not is a fixed cost.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cta_span.cuh"

namespace {

using mxlinear::micro::check;
using mxlinear::micro::global_ns;
using mxlinear::micro::keep_busy;
using mxlinear::micro::record_cta_span_and_cycles;

// More than half an SM's shared memory: one CTA an SM, as in the GEMM.
constexpr int kSmemBytes = 200 * 1024;

enum class Method { kOwn, kSync, kPull, kPush, kBulk, kGlobal, kBulkL2, kL2Read };
constexpr const char* kMethodNames[] = {"own",  "sync",   "pull",    "push",
                                        "bulk", "global", "bulk-l2", "l2-read"};

__device__ __forceinline__ std::uint32_t cluster_rank() {
  std::uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ std::uint32_t cluster_size() {
  std::uint32_t n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
}
__device__ __forceinline__ std::uint32_t smem_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ std::uint32_t peer_address(std::uint32_t local, std::uint32_t rank) {
  std::uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
__device__ __forceinline__ float4 load_peer(std::uint32_t remote) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
  return v;
}
__device__ __forceinline__ void store_peer(std::uint32_t remote, float4 v) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(remote), "f"(v.x),
               "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}

__device__ __forceinline__ float4 add(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ void store_bf16x4(__nv_bfloat16* out, float4 v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 bits;
  bits.x = *reinterpret_cast<const unsigned*>(&lo);
  bits.y = *reinterpret_cast<const unsigned*>(&hi);
  *reinterpret_cast<uint2*>(out) = bits;
}

// The bulk copies into this CTA's inbox have all landed (phase 0 of its mbarrier).
__device__ __forceinline__ void wait_for_inbox(const std::uint64_t* barrier) {
  asm volatile(
      "{\n.reg .pred done;\nwait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
      "@!done bra wait;\n}" ::"r"(smem_address(barrier))
      : "memory");
}

// This CTA's own share plus the peers' copies in slots[j] (j != rank, F floats each), stored
// as bf16 by the CTA's threads 4 floats at a time.
__device__ __forceinline__ void add_slots_and_store(const float* own, const float* slots,
                                                    int splits, int rank, int f,
                                                    __nv_bfloat16* out) {
  for (int e = 4 * static_cast<int>(threadIdx.x); e < f; e += 4 * static_cast<int>(blockDim.x)) {
    float4 v = *reinterpret_cast<const float4*>(own + e);
    for (int j = 0; j < splits; ++j) {
      if (j != rank) v = add(v, *reinterpret_cast<const float4*>(slots + j * f + e));
    }
    store_bf16x4(out + e, v);
  }
}

// Shared memory: the tile [S][F] floats, an inbox [S][F] (slot j: peer j's copy of this CTA's
// share), and the bulk copies' mbarrier. Global workspace (kGlobal): [cluster][dest][source][F].
template <Method kMethod>
__global__ void exchange(int share_floats, float* workspace, __nv_bfloat16* out,
                         unsigned long long* times) {
  extern __shared__ __align__(16) std::uint8_t smem[];
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const int cta = static_cast<int>(blockIdx.x);
  const auto splits = static_cast<int>(cluster_size());
  const auto rank = static_cast<int>(cluster_rank());
  const int cluster = cta / splits;
  const int f = share_floats;
  auto* tile = reinterpret_cast<float*>(smem);
  float* inbox = tile + splits * f;
  auto* barrier = reinterpret_cast<std::uint64_t*>(inbox + splits * f);
  for (int i = tid; i < splits * f; i += threads) tile[i] = static_cast<float>(i % 977 + cta);
  if (tid == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_address(barrier)));
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  if constexpr (kMethod == Method::kBulk || kMethod == Method::kBulkL2 ||
                kMethod == Method::kL2Read) {
    // The inbox expects every peer's share before any peer may send (the barrier below).
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    if (tid == 0) {
      const auto bytes = static_cast<std::uint32_t>((splits - 1) * f * 4);
      asm volatile(
          "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(barrier)),
          "r"(bytes)
          : "memory");
    }
  }
  cluster_sync();
  const std::uint64_t start = global_ns();
  const long long start_cycles = clock64();
  __nv_bfloat16* const my_out = out + static_cast<long long>(cta) * f;
  const float* const own = tile + rank * f;
  if constexpr (kMethod == Method::kOwn || kMethod == Method::kSync) {
    for (int e = 4 * tid; e < f; e += 4 * threads) {
      store_bf16x4(my_out + e, *reinterpret_cast<const float4*>(own + e));
    }
    if constexpr (kMethod == Method::kSync) cluster_sync();
  } else if constexpr (kMethod == Method::kPull) {
    const std::uint32_t share = smem_address(own);
    for (int e = 4 * tid; e < f; e += 4 * threads) {
      float4 v = load_peer(peer_address(share + 4u * e, 0));
      for (int j = 1; j < splits; ++j) v = add(v, load_peer(peer_address(share + 4u * e, j)));
      store_bf16x4(my_out + e, v);
    }
    cluster_sync();  // no CTA leaves while a peer reads it
  } else if constexpr (kMethod == Method::kPush || kMethod == Method::kGlobal) {
    for (int j = 0; j < splits; ++j) {
      if (j == rank) continue;
      const float* src = tile + j * f;
      if constexpr (kMethod == Method::kPush) {
        const std::uint32_t dst = peer_address(smem_address(inbox + rank * f), j);
        for (int e = 4 * tid; e < f; e += 4 * threads) {
          store_peer(dst + 4u * e, *reinterpret_cast<const float4*>(src + e));
        }
      } else {
        float* dst =
            workspace + ((static_cast<long long>(cluster) * splits + j) * splits + rank) * f;
        for (int e = 4 * tid; e < f; e += 4 * threads) {
          *reinterpret_cast<float4*>(dst + e) = *reinterpret_cast<const float4*>(src + e);
        }
      }
    }
    cluster_sync();  // every share in place (release / acquire at cluster scope)
    const float* slots =
        kMethod == Method::kPush
            ? inbox
            : workspace + (static_cast<long long>(cluster) * splits + rank) * splits * f;
    add_slots_and_store(own, slots, splits, rank, f, my_out);
  } else if constexpr (kMethod == Method::kBulkL2 || kMethod == Method::kL2Read) {
    float* const slots = workspace + static_cast<long long>(cluster) * splits * splits * f;
    const auto bytes = static_cast<std::uint32_t>(f * 4);
    if (kMethod == Method::kBulkL2 && tid == 0) {
      for (int j = 0; j < splits; ++j) {
        if (j == rank) continue;
        float* dst = slots + (j * splits + rank) * f;  // peer j's slot from this CTA
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst),
                     "r"(smem_address(tile + j * f)), "r"(bytes)
                     : "memory");
      }
      asm volatile("cp.async.bulk.commit_group;\ncp.async.bulk.wait_group 0;" ::: "memory");
      // The async proxy's writes, before the barrier's release publishes them.
      asm volatile("fence.proxy.async.global;" ::: "memory");
    }
    if constexpr (kMethod == Method::kBulkL2) cluster_sync();  // every share in its slot
    if (tid == 0) {
      for (int j = 0; j < splits; ++j) {
        if (j == rank) continue;
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
            "[%3];" ::"r"(smem_address(inbox + j * f)),
            "l"(slots + (rank * splits + j) * f), "r"(bytes), "r"(smem_address(barrier))
            : "memory");
      }
    }
    wait_for_inbox(barrier);
    add_slots_and_store(own, inbox, splits, rank, f, my_out);
  } else {  // kBulk
    if (tid == 0) {
      const auto bytes = static_cast<std::uint32_t>(f * 4);
      for (int j = 0; j < splits; ++j) {
        if (j == rank) continue;
        const std::uint32_t dst = peer_address(smem_address(inbox + rank * f), j);
        const std::uint32_t bar = peer_address(smem_address(barrier), j);
        asm volatile(
            "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], "
            "%2, [%3];" ::"r"(dst),
            "r"(smem_address(tile + j * f)), "r"(bytes), "r"(bar)
            : "memory");
      }
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
    wait_for_inbox(barrier);
    add_slots_and_store(own, inbox, splits, rank, f, my_out);
    if (tid == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
  record_cta_span_and_cycles(times, cta, start, start_cycles);
}

// bf16 bits of x, rounded to nearest even (x finite).
std::uint16_t bf16_bits(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return static_cast<std::uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// How many of the last launch's sums differ from the host's (-1 if the download failed). CTA c
// (rank r = c % S of cluster c / S) holds tile[i] = i % 977 + c, so its output e is the sum over
// the cluster's CTAs j of (r F + e) % 977 + j (small integers, exact in fp32 in any order), or,
// where nothing was exchanged (own, sync), its own term alone.
int wrong_sums(const __nv_bfloat16* out, int splits, int share_floats, int ctas, bool exchanged) {
  std::vector<std::uint16_t> got(static_cast<std::size_t>(ctas) * share_floats);
  if (check(cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost), "download")) {
    return -1;
  }
  int wrong = 0;
  for (int c = 0; c < ctas; ++c) {
    const int rank = c % splits, first = c - rank;
    for (int e = 0; e < share_floats; ++e) {
      float sum = 0;
      for (int j = first; j < first + splits; ++j) {
        if (exchanged || j == c) sum += static_cast<float>((rank * share_floats + e) % 977 + j);
      }
      if (got[static_cast<std::size_t>(c) * share_floats + e] != bf16_bits(sum)) ++wrong;
    }
  }
  return wrong;
}

template <Method kMethod>
int run(int splits, int share_floats, int threads, int ctas, float* workspace, __nv_bfloat16* out,
        unsigned long long* times, const char* label) {
  if (check(cudaFuncSetAttribute(exchange<kMethod>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 kSmemBytes),
            "smem attribute")) {
    return 1;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(ctas));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = kSmemBytes;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = static_cast<unsigned>(splits);
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  // ~100 us of every SM busy first: the clocks up, as in a model's stream.
  keep_busy<<<264, 128>>>(200000);
  if (check(cudaGetLastError(), "keep_busy")) return 1;
  std::vector<double> per_cta, mhz;
  for (int rep = 0; rep < 5; ++rep) {  // the last of five: code and translations warm
    // Poisoned (bf16 NaN) before each launch, so a sum the launch did not write fails the check.
    if (check(cudaMemset(out, 0xFF, static_cast<std::size_t>(ctas) * share_floats * 2), "poison") ||
        check(cudaLaunchKernelEx(&config, exchange<kMethod>, share_floats, workspace, out, times),
              "launch") ||
        check(cudaDeviceSynchronize(), "exchange")) {
      return 1;
    }
    std::vector<unsigned long long> t(3 * static_cast<std::size_t>(ctas));
    if (check(cudaMemcpy(t.data(), times, t.size() * sizeof(t[0]), cudaMemcpyDeviceToHost),
              "download")) {
      return 1;
    }
    per_cta.clear();
    mhz.clear();
    for (int c = 0; c < ctas; ++c) {
      const auto ns = static_cast<double>(t[3 * c + 1] - t[3 * c]);
      per_cta.push_back(ns * 1e-3);
      if (ns > 0) mhz.push_back(static_cast<double>(t[3 * c + 2]) / ns * 1e3);
    }
  }
  std::sort(per_cta.begin(), per_cta.end());
  std::sort(mhz.begin(), mhz.end());
  const int wrong = wrong_sums(out, splits, share_floats, ctas,
                               kMethod != Method::kOwn && kMethod != Method::kSync);
  if (wrong < 0) return 1;
  std::printf("%-22s %7s %6d %7d %8.1f %7d %10.2f %10.2f %8.0f  %s\n", label,
              kMethodNames[static_cast<int>(kMethod)], splits, ctas, share_floats * 4 / 1024.0,
              threads, per_cta[per_cta.size() / 2], per_cta.back(),
              mhz.empty() ? 0.0 : mhz[mhz.size() / 2], wrong == 0 ? "ok" : "WRONG SUMS");
  return wrong == 0 ? 0 : 1;
}

}  // namespace

// Every method in the order given (a comma fold: left to right, as the table prints), returning
// how many failed.
template <Method... kMethods>
int run_methods(int splits, int share_floats, int threads, int ctas, float* workspace,
                __nv_bfloat16* out, unsigned long long* times, const char* label) {
  int failed = 0;
  ((failed += run<kMethods>(splits, share_floats, threads, ctas, workspace, out, times, label)),
   ...);
  return failed;
}

int main() {
  struct Case {
    const char* label;  // the prefill tile and split count it stands for
    int splits, share_floats, threads, ctas;
  };
  // Shares as ShareLayout lays them out: (rows per share + 4) x tokens floats.
  const Case cases[] = {
      {"128x128 split2 M=128", 2, 68 * 128, 256, 96},  // dense gate_up
      {"128x128 split4 M=128", 4, 36 * 128, 256, 80},  // qkv
      {"64x128 split4 M=128", 4, 20 * 128, 128, 96},   // shared gate_up
      {"64x32 split4 M=32", 4, 20 * 32, 256, 96},      // shared gate_up at M = 32
      // The 64 x 128 split-4 CTA with fewer tokens: the share's size swept.
      {"64x16 split4 128thr", 4, 20 * 16, 128, 96},
      {"64x32 split4 128thr", 4, 20 * 32, 128, 96},
      {"64x64 split4 128thr", 4, 20 * 64, 128, 96},
  };
  std::size_t workspace_floats = 0, out_floats = 0;
  for (const Case& c : cases) {
    workspace_floats = std::max(workspace_floats, static_cast<std::size_t>(c.ctas) * c.splits *
                                                      static_cast<std::size_t>(c.share_floats));
    out_floats = std::max(out_floats, static_cast<std::size_t>(c.ctas) * c.share_floats);
  }
  float* workspace = nullptr;
  __nv_bfloat16* out = nullptr;
  unsigned long long* times = nullptr;
  if (check(cudaMalloc(&workspace, workspace_floats * 4), "cudaMalloc") ||
      check(cudaMalloc(&out, out_floats * 2), "cudaMalloc") ||
      check(cudaMalloc(&times, 3 * sizeof(unsigned long long) * 132), "cudaMalloc")) {
    return 1;
  }
  std::printf("%-22s %7s %6s %7s %8s %7s %10s %10s %8s  %s\n", "case", "method", "splits", "CTAs",
              "share KB", "threads", "median us", "max us", "SM MHz", "outputs");
  for (const Case& c : cases) {
    const int failed =
        run_methods<Method::kOwn, Method::kSync, Method::kPull, Method::kPush, Method::kBulk,
                    Method::kGlobal, Method::kBulkL2, Method::kL2Read>(
            c.splits, c.share_floats, c.threads, c.ctas, workspace, out, times, c.label);
    if (failed != 0) return 1;
  }
  cudaFree(times);
  cudaFree(out);
  cudaFree(workspace);
  return 0;
}
