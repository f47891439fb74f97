// Where the 16-bit output tile of tile_store_16bit.cuh puts each value: token-major rows of kRows
// 16-bit values (a token's outputs for the tile's weight rows, as contiguous as in the output),
// 16 bytes of padding a token, so the 8 consecutive tokens a matrix of an stmatrix writes start
// in 8 different 16-byte bank groups (without it all 8 share one: 8-way conflicts). Index math
// only, so the CPU tests can check it against the wgmma accumulator layout and stmatrix.
#pragma once

#include "device/common/host_device.hpp"

namespace mxlinear::device {

template <int kRows_, int kTokens_>
struct Tile16Bit {
  static constexpr int kRows = kRows_;
  static constexpr int kTokens = kTokens_;
  static constexpr int kStrideBytes = 2 * kRows + 16;
  static constexpr int kBytes = kTokens * kStrideBytes;
  static_assert(kTokens % 16 == 0, "stmatrix.x4 covers two 8-token blocks");

  // The byte of output (row, token).
  static MXL_HOST_DEVICE constexpr int offset(int row, int token) {
    return token * kStrideBytes + 2 * row;
  }

  // The first of the two accumulator registers (wgmma's m64nN fragment) that register q of an
  // stmatrix.x4 for token blocks j and j + 1 packs, the lower in the low half: matrix q holds the
  // warp's rows 8 (q % 2) .. + 7 of token block j + q / 2.
  static MXL_HOST_DEVICE constexpr int accumulator_of(int j, int q) { return 4 * j + 2 * q; }

  // The row address lane `lane` of warp `warp` gives stmatrix.x4.trans for token blocks 0 and 1
  // of the warpgroup whose rows start at row_base (blocks j and j + 1: 8 j kStrideBytes on).
  // Matrix q = lane / 8 holds rows 8 (q % 2) .. + 7 of the warp's 16 and token block q / 2;
  // transposed, its row lane % 8 is one token's 8 values.
  static MXL_HOST_DEVICE constexpr int stmatrix_row_offset(int warp, int lane, int row_base) {
    const int q = lane >> 3;
    return offset(row_base + 16 * warp + 8 * (q & 1), 8 * (q >> 1) + (lane & 7));
  }
};

}  // namespace mxlinear::device
