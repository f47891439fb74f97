// Tuned tables: which kernel and config serve a layer shape at a given M on a given GPU, as
// measured there. Format and rules: docs/TUNED_TABLES.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace mxlinear {

// M of a call maps to the bucket = the smallest power of two >= M (M = 1 -> 1, 33 -> 64).
std::int64_t m_bucket(std::int64_t m);

struct TunedKey {
  std::string arch;  // "sm_90a"
  int sms = 0;       // multiprocessor count
  std::int64_t n = 0, k = 0;
  bool exact_m = false;  // true: the row is for M == m only; false: for the bucket m
  std::int64_t m = 0;
  // A row for W8A16 calls: it names a W8A16 kernel (TableContext::w8a16_kernels). A shape has
  // rows for each mode apart; they sort by mode before M.
  bool w8a16 = false;
  auto tie() const { return std::tie(arch, sms, n, k, w8a16, exact_m, m); }
  bool operator<(const TunedKey& o) const { return tie() < o.tie(); }
  bool operator==(const TunedKey& o) const { return tie() == o.tie(); }
};

struct TunedValue {
  std::string kernel;
  std::string config;
  double us = 0;           // measured microseconds per call
  double error_ratio = 0;  // measured error / allowed error (<= 1)
  std::string library_version;
  std::string cuda_version;
  std::string source;  // "file:line" the row came from
  bool same_choice(const TunedValue& o) const {
    return kernel == o.kernel && config == o.config && us == o.us && error_ratio == o.error_ratio &&
           library_version == o.library_version && cuda_version == o.cuda_version;
  }
};

// What a parser must know to accept a row: the kernels and their configs, and the versions a
// row must carry to be current.
struct TableContext {
  std::map<std::string, std::vector<std::string>> kernel_configs;
  std::set<std::string> w8a16_kernels;  // the kernels that serve W8A16 calls
  std::string library_version;          // "major.minor"
  std::string cuda_version;             // "major.minor"; a row must match the major
};

// How the lines of one table were taken: every data line is accepted, a repeat of an accepted
// row, or skipped with a warning, never dropped silently.
struct TableStats {
  int data_lines = 0;  // lines that are not blank, a comment or the header
  int accepted = 0;
  int repeats = 0;          // identical repeats of an accepted row (no effect, no warning)
  int skipped = 0;          // each has a warning, up to kMaxRowWarnings of them
  int skipped_unshown = 0;  // skipped beyond those: one warning in all says how many
};

// The row warnings one table shows (a damaged file must not flood the log or the memory).
inline constexpr int kMaxRowWarnings = 20;

class TunedTable {
 public:
  // Parses one table's text. Every line that is not blank, a comment or the header becomes a
  // row or a warning naming source:line (past kMaxRowWarnings, one warning counts the rest);
  // nothing throws. Within one table the first row of a key wins and a later conflicting row is
  // reported; rows of a later add() override earlier tables.
  TableStats add(const std::string& text, const std::string& source, const TableContext& context);
  // The most bytes add_file() reads of one table (16 MiB; the shipped H200 table has 10 KB).
  static constexpr std::size_t kMaxFileBytes = std::size_t{16} << 20;
  // Reads a file and adds it. A path that cannot be opened, is not a regular file (a directory,
  // a device such as /dev/zero, a FIFO) or holds more than kMaxFileBytes is a warning naming the
  // path and the problem, and adds nothing; no path blocks or reads without bound.
  void add_file(const std::string& path, const TableContext& context);

  // The row for a call: the exact-M row, else the row of M's bucket, among the rows of the
  // call's mode (W8A8, or W8A16 with `w8a16`). Empty if there is neither.
  std::optional<TunedValue> lookup(const std::string& arch, int sms, std::int64_t n, std::int64_t k,
                                   std::int64_t m, bool w8a16 = false) const;
  // The row of the nearest bucket of the shape and mode: below M's bucket first, then above.
  // What a call no row covers may borrow where the cost model is off (a config tuned for 8
  // tokens runs 16 as two token tiles, so the cost model's choice is preferred).
  std::optional<TunedValue> nearest(const std::string& arch, int sms, std::int64_t n,
                                    std::int64_t k, std::int64_t m, bool w8a16 = false) const;
  // Whether the shape has rows on this device; with `kernel`, rows naming that kernel.
  bool has_shape(const std::string& arch, int sms, std::int64_t n, std::int64_t k,
                 std::string_view kernel = {}) const;

  const std::map<TunedKey, TunedValue>& rows() const { return rows_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  std::map<TunedKey, TunedValue> rows_;
  std::vector<std::string> warnings_;
};

}  // namespace mxlinear
