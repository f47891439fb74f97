// The mxlinear command-line tool: a thin shell over the library's C++ API.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <exception>

#include "bench_command.hpp"
#include "check_command.hpp"
#include "mxlinear/error.hpp"
#include "mxlinear/version.hpp"
#include "select_command.hpp"
#include "timeline_command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"mxlinear: MXFP8 linear layers on Hopper (select, check, benchmark, tune)"};
  app.require_subcommand(0, 1);
  app.set_version_flag(
      "--version", fmt::format("mxlinear {} ({})", mxlinear::version(), mxlinear::build_info()));
  int exit_code = 0;
  mxlinear::cli::add_check_command(app, exit_code);
  mxlinear::cli::add_bench_command(app, exit_code);
  mxlinear::cli::add_select_command(app, exit_code);
  mxlinear::cli::add_timeline_command(app, exit_code);
  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) return mxlinear::cli::run_example();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const mxlinear::Error& e) {
    fmt::print(stderr, "mxlinear: {}: {}\n", mxlinear::to_string(e.code()), e.what());
    return 2;
  } catch (const std::exception& e) {
    // Anything else (a library below us, the standard library): reported, never a terminate.
    fmt::print(stderr, "mxlinear: error: {}\n", e.what());
    return 2;
  }
  return exit_code;
}
