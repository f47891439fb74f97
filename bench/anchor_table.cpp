#include "anchor_table.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <sstream>
#include <string_view>
#include <system_error>
#include <vector>

#include "host/log.hpp"
#include "host/user_file.hpp"
#include "mxlinear/error.hpp"

namespace mxlinear::bench {
namespace {

constexpr int kFields = 8;

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  for (std::size_t start = 0;;) {
    const std::size_t comma = line.find(',', start);
    fields.push_back(line.substr(start, comma - start));
    if (comma == std::string_view::npos) return fields;
    start = comma + 1;
  }
}

// The whole field as a T, or nothing (trailing bytes, overflow, or no number at all).
template <class T>
bool parse_whole(std::string_view field, T& value) {
  const char* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(field.data(), end, value);
  return ec == std::errc{} && ptr == end;
}

// A field as an error message shows it: at most 40 bytes.
std::string shown(std::string_view field) {
  return field.size() <= 40 ? std::string(field) : std::string(field.substr(0, 40)) + "...";
}

[[noreturn]] void fail(const std::string& source, int line, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, "anchors",
              fmt::format("bench: argument 'anchors' is '{}'; line {} {}", source, line, what));
}

}  // namespace

std::map<AnchorKey, double> parse_tri_mx(std::istream& in, const std::string& source) {
  std::map<AnchorKey, double> table;
  std::map<AnchorKey, int> line_of;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    std::string_view row(text);
    if (!row.empty() && row.back() == '\r') row.remove_suffix(1);
    if (row.empty() || row.front() == '#' || row.rfind("layer,", 0) == 0) continue;
    const std::vector<std::string_view> f = split_fields(row);
    if (f.size() != kFields) {
      fail(source, line,
           fmt::format("has {} fields; expected {} (layer,n,k,m,bf16_us,fp8_tensor_us,"
                       "fp8_block_us,tri_mx_us)",
                       f.size(), kFields));
    }
    std::int64_t dims[3];
    const char* names[3] = {"n", "k", "m"};
    for (int d = 0; d < 3; ++d) {
      if (!parse_whole(f[static_cast<std::size_t>(d + 1)], dims[d]) || dims[d] <= 0) {
        fail(source, line,
             fmt::format("has {} = '{}'; expected a positive integer", names[d],
                         shown(f[static_cast<std::size_t>(d + 1)])));
      }
    }
    double tri_mx = 0;
    if (!parse_whole(f[7], tri_mx) || !std::isfinite(tri_mx) || tri_mx <= 0) {
      fail(source, line,
           fmt::format("has tri_mx_us = '{}'; expected a positive number", shown(f[7])));
    }
    const AnchorKey key{dims[0], dims[1], dims[2]};
    if (const auto seen = line_of.find(key); seen != line_of.end()) {
      fail(source, line,
           fmt::format("repeats (n, k, m) = ({}, {}, {}) of line {}; expected each once", dims[0],
                       dims[1], dims[2], seen->second));
    }
    line_of[key] = line;
    table[key] = tri_mx;
  }
  return table;
}

std::map<AnchorKey, double> load_tri_mx(const std::string& path) {
  if (path.empty()) return {};
  // Read as any user file (a regular file, at most 16 MiB): /dev/zero is refused, not read
  // without end.
  const detail::UserFile file = detail::read_user_file(path, std::size_t{16} << 20);
  if (!file.problem.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "--anchors",
                fmt::format("bench: --anchors is '{}', which {}; expected an anchor CSV such as "
                            "bench/anchors/h200-2026-11-30.csv",
                            detail::for_display(path), file.problem));
  }
  std::istringstream text(file.text);
  return parse_tri_mx(text, detail::for_display(path));
}

}  // namespace mxlinear::bench
