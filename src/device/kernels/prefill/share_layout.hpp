// The prefill kernel's fp32 output tile in shared memory, laid out for its split-K reduction:
// the kRows weight rows are cut into shares of rows_per_share(splits) rows (the rows split r adds
// and stores), and each share holds its rows token-major, rows + 4 floats between tokens. Split
// r's share of every CTA's tile is then one contiguous run, which the reduction reads 16 bytes a
// lane and about 512 contiguous bytes a warp: distributed shared memory is served like global
// memory (coalesced 32-byte segments, the Hopper tuning guide says), and 16-byte pieces 32 bytes
// apart across 16 token rows ran 8-split reductions at half the speed of one float a lane
// (measured on the H200). The 4-float pad keeps the accumulator writes free of bank conflicts (the
// four lanes holding one row's tokens 2 apart land 8 banks apart, which needs a multiple of 8 rows
// per share). With one split this is the padded token-major tile that store_accumulator_tile reads
// (FpTile<kRows, kTokens, kRows + 4>). Index math only, so the CPU tests can check it.
//
// Split counts that do not divide kRows into multiples of 8 (3, 5, 6, 7) round the share up to
// the next multiple of 8: the last share is shorter, and the splits past the last share add
// nothing (5 splits of 64 rows: four shares of 16). Such counts exist to fill the SMs (36 row
// tiles x 3 splits = 108 CTAs), not for the reduction, which is small either way.
#pragma once

#include "device/common/host_device.hpp"

namespace mxlinear::device {

constexpr int share_rows(int rows, int splits) {
  const int even = (rows + splits - 1) / splits;
  return (even + 7) / 8 * 8;
}
// Bytes a tile of rows x tokens takes with `splits` splits: the shares that hold rows (the
// splits past them have none), one 4-float pad per share and token. The host checks with it
// whether a split count's tile fits an instance's ring.
constexpr int share_tile_bytes(int rows, int tokens, int splits) {
  const int per_share = share_rows(rows, splits);
  return (rows + per_share - 1) / per_share * (per_share + 4) * tokens * 4;
}

template <int kRows, int kTokens>
struct ShareLayout {
  static_assert(kRows % 8 == 0 && kRows >= 32 && kRows <= 192, "rows in groups of 8");

  static constexpr int rows_per_share(int splits) { return share_rows(kRows, splits); }
  static constexpr int bytes(int splits) { return share_tile_bytes(kRows, kTokens, splits); }

  int rows;          // rows per share
  int inverse;       // ceil(2^16 / rows): row / rows = (row * inverse) >> 16 for row, rows <= 192
  int stride;        // floats between a share's tokens
  int share_floats;  // floats per share

  // The split count picks among values computed at compile time: the kernel divides nothing at
  // run time (a division is a chain of ~20 dependent instructions; in the reduction's loop one
  // cost its configs 2%).
  MXL_HOST_DEVICE explicit ShareLayout(int splits) : ShareLayout(Geometry::of_splits(splits)) {}

  // Where row `row`'s token 0 sits; token t is t * stride further. (A thread's accumulator
  // covers two rows per 64, so callers compute this twice, not once per register.)
  MXL_HOST_DEVICE int row_offset(int row) const {
    const int share = (row * inverse) >> 16;
    return share * share_floats + row - share * rows;
  }
  MXL_HOST_DEVICE int index(int row, int token) const { return row_offset(row) + token * stride; }
  // Rows share r holds: rows, fewer for the last share, none past it.
  MXL_HOST_DEVICE int rows_of_share(int r) const {
    const int left = kRows - r * rows;
    return left <= 0 ? 0 : (left < rows ? left : rows);
  }

 private:
  struct Geometry {
    int rows, inverse;
    static constexpr Geometry of(int splits) {
      const int r = share_rows(kRows, splits);
      return {r, ((1 << 16) + r - 1) / r};
    }
    MXL_HOST_DEVICE static Geometry of_splits(int splits) {
      constexpr Geometry g1 = of(1), g2 = of(2), g3 = of(3), g4 = of(4), g5 = of(5), g6 = of(6),
                         g7 = of(7), g8 = of(8);
      return splits <= 1   ? g1
             : splits == 2 ? g2
             : splits == 3 ? g3
             : splits == 4 ? g4
             : splits == 5 ? g5
             : splits == 6 ? g6
             : splits == 7 ? g7
                           : g8;
    }
  };
  MXL_HOST_DEVICE explicit ShareLayout(Geometry g)
      : rows(g.rows),
        inverse(g.inverse),
        stride(g.rows + 4),
        share_floats((g.rows + 4) * kTokens) {}
};

}  // namespace mxlinear::device
