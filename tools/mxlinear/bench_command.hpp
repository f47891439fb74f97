#pragma once

#include <CLI/CLI.hpp>

namespace mxlinear::cli {

// `mxlinear bench`: per-GEMM timings over a model's distinct layer shapes and a list of M.
void add_bench_command(CLI::App& app, int& exit_code);

}  // namespace mxlinear::cli
