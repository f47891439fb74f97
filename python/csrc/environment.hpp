// The library's process-wide defaults as its kernel registry read them from the environment, for
// the ops and the Python module: a call that leaves a choice open must resolve it the way the
// library's own entry points do.
#pragma once

#include "mxlinear/linear_types.hpp"

namespace mxlinear_torch {

// MXLINEAR_ACTIVATION's mode: W8A16 for "bf16", W8A8 for "mx", where it is unset and (with the
// registry's warning) for any other value. Read once per process.
mxlinear::ActivationMode default_activation_mode();

// MXLINEAR_BATCH_INVARIANT's switch: true for "1"; false for "0", where it is unset and (with the
// registry's warning) for any other value. Read once per process.
bool default_batch_invariant();

}  // namespace mxlinear_torch
