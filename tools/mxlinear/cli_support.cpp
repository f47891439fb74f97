#include "cli_support.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "host/log.hpp"
#include "mxlinear/error.hpp"

namespace mxlinear::cli {
namespace {

[[noreturn]] void refuse(std::string_view option, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, std::string(option), fmt::format("{} {}", option, what));
}

const std::vector<std::shared_ptr<const Kernel>>& kernels() {
  // The built-in list, without the registry's tables: naming a kernel needs no table.
  static const std::vector<std::shared_ptr<const Kernel>> list = builtin_kernels();
  return list;
}

}  // namespace

CLI::Validator multiple_of_32(std::int64_t max) {
  return CLI::Validator(
      [max](std::string& value) -> std::string {
        std::int64_t k = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), k);
        if (ec != std::errc() || end != value.data() + value.size() || k < 32 || k % 32 != 0 ||
            k > max) {
          return fmt::format("is {}; expected a positive multiple of 32 (the MX block) up to {}",
                             detail::for_display(value), max);
        }
        return "";
      },
      fmt::format("multiple of 32 in [32, {}]", max));
}

CLI::Validator non_negative_integer() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        std::uint64_t parsed = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
        if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos ||
            ec != std::errc() || end != value.data() + value.size()) {
          // Digits past 2^64 - 1 would be clamped by the conversion, not refused.
          return fmt::format("is {}; expected a non-negative integer up to {}",
                             detail::for_display(value), std::numeric_limits<std::uint64_t>::max());
        }
        return "";
      },
      "");
}

void refuse_unreadable_existing(std::string_view option, const std::string& path,
                                const std::string& problem) {
  if (problem.empty()) return;
  refuse(option, fmt::format("is '{}', which {}; expected a file this command can read to resume "
                             "it, or --restart to start it afresh",
                             detail::for_display(path), problem));
}

bool require_writable_path(std::string_view option, const std::string& path) {
  const std::string shown = detail::for_display(path);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      refuse(option, fmt::format("is '{}', which exists and is not a regular file; expected a "
                                 "file path to write",
                                 shown));
    }
    if (::access(path.c_str(), W_OK) != 0) {
      refuse(option, fmt::format("is '{}', which cannot be written ({}); expected a writable "
                                 "file path",
                                 shown, std::strerror(errno)));
    }
    return true;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    refuse(option, fmt::format("is '{}', whose directory '{}' does not exist; expected a file "
                               "path in an existing directory",
                               shown, detail::for_display(dir)));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    refuse(option, fmt::format("is '{}', whose directory '{}' cannot be written ({}); expected "
                               "a writable file path",
                               shown, detail::for_display(dir), std::strerror(errno)));
  }
  return false;
}

const Kernel& require_kernel(std::string_view option, const std::string& name) {
  std::vector<std::string> names;
  for (const auto& k : kernels()) {
    if (k->name() == name) return *k;
    names.emplace_back(k->name());
  }
  refuse(option, fmt::format("is '{}', which is not a kernel; expected one of: {}",
                             detail::for_display(name), fmt::join(names, ", ")));
}

const Kernel& registry_kernel(std::string_view name) {
  if (const Kernel* k = Registry::global().find(name)) return *k;
  throw Error(ErrorCode::kInternal, "kernel",
              fmt::format("the registry has no kernel {}", detail::for_display(name)));
}

void require_config(std::string_view option, const Kernel& kernel, const std::string& config) {
  if (config.empty()) return;
  const std::vector<std::string> configs = kernel.configs();
  if (std::find(configs.begin(), configs.end(), config) != configs.end()) return;
  refuse(option, fmt::format("is '{}', which is not a config of kernel {}; expected one of: {}",
                             detail::for_display(config), kernel.name(), fmt::join(configs, ", ")));
}

std::vector<std::string> selection_switches_set() {
  std::vector<std::string> set;
  for (const char* name : {"MXLINEAR_BACKEND", "MXLINEAR_DISABLED_KERNELS", "MXLINEAR_TUNED_TABLES",
                           "MXLINEAR_COST_MODEL"}) {
    if (const char* v = std::getenv(name); v && *v) set.emplace_back(name);
  }
  return set;
}

void note_unused_selection_switches(std::string_view command, std::string_view why) {
  const std::vector<std::string> set = selection_switches_set();
  if (set.empty()) return;
  fmt::print(stderr, "mxlinear {}: {} {} set but not used: {}, without kernel selection\n", command,
             fmt::join(set, ", "), set.size() == 1 ? "is" : "are", why);
}

}  // namespace mxlinear::cli
