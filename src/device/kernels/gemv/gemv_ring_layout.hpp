// Where the GEMV's per-warp weight ring puts each byte (host and device, so the CPU tests check
// the map). A slot holds 16 weight rows of one stage (4 MX blocks = 128 bytes per row), then the
// rows' 4-byte scale words. Lane (r, h) = (lane / 2, lane % 2) copies 16-byte chunks
// 4h..4h+3 of row r; chunk c of row r sits at chunk c ^ (r % 8), so that lane (g, t) reading
// bytes 8t..8t+7 of block i in rows g (0..7) and g + 8 touches 8 different 16-byte chunks per
// pair of t: two shared-memory wavefronts per 256-byte warp read, no more.
#pragma once

#include "device/common/host_device.hpp"

namespace mxlinear::device::gemv_ring {

inline constexpr int kRows = 16;
inline constexpr int kStageBlocks = 4;
inline constexpr int kRowBytes = kStageBlocks * 32;  // 128
inline constexpr int kScaleOffset = kRows * kRowBytes;
inline constexpr int kSlotBytes = kScaleOffset + kRows * 4;

// The slot offset of 16-byte chunk `chunk` (0..7) of row `row` (0..15).
MXL_HOST_DEVICE constexpr int chunk_offset(int row, int chunk) {
  return row * kRowBytes + 16 * (chunk ^ (row & 7));
}

// The slot offset of the 8 bytes lane (g, t) reads for block `block` (0..3) of row `row`
// (g or g + 8): bytes 32 * block + 8t .. + 7 of the row.
MXL_HOST_DEVICE constexpr int fragment_offset(int row, int t, int block) {
  return chunk_offset(row, 2 * block + (t >> 1)) + 8 * (t & 1);
}

}  // namespace mxlinear::device::gemv_ring
