#pragma once

#include <CLI/CLI.hpp>

namespace mxlinear::cli {

// `mxlinear timeline`: where the CTAs of one decode, gemv or prefill config spend their time, from
// the per-CTA phase stamps of a -DMXLINEAR_TIMELINE=ON build.
void add_timeline_command(CLI::App& app, int& exit_code);

}  // namespace mxlinear::cli
