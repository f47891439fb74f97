// `mxlinear tune`: times every config that can run each (layer shape, M) of a model on the
// present GPU and writes the fastest as a tuned table (docs/TUNED_TABLES.md).
#pragma once

#include <CLI/CLI.hpp>

namespace mxlinear::cli {

void add_tune_command(CLI::App& app, int& exit_code);

}  // namespace mxlinear::cli
