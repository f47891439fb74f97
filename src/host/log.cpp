#include "host/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace mxlinear::detail {
namespace {

LogLevel level_from_env() {
  const char* v = std::getenv("MXLINEAR_LOG");
  const std::string s = v ? v : "";
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  return LogLevel::kWarn;  // unknown values are reported by the registry's environment check
}

}  // namespace

bool log_enabled(LogLevel level) {
  static const LogLevel threshold = level_from_env();
  return static_cast<int>(level) <= static_cast<int>(threshold);
}

void log(LogLevel level, std::string_view message) {
  if (!log_enabled(level)) return;
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "mxlinear: %.*s\n", static_cast<int>(message.size()), message.data());
}

std::string for_display(std::string_view value, std::size_t limit) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  std::size_t used = 0;  // bytes of value shown
  for (; used < value.size(); ++used) {
    const auto byte = static_cast<unsigned char>(value[used]);
    const bool plain = byte >= 0x20 && byte < 0x7F;
    if (out.size() + (plain ? 1 : 4) > limit) break;
    if (plain) {
      out += static_cast<char>(byte);
    } else {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xF];
    }
  }
  if (used < value.size()) {
    out += "... (" + std::to_string(value.size() - used) + " more bytes not shown)";
  }
  return out;
}

}  // namespace mxlinear::detail
