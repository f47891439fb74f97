// The exit statuses of the mxlinear command: one list, used by the code and shown in --help.
#pragma once

#include <fmt/format.h>

#include <string>

namespace mxlinear::cli {

inline constexpr int kExitOk = 0;
// check: the result is wrong; bench: a figure failed its correctness check or the report its
// schema; select: a layer no kernel can run; timeline: no CTA recorded a stamp.
inline constexpr int kExitFailed = 1;
// Invalid input (an argument, a file, a value out of range) or an error while running; the
// message names the argument and what was expected.
inline constexpr int kExitInvalid = 2;
// The command needs an sm_90 GPU and this machine has none: nothing ran (the conventional
// "skipped" status, which test harnesses tell apart from a failure).
inline constexpr int kExitSkipped = 77;

// The --help footer listing the statuses above.
inline std::string exit_status_help() {
  return fmt::format(
      "Exit status:\n"
      "  {}   ok\n"
      "  {}   a check failed (check: a wrong result; bench: a figure failed its correctness\n"
      "      check; select: a layer no kernel can run; timeline: no CTA recorded a stamp)\n"
      "  {}   invalid input or an error; the message names the argument and what was expected\n"
      "  {}  skipped: the command needs an sm_90 GPU and this machine has none",
      kExitOk, kExitFailed, kExitInvalid, kExitSkipped);
}

}  // namespace mxlinear::cli
