// The benchmark report: its JSON schema check and its Markdown form.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mxlinear::bench {

// A row's number, or NaN where the figure is missing (a failed anchor, a wrong kernel).
double value_or_nan(const nlohmann::json& row, const char* key);

// The default mode's time that the batch-invariant mode's "<prefix>_us" ("invariant",
// "invariant_w8a16") is compared with: "<prefix>_default_us", the same call timed in alternation
// with it, or in reports from before that field `timed_apart` (linear_us, w8a16_us).
std::string invariant_default_key(const nlohmann::json& row, const std::string& prefix,
                                  const char* timed_apart);

// "<prefix>_us" over that default time; NaN where either is missing.
double invariant_over_default(const nlohmann::json& row, const std::string& prefix,
                              const char* timed_apart);

// What is wrong with a report against its schema: empty when it conforms.
// Required: gpu, versions{driver_cuda, cuda_runtime, cublas, mxlinear}, ceilings{read_tb_s,
// bf16_tflop_s, fp8_tflop_s}, rows[{layer, n, k, m, kernel, check, floor_us, and gemm_us plus
// linear_us when check is "ok"}], geomeans[{m, vs_cublas_bf16, vs_cublaslt_fp8, vs_tri_mx}],
// and optional step[{m, gemms, mxlinear_ms}] and timing{replays, warm_ms}. The W8A16 figure is
// optional, as reports from before it lack it; a row with any of its fields (kernel_w8a16,
// check_w8a16, check_w8a16_rel_error, w8a16_us, w8a16_spread, w8a16_tb_s) needs kernel_w8a16 and
// check_w8a16, and check_w8a16_rel_error plus w8a16_us when check_w8a16 is "ok". So is the
// batch-invariant mode's (`mxlinear bench --batch-invariant`), per activation mode: a row with
// any of kernel_invariant, check_invariant, check_invariant_rel_error, invariant_us,
// invariant_spread, invariant_error (W8A16: kernel_invariant_w8a16, check_invariant_w8a16, ...,
// invariant_w8a16_error) needs its kernel and check, and its rel error plus time when the check is
// "ok"; invariant_default_us and invariant_default_spread (W8A16: invariant_w8a16_default_...) are
// numbers; invariant_rows_equal is a boolean. Optional fields that are present must have their
// type; a geomean's optional w8a16_vs_cublas_bf16, invariant_over_default and
// invariant_w8a16_over_default are numbers.
std::vector<std::string> schema_errors(const nlohmann::json& doc);

// The report in Markdown: the figures, the batch-invariant mode's figures (only in a report that
// has them), the geomeans (the batch-invariant mode's columns only where present), the activation
// quantization and the decode step.
std::string markdown_report(const nlohmann::json& doc);

// How the report's figures were timed, for people: from its optional timing{replays, warm_ms}
// ("burst" figures when warm_ms is 0 or the report predates the field).
std::string timing_note(const nlohmann::json& doc);

}  // namespace mxlinear::bench
