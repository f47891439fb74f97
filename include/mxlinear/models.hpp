// Layer tables of real models: the shapes selection reports and benchmarks run over.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mxlinear {

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

// Reads "name,n,k,count" rows (a header line and # comments allowed) from a CSV file. Throws
// Error naming file:line for a row it cannot read.
std::vector<ModelLayer> load_model_csv(const std::string& path);

// "builtin:<name>" or a CSV path.
std::vector<ModelLayer> load_model(const std::string& spec);

}  // namespace mxlinear
