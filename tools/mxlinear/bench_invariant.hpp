// The batch-invariant mode's figures of one bench row (`mxlinear bench --batch-invariant`): the
// full linear from the bf16 activation in that mode, W8A8 and W8A16, each checked against its
// own fp64 reference rows before it is timed, and whether its rows come out bit for bit the same
// when run alone.
#pragma once

#include <cuda_runtime_api.h>

#include <nlohmann/json.hpp>
#include <string>

#include "bench_layer.hpp"

namespace mxlinear::cli {

// Adds to `row`, per mode (W8A8: "invariant", W8A16: "invariant_w8a16"): check_<mode> ("ok" or
// "WRONG") and check_<mode>_rel_error, or <mode>_error where the call was refused; <mode>_us and
// <mode>_spread where the check passed (the full linear with the workspace, as linear_us); and
// invariant_rows_equal: whether the first min(M, 8) rows, and the last as many, equal bit for bit
// the same x rows run alone as an M = min(M, 8) call, in every mode whose call ran. The
// kernel/config names (kernel_invariant, kernel_invariant_w8a16) are the caller's.
void add_invariant_figures(nlohmann::json& row, const FigureInputs& in);

// The row's batch-invariant figures for people, one line; empty where the row has none.
std::string invariant_text(const nlohmann::json& row);

}  // namespace mxlinear::cli
