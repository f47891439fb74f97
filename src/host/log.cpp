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

}  // namespace mxlinear::detail
