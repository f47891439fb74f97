#include "mxlinear/tuned_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <string_view>

#include "host/log.hpp"
#include "host/user_file.hpp"
#include "host/validate.hpp"

namespace mxlinear {
namespace {

constexpr std::string_view kHeader =
    "arch,sms,n,k,m,kernel,config,us,error_ratio,mxlinear_version,cuda_version";
constexpr std::size_t kFields = 11;
constexpr std::size_t kMaxLine = 1024;
using detail::kMaxExtent;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

bool parse_int(std::string_view s, std::int64_t lo, std::int64_t hi, std::int64_t& out) {
  s = trim(s);
  if (s.empty()) return false;
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return false;
  out = v;
  return true;
}

bool parse_real(std::string_view s, double& out) {
  s = trim(s);
  if (s.empty() || s.size() > 64) return false;
  // from_chars, not strtod: the table's '.' must not depend on the process's LC_NUMERIC.
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v < 0) return false;
  out = v;
  return true;
}

bool is_power_of_two(std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

bool printable(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7F; });
}

std::string major_of(const std::string& version) { return version.substr(0, version.find('.')); }

// One data row, or the reason it is rejected.
std::string parse_row(std::string_view line, const TableContext& context, TunedKey& key,
                      TunedValue& value) {
  std::vector<std::string_view> f;
  std::size_t start = 0;
  while (f.size() <= kFields) {
    const std::size_t comma = line.find(',', start);
    f.push_back(trim(line.substr(start, comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (f.size() != kFields) {
    return fmt::format("has {} fields; expected {} ({})",
                       f.size() > kFields ? "more than 11" : std::to_string(f.size()), kFields,
                       kHeader);
  }
  if (f[0].empty() || !printable(f[0])) return "has an empty or unprintable arch";
  key.arch = std::string(f[0]);
  std::int64_t sms = 0;
  if (!parse_int(f[1], 1, 4096, sms))
    return fmt::format("has sms '{}'; expected 1..4096", detail::for_display(f[1]));
  key.sms = static_cast<int>(sms);
  if (!parse_int(f[2], 1, kMaxExtent, key.n)) {
    return fmt::format("has n '{}'; expected 1..{}", detail::for_display(f[2]), kMaxExtent);
  }
  if (!parse_int(f[3], 32, kMaxExtent, key.k) || key.k % 32 != 0) {
    return fmt::format("has k '{}'; expected a multiple of 32 in 32..{}", detail::for_display(f[3]),
                       kMaxExtent);
  }
  std::string_view m = f[4];
  key.exact_m = !m.empty() && m.front() == '=';
  if (key.exact_m) m.remove_prefix(1);
  if (!parse_int(m, 1, kMaxExtent, key.m) || (!key.exact_m && !is_power_of_two(key.m))) {
    return fmt::format("has m '{}'; expected a power-of-two bucket (64) or an exact M (=48)",
                       detail::for_display(f[4]));
  }
  value.kernel = std::string(f[5]);
  const auto kernel = context.kernel_configs.find(value.kernel);
  if (kernel == context.kernel_configs.end()) {
    std::vector<std::string> names;
    for (const auto& [name, configs] : context.kernel_configs) names.push_back(name);
    return fmt::format("names kernel '{}'; expected one of: {}", detail::for_display(f[5]),
                       fmt::join(names, ", "));
  }
  key.w8a16 = context.w8a16_kernels.count(value.kernel) > 0;
  value.config = std::string(f[6]);
  const auto& configs = kernel->second;
  if (std::find(configs.begin(), configs.end(), value.config) == configs.end()) {
    return fmt::format("names config '{}' of kernel {}; expected one of: {}",
                       detail::for_display(f[6]), value.kernel, fmt::join(configs, ", "));
  }
  if (!parse_real(f[7], value.us))
    return fmt::format("has us '{}'; expected a number >= 0", detail::for_display(f[7]));
  if (!parse_real(f[8], value.error_ratio) || value.error_ratio > 1.0) {
    return fmt::format(
        "has error_ratio '{}'; expected a number in 0..1 (a config that failed "
        "its accuracy check is never used)",
        detail::for_display(f[8]));
  }
  value.library_version = std::string(f[9]);
  value.cuda_version = std::string(f[10]);
  if (value.library_version != context.library_version) {
    return fmt::format("is stale: tuned with mxlinear {}; this is mxlinear {}",
                       detail::for_display(f[9]), context.library_version);
  }
  if (major_of(value.cuda_version) != major_of(context.cuda_version)) {
    return fmt::format("is stale: tuned with CUDA {}; this is CUDA {}", detail::for_display(f[10]),
                       context.cuda_version);
  }
  return "";
}

}  // namespace

std::int64_t m_bucket(std::int64_t m) {
  std::int64_t b = 1;
  while (b < m && b < (std::int64_t{1} << 40)) b <<= 1;
  return b;
}

TableStats TunedTable::add(const std::string& text, const std::string& source,
                           const TableContext& context) {
  TableStats stats;
  const auto skip = [&](std::string warning) {
    ++stats.skipped;
    if (stats.skipped > kMaxRowWarnings) {
      ++stats.skipped_unshown;
    } else {
      warnings_.push_back(std::move(warning));
    }
  };
  std::map<TunedKey, TunedValue> mine;
  const std::string shown_source = detail::for_display(source);
  std::size_t start = 0;
  int line_no = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view raw(text.data() + start, end - start);
    start = end + 1;
    ++line_no;
    const std::string where = fmt::format("{}:{}", shown_source, line_no);
    if (raw.size() > kMaxLine) {
      ++stats.data_lines;
      skip(fmt::format("{}: line of {} bytes skipped; expected at most {}", where, raw.size(),
                       kMaxLine));
      continue;
    }
    const std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#' || line == kHeader) continue;
    ++stats.data_lines;
    TunedKey key;
    TunedValue value;
    const std::string reason = parse_row(line, context, key, value);
    if (!reason.empty()) {
      skip(fmt::format("{}: row skipped: it {}", where, reason));
      continue;
    }
    value.source = where;
    const auto [it, inserted] = mine.emplace(key, value);
    if (inserted) {
      ++stats.accepted;
    } else if (it->second.same_choice(value)) {
      ++stats.repeats;
    } else {
      skip(
          fmt::format("{}: row skipped: it repeats the key of {} with a different value; the "
                      "first row wins",
                      where, it->second.source));
    }
  }
  if (stats.skipped_unshown > 0) {
    warnings_.push_back(fmt::format("{}: {} more rows skipped, not shown (the first {} are)",
                                    shown_source, stats.skipped_unshown, kMaxRowWarnings));
  }
  for (auto& [key, value] : mine) rows_[key] = value;  // a later table overrides
  return stats;
}

void TunedTable::add_file(const std::string& path, const TableContext& context) {
  const detail::UserFile file = detail::read_user_file(path, kMaxFileBytes);
  if (!file.problem.empty()) {
    warnings_.push_back(fmt::format("{}: tuned table {}; expected a tuned-table CSV; it is ignored",
                                    detail::for_display(path), file.problem));
    return;
  }
  add(file.text, path, context);
}

std::optional<TunedValue> TunedTable::lookup(const std::string& arch, int sms, std::int64_t n,
                                             std::int64_t k, std::int64_t m, bool w8a16) const {
  TunedKey key{arch, sms, n, k, true, m, w8a16};
  if (auto it = rows_.find(key); it != rows_.end()) return it->second;
  key.exact_m = false;
  key.m = m_bucket(m);
  if (auto it = rows_.find(key); it != rows_.end()) return it->second;
  return std::nullopt;
}

std::optional<TunedValue> TunedTable::nearest(const std::string& arch, int sms, std::int64_t n,
                                              std::int64_t k, std::int64_t m, bool w8a16) const {
  const TunedKey key{arch, sms, n, k, false, m_bucket(m), w8a16};
  // Below first (its tiles fit), then above.
  auto same_shape_bucket = [&](const TunedKey& k2) {
    return !k2.exact_m && k2.arch == arch && k2.sms == sms && k2.n == n && k2.k == k &&
           k2.w8a16 == w8a16;
  };
  const auto above = rows_.lower_bound(key);
  if (above != rows_.begin() && same_shape_bucket(std::prev(above)->first)) {
    return std::prev(above)->second;
  }
  if (above != rows_.end() && same_shape_bucket(above->first)) return above->second;
  return std::nullopt;
}

bool TunedTable::has_shape(const std::string& arch, int sms, std::int64_t n, std::int64_t k,
                           std::string_view kernel) const {
  for (auto it = rows_.lower_bound(TunedKey{arch, sms, n, k, false, 0});
       it != rows_.end() && it->first.arch == arch && it->first.sms == sms && it->first.n == n &&
       it->first.k == k;
       ++it) {
    if (kernel.empty() || it->second.kernel == kernel) return true;
  }
  return false;
}

}  // namespace mxlinear
