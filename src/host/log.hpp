// The library's log: lines to stderr prefixed "mxlinear:", filtered by MXLINEAR_LOG
// (warn by default; info adds one line per layer selection; debug adds per-call dispatch).
#pragma once

#include <string_view>

namespace mxlinear::detail {

enum class LogLevel { kWarn = 0, kInfo = 1, kDebug = 2 };

bool log_enabled(LogLevel level);
void log(LogLevel level, std::string_view message);

}  // namespace mxlinear::detail
