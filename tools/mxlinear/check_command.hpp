#pragma once

#include <CLI/CLI.hpp>

namespace mxlinear::cli {

// `mxlinear check`: runs one random layer through a kernel and prints its error against fp64.
// The command's exit status lands in exit_code once it has run.
void add_check_command(CLI::App& app, int& exit_code);

// The main job with no arguments: the check on a built-in example layer.
int run_example();

}  // namespace mxlinear::cli
