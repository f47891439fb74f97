// Host-side TMA descriptors (cuTensorMapEncodeTiled through the runtime, so no -lcuda).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace mxlinear::device {

enum class TmaElement : std::uint8_t { kU8, kBF16 };
// The shared-memory swizzle of a box: its rows are this many bytes wide (box_cols * element
// size equals it), 16-byte chunks XORed with the row phase (CuTe's Swizzle<3,4,3>).
enum class TmaSwizzle : std::uint8_t { k64B, k128B };

// Whether the driver offers cuTensorMapEncodeTiled.
bool tma_available();

// A row-major [rows, cols] matrix (cols in elements, ld in bytes) read in boxes of box_rows x
// box_cols elements with the given swizzle (box_cols * element size must be at most the
// swizzle's width); rows and columns past the end read as zeros. False if the driver refuses it.
bool encode_tma_2d(CUtensorMap* map, TmaElement element, const void* base, int rows, int cols,
                   std::int64_t ld_bytes, int box_cols, int box_rows,
                   TmaSwizzle swizzle = TmaSwizzle::k128B);

}  // namespace mxlinear::device
