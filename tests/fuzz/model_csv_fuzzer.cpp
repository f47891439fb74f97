// libFuzzer target for the model CSV parser (scripts/fuzz.sh builds and runs it). The property:
// any bytes give either layers that every kernel can take (N >= 1, K a positive multiple of 32,
// count >= 1, at least one layer) or an mxlinear::Error, never a crash or another exception;
// and the error's message is short and printable whatever the input held.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "mxlinear/error.hpp"
#include "mxlinear/models.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto layers = mxlinear::parse_model_csv(text, "fuzz.csv");
    if (layers.empty()) std::abort();
    for (const mxlinear::ModelLayer& l : layers) {
      if (l.n < 1 || l.k < 32 || l.k % 32 != 0 || l.count < 1) std::abort();
    }
  } catch (const mxlinear::Error& e) {
    const std::string_view message = e.what();
    if (e.code() != mxlinear::ErrorCode::kInvalidArgument || message.size() > 1024) std::abort();
    for (const char c : message) {
      if (c < 0x20 || c >= 0x7F) std::abort();
    }
  }
  return 0;
}
