// The vocabulary of config names, shared by every kernel. A name is tokens joined by '_', in the
// order below; a token means the same in every kernel, and each kernel spells the ones it has.
// N, R and T are decimal numbers from 1, without leading zeros.
//
//   w<N>         weight rows (output columns) per CTA
//   t<N>         tokens (activation rows) per CTA
//   warp<R>x<T>  each warp's tile: R weight rows x T tokens (generic)
//   kwarps<N>    K split over N warps of each tile, added in shared memory (gemv, generic;
//                absent: 1)
//   st<N>        a shared-memory weight ring of N stages (gemv: one ring per warp; absent there:
//                weights streamed through registers)
//   bk<N>        K per stage, where it is not 128 (prefill: bk64)
//   overlap      one stage's wgmma kept in flight while the next stage's weights convert
//                (prefill)
//   alt          two consumer warpgroups on the same weight rows, taking alternate stages
//                (decode, prefill)
//   persistent   one CTA per SM walks the output tiles (prefill)
//   streamk      the persistent walk over (tile, 128-K chunk) units, cut tiles met in the
//                workspace (prefill)
//   kparts       the batch-invariant mode's K parts summed apart in one CTA, K unsplit (prefill;
//                gemv: whole parts per warp, the prefill kernel's order)
//   split<N>     K split over a cluster of N CTAs (absent: 1)
//   waited       the next kernel may start launching once the CTAs have waited on the previous
//                kernel (gemv)
//   early        the next kernel may start launching at the CTAs' entry (gemv; with neither
//                word: once they have staged their activation)
//
// A kernel's config struct lists its tokens once, in a spell() template that Writer runs to
// print the name and Reader runs to parse it, so the two cannot disagree. Reader accepts only
// the name Writer prints: tokens in order, no token left over, and no optional token spelling
// its absent value ("split1", "bk128").
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace mxlinear::detail::config_name {

// Prints a config's tokens.
class Writer {
 public:
  // "<word><value>".
  bool number(std::string_view word, int value);
  // The same, left out where value == absent.
  bool number(std::string_view word, int value, int absent);
  // "<word><a>x<b>".
  bool pair(std::string_view word, int a, int b);
  // "<word>" where on.
  bool flag(std::string_view word, bool on);
  // The word listed for value; nothing for a value not listed (the default).
  template <class E>
  bool choice(E value, std::initializer_list<std::pair<E, std::string_view>> words) {
    for (const auto& [e, word] : words) {
      if (e == value) return flag(word, true);
    }
    return true;
  }

  std::string str() const { return name_; }

 private:
  void token(std::string_view text);
  std::string name_;
};

// Parses a name Writer printed, token by token; any mismatch makes done() false.
class Reader {
 public:
  explicit Reader(std::string_view name);

  bool number(std::string_view word, int& value);
  // Sets value = absent where the next token is not a "<word><N>".
  bool number(std::string_view word, int& value, int absent);
  bool pair(std::string_view word, int& a, int& b);
  bool flag(std::string_view word, bool& on);
  // Leaves value as it is (the default) where the next token is none of the words.
  template <class E>
  bool choice(E& value, std::initializer_list<std::pair<E, std::string_view>> words) {
    for (const auto& [e, word] : words) {
      if (!at_end() && next() == word) {
        value = e;
        ++read_;
        return true;
      }
    }
    return true;
  }

  // Whether every token was read and each was well formed.
  bool done() const { return ok_ && read_ == count_; }

 private:
  static constexpr std::size_t kMaxTokens = 16;
  bool at_end() const { return read_ >= count_; }
  std::string_view next() const { return tokens_[read_]; }
  bool fail() { return ok_ = false; }

  std::array<std::string_view, kMaxTokens> tokens_{};
  std::size_t count_ = 0;
  std::size_t read_ = 0;
  bool ok_ = true;
};

// A config's name: Config::spell(config, writer).
template <class Config>
std::string print(const Config& config) {
  Writer writer;
  Config::spell(config, writer);
  return writer.str();
}

// The config a name spells, or nullopt where it spells none.
template <class Config>
std::optional<Config> parse(std::string_view name) {
  Config config;
  Reader reader(name);
  if (!Config::spell(config, reader) || !reader.done()) return std::nullopt;
  return config;
}

}  // namespace mxlinear::detail::config_name
