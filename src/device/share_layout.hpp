// The prefill kernel's fp32 output tile in shared memory, laid out for its split-K reduction:
// the kRows weight rows are cut into `splits` shares of kRows / splits (the rows split r adds
// and stores), and each share holds its rows token-major, rows + 4 floats between tokens. Split
// r's share of every CTA's tile is then one contiguous run, which the reduction reads 16 bytes a
// lane and about 512 contiguous bytes a warp: distributed shared memory is served like global
// memory (coalesced 32-byte segments, the Hopper tuning guide says), and 16-byte pieces 32 bytes
// apart across 16 token rows ran 8-split reductions at half the speed of one float a lane
// (session 8). The 4-float pad keeps the accumulator writes free of bank conflicts (the four
// lanes holding one row's tokens 2 apart land 8 banks apart). With one split this is the padded
// token-major tile that store_accumulator_tile reads (FpTile<kRows, kTokens, kRows + 4>). Index
// math only, so the CPU tests can check it.
#pragma once

#include "mxlinear/config.hpp"

namespace mxlinear::device {

template <int kRows, int kTokens>
struct ShareLayout {
  static constexpr int log2_rows() {
    int log = 0;
    while ((1 << log) < kRows) ++log;
    return log;
  }
  static_assert((1 << log2_rows()) == kRows && kRows >= 32, "a power-of-two row count");

  // Bytes the tile takes with `splits` shares (one 4-float pad per share and token).
  static constexpr int bytes(int splits) { return (kRows + 4 * splits) * kTokens * 4; }

  int shift;         // log2 of the rows per share (splits: 1, 2, 4 or 8)
  int stride;        // floats between a share's tokens
  int share_floats;  // floats per share

  MXL_HOST_DEVICE explicit ShareLayout(int splits)
      : shift(log2_rows() - (splits >= 2) - (splits >= 4) - (splits >= 8)),
        stride((kRows / splits) + 4),
        share_floats(((kRows / splits) + 4) * kTokens) {}

  MXL_HOST_DEVICE int index(int row, int token) const {
    return (row >> shift) * share_floats + token * stride + (row & ((1 << shift) - 1));
  }
};

}  // namespace mxlinear::device
