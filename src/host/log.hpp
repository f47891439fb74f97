// The library's log: lines to stderr prefixed "mxlinear:", filtered by MXLINEAR_LOG
// (warn by default; info adds one line per layer selection; debug adds per-call dispatch).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mxlinear::detail {

enum class LogLevel { kWarn = 0, kInfo = 1, kDebug = 2 };

bool log_enabled(LogLevel level);
void log(LogLevel level, std::string_view message);

// The most characters for_display() shows of one value.
inline constexpr std::size_t kDisplayLimit = 200;

// A user-supplied value (a path, an environment variable, a field or line of a file) as a
// message shows it: every byte outside printable ASCII becomes \xNN, and a value longer than
// `limit` characters is cut there with a note of how many bytes were left out. Every message
// that echoes such a value goes through here, so a binary file or a 100 KB variable never
// floods or garbles the terminal.
std::string for_display(std::string_view value, std::size_t limit = kDisplayLimit);

}  // namespace mxlinear::detail
