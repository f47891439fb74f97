// libFuzzer target for the tuned-table parser (scripts/fuzz.sh builds and runs it). The
// property: any bytes parse without a crash or exception, and every data line is accepted, an
// identical repeat, or skipped with one warning (past kMaxRowWarnings, one warning counts the
// rest); so no input changes selection silently.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "mxlinear/tuned_table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mxlinear::TableContext context;
  context.kernel_configs = {{"generic", {"w32_t16_warp16x16_kwarps4_st8"}}, {"tuned", {"a", "b"}}};
  context.library_version = "0.1";
  context.cuda_version = "13.0";
  mxlinear::TunedTable table;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const mxlinear::TableStats stats = table.add(text, "fuzz.csv", context);
  if (stats.data_lines != stats.accepted + stats.repeats + stats.skipped) std::abort();
  const int shown = stats.skipped - stats.skipped_unshown;
  if (shown > mxlinear::kMaxRowWarnings ||
      (stats.skipped_unshown > 0 && shown < mxlinear::kMaxRowWarnings)) {
    std::abort();
  }
  if (static_cast<int>(table.warnings().size()) != shown + (stats.skipped_unshown > 0 ? 1 : 0)) {
    std::abort();
  }
  if (static_cast<int>(table.rows().size()) != stats.accepted) std::abort();
  for (const auto& [key, value] : table.rows()) {
    if (key.n < 1 || key.k < 32 || key.k % 32 != 0 || key.m < 1 || !(value.error_ratio <= 1.0)) {
      std::abort();
    }
    (void)table.lookup(key.arch, key.sms, key.n, key.k, key.m);
  }
  return 0;
}
