// Index arithmetic the kernels share with their host launchers and CPU tests (host and device):
// how a grid-stride walk visits row-major groups, and how split-K spreads 128-K chunks.
#pragma once

#include "mxlinear/config.hpp"

namespace mxlinear::device {

// A position in a row-major [rows, groups_per_row] array of groups.
struct GroupPosition {
  int row, group;
};

// A grid-stride walk without a division per step: the thread that starts at flat index `first`
// visits first, first + stride, first + 2 * stride, ... as (row, group) positions, advancing by
// a fixed (rows, groups) step. The walk ends when row reaches the array's rows.
struct GroupWalk {
  int groups_per_row, step_rows, step_groups;
  GroupPosition at;

  MXL_HOST_DEVICE GroupWalk(int first, int stride, int groups_per_row_)
      : groups_per_row(groups_per_row_),
        step_rows(stride / groups_per_row_),
        step_groups(stride % groups_per_row_),
        at{first / groups_per_row_, first % groups_per_row_} {}

  MXL_HOST_DEVICE void advance() {
    at.row += step_rows;
    at.group += step_groups;
    if (at.group >= groups_per_row) {
      at.group -= groups_per_row;
      ++at.row;
    }
  }
};

// The 128-K chunks split `split` of `splits` takes of `k_chunks`: [begin, begin + count),
// spread as evenly as the division allows (no split has more than ceil(k_chunks / splits)).
struct ChunkRange {
  int begin, count;
};

MXL_HOST_DEVICE inline ChunkRange split_chunks(int split, int splits, int k_chunks) {
  const int begin = split * k_chunks / splits;
  return {begin, (split + 1) * k_chunks / splits - begin};
}

}  // namespace mxlinear::device
