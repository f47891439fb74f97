// Where the GEMV's per-warp weight ring puts each byte (host and device, so the CPU tests check
// the map). A slot holds the warp's weight rows of one stage (16 rows, or 8 for the tiles whose
// warps take 8; 4 MX blocks = 128 bytes per row), then the rows' 4-byte scale words. The lanes
// of a row copy its 8 16-byte chunks in turn: lane (r, h) = (lane / 2, lane % 2) copies chunks
// 4h..4h+3 of row r of 16, lane (r, q) = (lane / 4, lane % 4) chunks 2q, 2q+1 of row r of 8.
// Chunk c of row r sits at chunk c ^ (r % 8), so that lane (g, t) reading bytes 8t..8t+7 of
// block i in rows g (0..7) and g + 8 touches 8 different 16-byte chunks per pair of t: two
// shared-memory wavefronts per 256-byte warp read, no more.
#pragma once

#include "device/common/host_device.hpp"

namespace mxlinear::device::gemv_ring {

inline constexpr int kStageBlocks = 4;
inline constexpr int kRowBytes = kStageBlocks * 32;  // 128
inline constexpr int kRowChunks = kRowBytes / 16;    // 8

// A slot of `rows` weight rows: the rows' bytes, then their scale words.
MXL_HOST_DEVICE constexpr int scale_offset(int rows) { return rows * kRowBytes; }
MXL_HOST_DEVICE constexpr int slot_bytes(int rows) { return scale_offset(rows) + rows * 4; }

// The copy of lane `lane` into a slot of `rows` (8 or 16) rows: row `row`, chunks `first` ..
// `first + count - 1`.
struct LaneCopy {
  int row, first, count;
};
MXL_HOST_DEVICE constexpr LaneCopy lane_copy(int rows, int lane) {
  const int lanes_per_row = 32 / rows, count = kRowChunks / lanes_per_row;
  return {lane / lanes_per_row, lane % lanes_per_row * count, count};
}

// The slot offset of 16-byte chunk `chunk` (0..7) of row `row`.
MXL_HOST_DEVICE constexpr int chunk_offset(int row, int chunk) {
  return row * kRowBytes + 16 * (chunk ^ (row & 7));
}

// The slot offset of the 8 bytes lane (g, t) reads for block `block` (0..3) of row `row`
// (g or g + 8): bytes 32 * block + 8t .. + 7 of the row.
MXL_HOST_DEVICE constexpr int fragment_offset(int row, int t, int block) {
  return chunk_offset(row, 2 * block + (t >> 1)) + 8 * (t & 1);
}

}  // namespace mxlinear::device::gemv_ring
