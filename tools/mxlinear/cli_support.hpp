// What the commands share: option validators, checks that run before anything else (so bad
// input is refused with or without a GPU), and the notes on environment switches a command
// does not use.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "host/registry/registry.hpp"

namespace mxlinear::cli {

// K of a layer: a positive multiple of 32 (the MX block), at most `max`.
CLI::Validator multiple_of_32(std::int64_t max);
// An unsigned value given as digits: "-1" is refused instead of wrapping to 2^64 - 1.
CLI::Validator non_negative_integer();

// Throws Error(kInvalidArgument) naming `option` unless `path` can be written: a writable
// regular file, or a new file in an existing writable directory. Returns whether it exists.
bool require_writable_path(std::string_view option, const std::string& path);
// Throws Error(kInvalidArgument) naming `option` where reading `path`, a file that exists, failed
// with `problem` (over the cap, unreadable): a command that resumes a file never truncates one it
// could not read.
void refuse_unreadable_existing(std::string_view option, const std::string& path,
                                const std::string& problem);

// The kernel called `name` (of the built-in list, without reading tuned tables); throws Error
// naming `option` and the valid kernels.
const Kernel& require_kernel(std::string_view option, const std::string& name);
// The process-wide registry's instance of a kernel that require_kernel() accepted.
const Kernel& registry_kernel(std::string_view name);
// Throws Error naming `option` and the kernel's configs unless it has `config` (empty: the
// kernel's default, always valid).
void require_config(std::string_view option, const Kernel& kernel, const std::string& config);

// The kernel-selection switches (MXLINEAR_BACKEND, MXLINEAR_DISABLED_KERNELS,
// MXLINEAR_TUNED_TABLES, MXLINEAR_COST_MODEL) set to a non-empty value in this process.
std::vector<std::string> selection_switches_set();
// One line to stderr where selection switches are set that `command` does not use because
// `why` (e.g. "--cpu runs the CPU reference directly"); nothing when none is set.
void note_unused_selection_switches(std::string_view command, std::string_view why);

}  // namespace mxlinear::cli
