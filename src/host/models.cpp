#include "mxlinear/models.hpp"

#include <fmt/format.h>

#include <charconv>

#include "host/log.hpp"
#include "host/user_file.hpp"
#include "host/validate.hpp"

namespace mxlinear {
namespace {

// MiniMax-M3.1-Flash, tensor parallel 4, with its speculative draft model: every MXFP8 linear of
// one rank, and how many layers of each shape a decode step runs.
const std::vector<ModelLayer>& minimax_m31_flash_tp4() {
  static const std::vector<ModelLayer> layers = {
      {"self_attn.qkv_proj", 2560, 6144, 60},
      {"self_attn.o_proj", 6144, 2048, 60},
      {"shared_experts.gate_up_proj", 1536, 6144, 57},
      {"shared_experts.down_proj", 6144, 768, 57},
      {"dense_mlp.gate_up_proj", 6144, 6144, 8},
      {"dense_mlp.down_proj", 6144, 3072, 8},
      {"draft.qkv_proj", 2304, 6144, 5},
      {"draft.o_proj", 6144, 2048, 5},
      {"draft.fused_ctx_kv_proj", 1280, 6144, 1},
  };
  return layers;
}

bool blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

bool parse_int(std::string_view text, std::int64_t& out) {
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::vector<std::string> builtin_model_names() { return {"minimax-m3.1-flash-tp4"}; }

std::vector<ModelLayer> builtin_model(const std::string& name) {
  if (name == "minimax-m3.1-flash-tp4") return minimax_m31_flash_tp4();
  detail::fail(ErrorCode::kInvalidArgument, "builtin_model", "name",
               fmt::format("is '{}'; expected one of: {}", detail::for_display(name),
                           fmt::join(builtin_model_names(), ", ")));
}

std::vector<ModelLayer> parse_model_csv(std::string_view text, const std::string& source) {
  const std::string shown_source = detail::for_display(source);
  std::vector<ModelLayer> layers;
  int line_no = 0;
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.empty() || line == "\r" || line[0] == '#') continue;
    std::vector<std::string_view> fields;
    std::string_view rest = line;
    for (std::size_t comma;
         fields.size() < 5 && (comma = rest.find(',')) != std::string_view::npos;) {
      fields.push_back(rest.substr(0, comma));
      rest.remove_prefix(comma + 1);
    }
    fields.push_back(rest);
    std::int64_t n = 0, k = 0, count = 0;
    // The header names its columns; a layer called "name" has numbers in them.
    if (fields[0] == "name" && fields.size() > 1 && !parse_int(fields[1], n)) continue;
    if (fields.size() != 4 || !parse_int(fields[1], n) || !parse_int(fields[2], k) ||
        !parse_int(fields[3], count) || n < 1 || k < 32 || k % 32 != 0 || count < 1 ||
        n > kMaxLayerFeatures || k > kMaxLayerFeatures || count > kMaxLayerCount) {
      detail::fail(ErrorCode::kInvalidArgument, "load_model_csv", "path",
                   fmt::format("has {}:{}: '{}'; expected 'name,N,K,count' with N in 1..{}, K a "
                               "multiple of 32 in 32..{} and count in 1..{}",
                               shown_source, line_no, detail::for_display(line), kMaxLayerFeatures,
                               kMaxLayerFeatures, kMaxLayerCount));
    }
    layers.push_back({std::string(fields[0]), n, k, static_cast<int>(count)});
  }
  if (layers.empty()) {
    detail::fail(ErrorCode::kInvalidArgument, "load_model_csv", "path",
                 fmt::format("is '{}', which has no layers; expected a model CSV with at least one "
                             "'name,N,K,count' row",
                             shown_source));
  }
  return layers;
}

std::vector<ModelLayer> load_model_csv(const std::string& path) {
  const detail::UserFile file = detail::read_user_file(path, kMaxModelFileBytes);
  if (!file.problem.empty()) {
    detail::fail(ErrorCode::kInvalidArgument, "load_model_csv", "path",
                 fmt::format("is '{}', which {}; expected a model CSV file ('name,N,K,count' "
                             "rows, at least one layer) or builtin:<name>",
                             detail::for_display(path), file.problem));
  }
  return parse_model_csv(file.text, path);
}

std::vector<ModelLayer> load_model(const std::string& spec) {
  constexpr std::string_view kBuiltin = "builtin:";
  if (spec.rfind(kBuiltin, 0) == 0) return builtin_model(spec.substr(kBuiltin.size()));
  return load_model_csv(spec);
}

}  // namespace mxlinear
