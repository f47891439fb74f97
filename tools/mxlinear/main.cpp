// The mxlinear command-line tool: a thin shell over the library's C++ API.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstddef>
#include <exception>
#include <string>
#include <string_view>

#include "bench_command.hpp"
#include "check_command.hpp"
#include "exit_codes.hpp"
#include "host/log.hpp"
#include "mxlinear/error.hpp"
#include "mxlinear/version.hpp"
#include "select_command.hpp"
#include "timeline_command.hpp"
#include "tune_command.hpp"

namespace {

// A message as the terminal gets it: a user's value inside it may be anything (CLI11 echoes
// arguments whole), so bytes outside printable ASCII are escaped and the length is bounded, far
// above any message of ours (a kernel's config list included).
std::string shown(std::string_view message) { return mxlinear::detail::for_display(message, 8192); }

// The longest argument taken: PATH_MAX, far above any value an option needs. A longer one is
// refused before parsing, so no message echoes it whole.
constexpr std::size_t kMaxArgumentBytes = 4096;

}  // namespace

int main(int argc, char** argv) {
  using namespace mxlinear::cli;
  CLI::App app{"mxlinear: MXFP8 linear layers on Hopper (check, bench, select, tune, timeline)"};
  app.require_subcommand(0, 1);
  app.set_version_flag(
      "--version", fmt::format("mxlinear {} ({})", mxlinear::version(), mxlinear::build_info()));
  app.footer(exit_status_help());
  // Every option's help shows its default; subcommands inherit this.
  app.option_defaults()->always_capture_default();
  int exit_code = kExitOk;
  add_check_command(app, exit_code);
  add_bench_command(app, exit_code);
  add_select_command(app, exit_code);
  add_timeline_command(app, exit_code);
  add_tune_command(app, exit_code);
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg(argv[i]);
    if (arg.size() > kMaxArgumentBytes) {
      fmt::print(stderr, "mxlinear: argument {} is {} bytes long ('{}'); expected at most {}\n", i,
                 arg.size(), mxlinear::detail::for_display(arg), kMaxArgumentBytes);
      return kExitInvalid;
    }
  }
  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) return run_example();
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --version and the like
    // CLI11's own statuses (104 a conversion, 105 a validation, ...) all mean invalid input.
    fmt::print(stderr, "mxlinear: {}\nRun with --help for more information.\n", shown(e.what()));
    return kExitInvalid;
  } catch (const mxlinear::Error& e) {
    fmt::print(stderr, "mxlinear: {}: {}\n", mxlinear::to_string(e.code()), shown(e.what()));
    return kExitInvalid;
  } catch (const std::exception& e) {
    // Anything else (a library below us, the standard library): reported, never a terminate.
    fmt::print(stderr, "mxlinear: error: {}\n", shown(e.what()));
    return kExitInvalid;
  }
  return exit_code;
}
