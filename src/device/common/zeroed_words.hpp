// Words of the next kernel's scratch that a pass zeroes for it (the prefill kernel's stream-K
// flags), so that kernel needs no memset of its own between the pass and itself: a memset there
// broke their programmatic dependent launch (about 3 us a call).
// The pass zeroes them after its own wait on the kernel before, which may still read them; the
// next kernel reads them only after its wait on the pass.
#pragma once

#include <cstdint>

namespace mxlinear::device {

struct ZeroedWords {
  std::uint32_t* words = nullptr;
  int count = 0;

#ifdef __CUDACC__
  // By block 0's threads; call it after griddepcontrol.wait.
  __device__ void zero() const {
    if (blockIdx.x != 0) return;
    for (int i = static_cast<int>(threadIdx.x); i < count; i += static_cast<int>(blockDim.x)) {
      words[i] = 0u;
    }
  }
#endif
};

}  // namespace mxlinear::device
