#include <algorithm>
#include <cstdlib>

#include "host/registry/registry.hpp"

namespace mxlinear {
namespace {

// Splits on sep and trims spaces and tabs, dropping empty items. No iostreams: the library may be
// linked into a process whose copy of libstdc++ never set up its iostreams locale.
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin <= s.size()) {
    const std::size_t end = std::min(s.find(sep, begin), s.size());
    const std::string item = s.substr(begin, end - begin);
    const auto b = item.find_first_not_of(" \t");
    const auto e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
    begin = end + 1;
  }
  return out;
}

}  // namespace

Environment Environment::from(const std::map<std::string, std::string>& vars) {
  Environment env;
  auto get = [&vars](const char* name) -> std::string {
    const auto it = vars.find(name);
    return it == vars.end() ? "" : it->second;
  };
  // Values are kept as given; the registry's warnings echo an invalid one through for_display.
  env.disabled = split(get("MXLINEAR_DISABLED_KERNELS"), ',');
  if (const std::string b = get("MXLINEAR_BACKEND"); !b.empty()) env.backend = b;
  if (const std::string l = get("MXLINEAR_LOG"); !l.empty()) env.log = l;
  env.tuned_tables = split(get("MXLINEAR_TUNED_TABLES"), ':');
  if (const std::string c = get("MXLINEAR_COST_MODEL"); c == "0") {
    env.cost_model = false;
  } else if (!c.empty() && c != "1") {
    env.cost_model_invalid = c;
  }
  if (const std::string a = get("MXLINEAR_ACTIVATION"); !a.empty()) {
    if (const std::optional<ActivationMode> mode = parse_activation_mode(a)) {
      env.activation = *mode;
    } else {
      env.activation_invalid = a;
    }
  }
  if (const std::string b = get("MXLINEAR_BATCH_INVARIANT"); b == "1") {
    env.batch_invariant = true;
  } else if (!b.empty() && b != "0") {
    env.batch_invariant_invalid = b;
  }
  return env;
}

Environment Environment::from_process() {
  std::map<std::string, std::string> vars;
  for (const char* name :
       {"MXLINEAR_DISABLED_KERNELS", "MXLINEAR_BACKEND", "MXLINEAR_LOG", "MXLINEAR_TUNED_TABLES",
        "MXLINEAR_COST_MODEL", "MXLINEAR_ACTIVATION", "MXLINEAR_BATCH_INVARIANT"}) {
    if (const char* v = std::getenv(name)) vars[name] = v;
  }
  return from(vars);
}

}  // namespace mxlinear
