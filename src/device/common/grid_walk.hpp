// Index arithmetic the kernels share with their host launchers and CPU tests (host and device):
// how a grid-stride walk visits row-major groups, and how split-K spreads 128-K chunks.
#pragma once

#include "device/common/host_device.hpp"

// `#pragma unroll` in device code only (host compilers warn on it, and -Werror).
#if defined(__CUDA_ARCH__)
#define MXL_UNROLL _Pragma("unroll")
#else
#define MXL_UNROLL
#endif

namespace mxlinear::device {

// A position in a row-major [rows, groups_per_row] array of groups.
struct GroupPosition {
  int row, group;
};

// The fixed (rows, groups) step of a grid-stride walk: advancing a position by `stride` flat
// groups needs no division. One stepper serves several walks of the same stride.
struct GroupStepper {
  int groups_per_row, step_rows, step_groups;

  MXL_HOST_DEVICE GroupStepper(int stride, int groups_per_row_)
      : groups_per_row(groups_per_row_),
        step_rows(stride / groups_per_row_),
        step_groups(stride % groups_per_row_) {}

  MXL_HOST_DEVICE GroupPosition position(int flat) const {
    return {flat / groups_per_row, flat % groups_per_row};
  }

  MXL_HOST_DEVICE void advance(GroupPosition& at) const {
    at.row += step_rows;
    at.group += step_groups;
    if (at.group >= groups_per_row) {
      at.group -= groups_per_row;
      ++at.row;
    }
  }
};

// A grid-stride walk: the thread that starts at flat index `first` visits first,
// first + stride, first + 2 * stride, ... as (row, group) positions. The walk ends when row
// reaches the array's rows.
struct GroupWalk {
  GroupStepper stepper;
  GroupPosition at;

  MXL_HOST_DEVICE GroupWalk(int first, int stride, int groups_per_row)
      : stepper(stride, groups_per_row), at(stepper.position(first)) {}

  MXL_HOST_DEVICE void advance() { stepper.advance(at); }
};

// The 128-K chunks of K, the last one short where 128 does not divide K.
MXL_HOST_DEVICE constexpr int k_chunks(int k) { return k / 128 + (k % 128 != 0 ? 1 : 0); }

// The 128-K chunks split `split` of `splits` takes of `chunks`: [begin, begin + count), spread
// as evenly as the division allows (no split has more than ceil(chunks / splits)).
struct ChunkRange {
  int begin, count;
};

MXL_HOST_DEVICE inline ChunkRange split_chunks(int split, int splits, int chunks) {
  const int begin = split * chunks / splits;
  return {begin, (split + 1) * chunks / splits - begin};
}

// The batch-invariant mode's K order (docs/MXFP8.md): the ceil(K / 128) chunks fall into this
// many parts (split_chunks), each summed from zero in chunk order, and the parts' sums are added
// in part order. K alone fixes it, so a kernel may cut K between parts (a split over a cluster
// of exactly this many CTAs) or keep each part's sum apart (k-parts tiles) and give the same
// bits. A part of at least 16 chunks (2048 K) keeps its share of a cluster's meeting and a
// tile's part changes small at large M; up to 8 parts (a portable cluster) give narrow layers
// SMs at small M. 7 becomes 8: no cluster of 7 is compiled.
inline constexpr int kMaxKParts = 8;
MXL_HOST_DEVICE constexpr int batch_invariant_parts(int k) {
  const int parts = k_chunks(k) / 16;
  return parts < 1 ? 1 : (parts >= kMaxKParts - 1 ? kMaxKParts : parts);
}

// One thread's share of a block-cooperative copy of a [rows, words] array (a CTA's scale words):
// the thread takes words tid, tid + threads, ... in row-major order, kBatch at a time, and
// calls load(row, word) for the whole batch before the batch's first store(row, word, value).
// A plain loop would wait out a memory round trip per word (the store needs the load); batched,
// a CTA pays about rows * words / (threads * kBatch) of them. No division per word.
// between() runs once, after the first batch's loads and before its stores (on every thread,
// with words or not): other loads issued there share the first batch's round trip.
template <int kBatch, class Load, class Store, class Between>
MXL_HOST_DEVICE void copy_in_batches(int rows, int words, int tid, int threads, Load load,
                                     Store store, Between between) {
  GroupWalk loads(tid, threads, words), stores = loads;
  bool first = true;
  do {
    decltype(load(0, 0)) values[kBatch];
    MXL_UNROLL
    for (int i = 0; i < kBatch; ++i) {
      if (loads.at.row < rows) values[i] = load(loads.at.row, loads.at.group);
      loads.advance();
    }
    if (first) between();
    first = false;
    MXL_UNROLL
    for (int i = 0; i < kBatch; ++i) {
      if (stores.at.row < rows) store(stores.at.row, stores.at.group, values[i]);
      stores.advance();
    }
  } while (loads.at.row < rows);
}

template <int kBatch, class Load, class Store>
MXL_HOST_DEVICE void copy_in_batches(int rows, int words, int tid, int threads, Load load,
                                     Store store) {
  copy_in_batches<kBatch>(rows, words, tid, threads, load, store, [] {});
}

}  // namespace mxlinear::device
