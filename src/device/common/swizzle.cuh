// Byte offsets inside shared-memory tiles that TMA writes with its 128-byte swizzle: each
// 16-byte chunk of a 128-byte row sits at chunk index XOR (row % 8), so the eight rows that one
// ldmatrix or wgmma phase reads fall in different banks.
#pragma once

namespace mxlinear::device {

// Byte offset of byte `col` of row `row` in a tile of 128-byte rows, 128-byte swizzle.
__device__ __forceinline__ int swizzle128_offset(int row, int col) {
  return row * 128 + (((col >> 4) ^ (row & 7)) << 4) + (col & 15);
}

}  // namespace mxlinear::device
