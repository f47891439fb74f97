// The prefill kernel's staged 16-bit output tile (device/kernels/prefill/tile16_layout.hpp),
// checked on the CPU for every tile the kernel compiles: stmatrix.x4.trans, fed the wgmma
// accumulator registers in the order tile_store_16bit.cuh feeds them, puts every (row, token) of
// the tile at its place in the output layout exactly once, and the 8 rows of each of its matrices
// start in 8 different 16-byte bank groups.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "device/kernels/prefill/tile16_layout.hpp"

namespace mxlinear::device {
namespace {

// wgmma's m64nN fp32 accumulator (PTX ISA, the D fragment): register i of lane l of warp w holds
// row 16 w + l / 4 + 8 ((i / 2) % 2) and token 8 (i / 4) + 2 (l % 4) + i % 2 of its warpgroup.
struct Position {
  int row, token;
};
Position accumulator_position(int warp, int lane, int i) {
  return {16 * warp + lane / 4 + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * (lane % 4) + (i & 1)};
}

template <int kRows, int kTokens>
void check_tile() {
  using Layout = Tile16Bit<kRows, kTokens>;
  SCOPED_TRACE(testing::Message() << kRows << " x " << kTokens);
  EXPECT_EQ(Layout::offset(kRows - 1, kTokens - 1) + 2, Layout::kBytes - 16);
  std::vector<int> written(static_cast<std::size_t>(Layout::kBytes / 2), 0);
  for (int row_base = 0; row_base < kRows; row_base += 64) {
    for (int warp = 0; warp < 4; ++warp) {
      for (int j = 0; j < kTokens / 8; j += 2) {
        // Register q of every lane packs accumulators accumulator_of(j, q) and + 1.
        for (int q = 0; q < 4; ++q) {
          std::set<int> bank_groups;
          for (int r = 0; r < 8; ++r) {
            const int address = Layout::stmatrix_row_offset(warp, 8 * q + r, row_base) +
                                8 * j * Layout::kStrideBytes;
            ASSERT_EQ(address % 16, 0);
            bank_groups.insert((address / 16) % 8);
          }
          EXPECT_EQ(bank_groups.size(), 8u) << "warp " << warp << " block " << j << " matrix " << q;
          for (int lane = 0; lane < 32; ++lane) {
            for (int half = 0; half < 2; ++half) {
              // stmatrix's fragment: lane l holds element (l / 4, 2 (l % 4) + half) of matrix q;
              // .trans stores element (r, c) at position r of the row lane 8 q + c addressed.
              const int r = lane / 4, c = 2 * (lane % 4) + half;
              const int byte = Layout::stmatrix_row_offset(warp, 8 * q + c, row_base) +
                               8 * j * Layout::kStrideBytes + 2 * r;
              const Position at =
                  accumulator_position(warp, lane, Layout::accumulator_of(j, q) + half);
              ASSERT_EQ(byte, Layout::offset(row_base + at.row, at.token))
                  << "warp " << warp << " lane " << lane << " block " << j << " matrix " << q;
              ++written[static_cast<std::size_t>(byte / 2)];
            }
          }
        }
      }
    }
  }
  for (int row = 0; row < kRows; ++row) {
    for (int token = 0; token < kTokens; ++token) {
      ASSERT_EQ(written[static_cast<std::size_t>(Layout::offset(row, token) / 2)], 1)
          << "row " << row << " token " << token;
    }
  }
}

TEST(Tile16BitLayout, StmatrixPutsEveryAccumulatorAtItsOutputPlaceOnce) {
  check_tile<64, 32>();
  check_tile<64, 64>();
  check_tile<64, 128>();
  check_tile<128, 64>();
  check_tile<128, 128>();
  check_tile<128, 160>();
  check_tile<128, 192>();
  check_tile<128, 256>();
  check_tile<192, 128>();
}

}  // namespace
}  // namespace mxlinear::device
