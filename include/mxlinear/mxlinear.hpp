// mxlinear's public API in one include: the MX formats, tensor views, errors, the linear layer
// on the GPU, quantization, the CPU reference, the selection report, model tables and tuned
// tables, and the version.
#pragma once

#include "mxlinear/error.hpp"
#include "mxlinear/format.hpp"
#include "mxlinear/linear.hpp"
#include "mxlinear/linear_types.hpp"
#include "mxlinear/models.hpp"
#include "mxlinear/quantize.hpp"
#include "mxlinear/reference.hpp"
#include "mxlinear/selection.hpp"
#include "mxlinear/tensor.hpp"
#include "mxlinear/tuned_table.hpp"
#include "mxlinear/version.hpp"
