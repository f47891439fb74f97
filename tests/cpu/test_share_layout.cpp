// The prefill kernel's split-share-major output tile (device/kernels/prefill/share_layout.hpp),
// checked on the CPU for every tile the kernel compiles and every split count up to 8: every (row,
// token) has its own float inside the bytes the kernel reserves, each split's share is one
// contiguous run, the accumulator writes of a warp hit 32 different banks, and a warp's 16-byte
// reads of a share stay within one short contiguous span.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "device/kernels/prefill/share_layout.hpp"

namespace mxlinear::device {
namespace {

template <int kRows, int kTokens>
void check_layout(int splits) {
  SCOPED_TRACE(testing::Message() << kRows << " x " << kTokens << ", " << splits << " splits");
  using Layout = ShareLayout<kRows, kTokens>;
  const Layout layout(splits);
  const int share = layout.rows;
  EXPECT_EQ(share % 8, 0);
  EXPECT_GE(share * splits, kRows);  // every row has a split that adds it
  if (kRows % (8 * splits) == 0) {
    EXPECT_EQ(share, kRows / splits);
  }
  const int floats = Layout::bytes(splits) / 4;
  EXPECT_EQ(Layout::bytes(splits), share_tile_bytes(kRows, kTokens, splits));
  // The shares' rows add up to the tile's, in order.
  int rows_seen = 0;
  for (int r = 0; r < splits; ++r) {
    EXPECT_EQ(layout.rows_of_share(r), std::clamp(kRows - r * share, 0, share)) << "share " << r;
    rows_seen += layout.rows_of_share(r);
  }
  EXPECT_EQ(rows_seen, kRows);
  std::vector<int> owner(static_cast<std::size_t>(floats), -1);
  for (int row = 0; row < kRows; ++row) {
    for (int token = 0; token < kTokens; ++token) {
      const int at = layout.index(row, token);
      ASSERT_GE(at, 0);
      ASSERT_LT(at, floats);
      ASSERT_EQ(owner[static_cast<std::size_t>(at)], -1) << "row " << row << " token " << token;
      owner[static_cast<std::size_t>(at)] = row * kTokens + token;
      // Share r = row / share lies in [r * share_floats, (r + 1) * share_floats).
      EXPECT_EQ(at / layout.share_floats, row / share);
      if (splits == 1) {
        EXPECT_EQ(at, token * (kRows + 4) + row);  // store_accumulator_tile's
      }
    }
  }
  // The wgmma accumulator of warp w, lane l: register i holds row 16w + l/4 + 8 ((i >> 1) & 1),
  // token 8 (i >> 2) + 2 (l % 4) + (i & 1); one register of a warp is one store instruction.
  for (int base = 0; base < kRows; base += 64) {
    for (int warp = 0; warp < 4; ++warp) {
      for (int i = 0; i < kTokens / 2; ++i) {
        std::set<int> banks;
        for (int lane = 0; lane < 32; ++lane) {
          const int row = base + 16 * warp + lane / 4 + 8 * ((i >> 1) & 1);
          const int token = 8 * (i >> 2) + 2 * (lane % 4) + (i & 1);
          banks.insert(layout.index(row, token) % 32);
        }
        EXPECT_EQ(banks.size(), 32u) << "warp " << warp << " register " << i;
      }
    }
  }
  // The reduction: step e of split r reads 4 floats at (token e >> shift, quad e % 2^shift) of
  // its share, 2^shift the power of two >= its quads (steps past the quads read nothing); a
  // warp's 32 steps read at most 512 bytes, spread over the token rows they cover and their pads
  // only.
  for (int r = 0; r < splits; ++r) {
    const int quads = layout.rows_of_share(r) / 4;
    if (quads == 0) continue;
    int padded = 1;
    while (padded < quads) padded *= 2;
    for (int first = 0; first < padded * kTokens; first += 32) {
      int lo = floats, hi = 0;
      for (int e = first; e < std::min(first + 32, padded * kTokens); ++e) {
        if (e % padded >= quads) continue;
        const int at = layout.index(r * share + 4 * (e % padded), e / padded);
        EXPECT_EQ(at % 4, 0);  // 16-byte aligned
        lo = std::min(lo, at);
        hi = std::max(hi, at + 4);
      }
      const int tokens_covered = (32 + padded - 1) / padded + 1;
      EXPECT_LE(hi - lo, tokens_covered * layout.stride) << "split " << r << " step " << first;
    }
  }
}

TEST(ShareLayout, EveryTileAndSplitCount) {
  for (int splits = 1; splits <= 8; ++splits) {
    check_layout<64, 32>(splits);
    check_layout<64, 64>(splits);
    check_layout<128, 64>(splits);
    check_layout<128, 128>(splits);
    check_layout<128, 192>(splits);
    check_layout<128, 256>(splits);
    check_layout<192, 128>(splits);
  }
}

}  // namespace
}  // namespace mxlinear::device
