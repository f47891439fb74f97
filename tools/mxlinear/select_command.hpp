#pragma once

#include <CLI/CLI.hpp>

namespace mxlinear::cli {

// `mxlinear select`: the kernel each layer of a model gets, and why the others were rejected.
void add_select_command(CLI::App& app, int& exit_code);

}  // namespace mxlinear::cli
