#include "host/registry/config_name.hpp"

#include <fmt/format.h>

namespace mxlinear::detail::config_name {
namespace {

constexpr int kMaxNumber = 9999;

// The number `text` spells: decimal digits, no leading zero, 1..kMaxNumber; 0 where it is not.
int number_of(std::string_view text) {
  if (text.empty() || text.size() > 4 || text.front() == '0') return 0;
  int value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return 0;
    value = value * 10 + (c - '0');
  }
  return value <= kMaxNumber ? value : 0;
}

// Whether `token` is `word` followed by digits ("st4" for "st"; not "streamk").
bool is_number_token(std::string_view token, std::string_view word) {
  if (!token.starts_with(word) || token.size() == word.size()) return false;
  for (const char c : token.substr(word.size())) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// The number after `word` in `token` ("st4", "st" -> 4), or 0 where token is not such a token.
int number_after(std::string_view token, std::string_view word) {
  return is_number_token(token, word) ? number_of(token.substr(word.size())) : 0;
}

}  // namespace

void Writer::token(std::string_view text) {
  if (!name_.empty()) name_ += '_';
  name_ += text;
}

bool Writer::number(std::string_view word, int value) {
  token(fmt::format("{}{}", word, value));
  return true;
}

bool Writer::number(std::string_view word, int value, int absent) {
  return value == absent || number(word, value);
}

bool Writer::pair(std::string_view word, int a, int b) {
  token(fmt::format("{}{}x{}", word, a, b));
  return true;
}

bool Writer::flag(std::string_view word, bool on) {
  if (on) token(word);
  return true;
}

Reader::Reader(std::string_view name) {
  while (true) {
    if (count_ == kMaxTokens) {
      ok_ = false;
      return;
    }
    const std::size_t end = name.find('_');
    tokens_[count_++] = name.substr(0, end);
    if (end == std::string_view::npos) break;
    name.remove_prefix(end + 1);
  }
  // "a__b", "_a" and "a_" have an empty token.
  for (std::size_t i = 0; i < count_; ++i) {
    if (tokens_[i].empty()) ok_ = false;
  }
}

bool Reader::number(std::string_view word, int& value) {
  if (!ok_ || at_end()) return fail();
  value = number_after(next(), word);
  if (value == 0) return fail();
  ++read_;
  return true;
}

bool Reader::number(std::string_view word, int& value, int absent) {
  value = absent;
  if (!ok_ || at_end() || !is_number_token(next(), word)) return ok_;
  // A token of this word must carry a number, and not the one its absence already says.
  const int parsed = number_after(next(), word);
  if (parsed == 0 || parsed == absent) return fail();
  value = parsed;
  ++read_;
  return true;
}

bool Reader::pair(std::string_view word, int& a, int& b) {
  if (!ok_ || at_end() || !next().starts_with(word)) return fail();
  const std::string_view numbers = next().substr(word.size());
  const std::size_t x = numbers.find('x');
  if (x == std::string_view::npos) return fail();
  a = number_of(numbers.substr(0, x));
  b = number_of(numbers.substr(x + 1));
  if (a == 0 || b == 0) return fail();
  ++read_;
  return true;
}

bool Reader::flag(std::string_view word, bool& on) {
  on = ok_ && !at_end() && next() == word;
  if (on) ++read_;
  return ok_;
}

}  // namespace mxlinear::detail::config_name
