// The selection report as JSON (`mxlinear select --json`): the device, the activation mode,
// whether the report is the batch-invariant mode's (batch_invariant), and per layer the kernels
// its calls run on, the kernel that claims it, every rejection and the per-M dispatch.
#pragma once

#include <string>
#include <vector>

#include "mxlinear/selection.hpp"

namespace mxlinear::cli {

std::string select_report_json(const std::vector<ReportRow>& rows, const DeviceDescription& device);

}  // namespace mxlinear::cli
