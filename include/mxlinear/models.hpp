// Layer tables of real models: the shapes selection reports and benchmarks run over.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mxlinear {

// The largest N or K, and layer count, a model's layer may have (load_model_csv, selection_report).
inline constexpr std::int64_t kMaxLayerFeatures = std::int64_t{1} << 24;
inline constexpr std::int64_t kMaxLayerCount = std::int64_t{1} << 20;

struct ModelLayer {
  std::string name;    // "self_attn.qkv_proj"
  std::int64_t n = 0;  // output features per rank
  std::int64_t k = 0;  // input features per rank
  int count = 0;       // layers of this shape per decode step
};

// Names accepted by builtin_model(), e.g. "minimax-m3.1-flash-tp4".
std::vector<std::string> builtin_model_names();

// A built-in table. Throws Error(kInvalidArgument) naming `name` and listing the valid names.
std::vector<ModelLayer> builtin_model(const std::string& name);

// The most bytes load_model_csv() reads of a file (16 MiB; a model has a few dozen rows).
inline constexpr std::size_t kMaxModelFileBytes = std::size_t{16} << 20;

// Parses "name,n,k,count" rows (a header line, blank lines and # comments allowed) of a model
// CSV; `source` names it in messages. Throws Error(kInvalidArgument) naming source:line for a
// row it cannot read, and for a text without a single layer. Any bytes either parse or throw.
std::vector<ModelLayer> parse_model_csv(std::string_view text, const std::string& source);

// Reads and parses a model CSV file. Throws Error naming the path where it cannot be opened, is
// not a regular file (a directory, a device, a FIFO), holds more than kMaxModelFileBytes or
// has no layers, and file:line for a row it cannot read.
std::vector<ModelLayer> load_model_csv(const std::string& path);

// "builtin:<name>" or a CSV path.
std::vector<ModelLayer> load_model(const std::string& spec);

}  // namespace mxlinear
