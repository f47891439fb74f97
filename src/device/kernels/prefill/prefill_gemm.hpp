// Host-side entry to the Hopper prefill GEMM: its compiled instances and a launcher. The
// activation operand is the bf16 pre-pass output (activation_bf16.hpp), not p.a.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <string_view>

#include "device/common/gemm_params.hpp"
#include "device/common/sm90.hpp"

namespace mxlinear::device {

struct PrefillInstanceInfo {
  int rows;    // weight rows per CTA (64 per consumer warpgroup, or per pair when alternating)
  int tokens;  // activation rows per CTA (wgmma N)
  int stages;
  bool overlap;  // one stage's wgmma kept in flight while the next stage's weights convert
  int fixed_smem_bytes;
  int bk;            // K per stage: 128, or 64 (twice the stages in the same ring)
  bool alternating;  // two warpgroups on the same rows, taking alternate stages
  int ring_bytes;    // the ring, which holds the fp32 output tile after the main loop
  bool persistent;   // one CTA per SM walks the output tiles; K is not split
  bool stream_k;     // persistent, each CTA an equal run of (tile, 128-K chunk) units
  bool k_parts;      // sums K in the batch-invariant parts (batch_invariant_parts); K unsplit
  bool part_sums_in_memory;  // k parts: the finished parts' sum in GemmParams::part_sums
  bool splits_in_memory;     // K splits may meet in GemmParams::split_tiles
};

// A CTA's weight scales sit in shared memory as one 4-byte word per row and 128-K chunk. Up to
// kPrefillScaleSlots chunks they all do; a longer K range (K > 7168 a CTA) keeps two windows of
// kPrefillScaleWindow chunks, chunk c in slot c % kPrefillScaleSlots: each warp refills the
// window it has left with the one after next as it enters a window, so the area no longer
// grows with K (at K = 25600 it took 103 KB of a 128-row tile, and the large tiles did not fit).
// 28 is the largest window with which every instance fits at any K (the persistent 128 x 256
// tile's ring leaves it 31 KB), a multiple of 4 so that a window starts on a chunk of each
// lane's parity (copy_scale_chunks).
inline constexpr int kPrefillScaleWindow = 28;
inline constexpr int kPrefillScaleSlots = 2 * kPrefillScaleWindow;
static_assert(kPrefillScaleWindow % 4 == 0, "windows start at a multiple of 2 * kStageStep");

// K splits run as a thread-block cluster of this many CTAs at most.
inline constexpr int kPrefillMaxSplits = 8;

// The bytes of partial tiles and flags the stream-K configs need for a launch of at most `ctas`
// CTAs (one fp32 partial tile of the largest of their tiles and one flag word each), a multiple
// of 256; 0 for ctas < 1. A stream-K launch has one CTA per SM at most, and never more than
// GemmParams::stream_k_ctas. linear()'s workspace holds them from this many rows up, where the
// stream-K configs run.
std::size_t prefill_stream_k_bytes(int ctas);
inline constexpr int kPrefillStreamKMinRows = 256;

// The K splits of an instance with splits_in_memory may meet in memory (GemmParams::split_tiles)
// from this many rows on (calls of fewer rows keep a small workspace); where they do is the
// registry's choice. Every other split meets over a cluster.
inline constexpr int kPrefillSplitInMemoryMinRows = 8;

// The bytes of split tiles and arrival words the launches that meet in memory need on a device
// of `sms` SMs (a tile of the largest such instance and a word per CTA; they meet in memory only
// where their CTAs fit the SMs one each), a multiple of 256; 0 for sms < 1.
std::size_t prefill_split_tile_bytes(int sms);

// The bytes of part-sum tiles the k-parts instances that keep them in memory need on a device
// of `sms` SMs (one fp32 tile of the largest of them per SM), a multiple of 256; 0 for sms < 1.
// linear()'s workspace holds them from kPrefillStreamKMinRows rows up, where those configs run.
std::size_t prefill_part_sum_bytes(int sms);

std::span<const PrefillInstanceInfo> prefill_gemm_instances();

// Shared memory of one CTA of `instance` at K split `splits` ways (the ring plus the weight
// scale bytes of the CTA's K range).
int prefill_gemm_smem_bytes(int instance, int k, int splits);

// The dynamic shared memory a launch of `ctas` CTAs on `sms` SMs asks for, of an instance whose
// CTA uses `smem`: that, or where a tile grid launched without a cluster (not a persistent walk)
// has no more CTAs than SMs and two of them would fit an SM, kPrefillOneCtaAnSmBytes, with which
// one does.
// Launched behind the previous kernel (programmatic launch), such a grid's CTAs otherwise went
// two to an SM on the SMs that kernel freed first, and the doubled SMs set the time (dense
// gate_up's 96 CTAs of 64 x 32 at M = 16: 34.1 us, 24.6 spread).
inline constexpr int kPrefillOneCtaAnSmBytes = kSm90SmemPerSm / 2 - kSm90SmemReservedPerCta + 1024;
static_assert(ctas_per_sm_by_smem(kPrefillOneCtaAnSmBytes) == 1 &&
                  kPrefillOneCtaAnSmBytes <= kSm90MaxSmemPerCta,
              "one CTA an SM, within a CTA's limit");
constexpr int prefill_launch_smem(long long ctas, int sms, bool clustered, bool persistent,
                                  int smem) {
  if (persistent || clustered || ctas > sms || ctas_per_sm_by_smem(smem) < 2) return smem;
  return smem < kPrefillOneCtaAnSmBytes ? kPrefillOneCtaAnSmBytes : smem;
}

// Whether the output tile of `instance` cut into shares for `splits` K splits (1..
// kPrefillMaxSplits) fits its ring: always for 1, 2, 4 and 8; not for 6 with 128 x 256 tiles;
// a persistent or k-parts instance only for 1.
bool prefill_gemm_splits_fit(int instance, int splits);

// A launch's CTAs, and how many of them the current device holds at once (whole clusters of
// the K splits for a split launch met over a cluster, not `in_memory`): more CTAs than that run
// in more than one wave.
struct PrefillFootprint {
  long long ctas = 0;
  long long resident_ctas = 0;
};
cudaError_t prefill_gemm_footprint(int instance, int m, int n, int k, int splits, bool in_memory,
                                   PrefillFootprint* out);

// The registers a thread an instance whose producer warpgroup gives its registers to the
// consumers (setmaxnreg) needs at launch, and what ptxas gave it: with fewer than `needed`, a
// consumer's setmaxnreg.inc would wait forever for registers no warp frees, so the launcher
// refuses such an instance (cudaErrorInvalidConfiguration). Both 0 for instances that move none.
struct PrefillRegisterMoves {
  int compiled = 0;
  int needed = 0;
};
cudaError_t prefill_gemm_register_moves(int instance, PrefillRegisterMoves* out);

// Empty when p suits the prefill kernel (K % 32 == 0, 16-byte aligned weight rows, the
// driver's TMA encoder), else what is wrong. The activation operand is checked by the launcher.
std::string_view prefill_gemm_unsupported(const GemmParams& p);

// out = deq(a) deq(w)^T (+ bias) for p.m > 0, with a_bf16 = the permuted bf16 activation
// [p.m, p.k] (row stride ld_a_bf16 elements, 16-byte aligned rows), K split `splits` ways
// (1..kPrefillMaxSplits, at most ceil(K / 128)), launched as a programmatic dependent of the
// pre-pass. Returns the launch error, if any.
cudaError_t launch_prefill_gemm(const GemmParams& p, const void* a_bf16, std::int64_t ld_a_bf16,
                                int instance, int splits, cudaStream_t stream);

}  // namespace mxlinear::device
