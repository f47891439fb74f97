#include "environment.hpp"

#include "host/registry/registry.hpp"

namespace mxlinear_torch {

mxlinear::ActivationMode default_activation_mode() {
  return mxlinear::Registry::global().environment().activation;
}

bool default_batch_invariant() {
  return mxlinear::Registry::global().environment().batch_invariant;
}

}  // namespace mxlinear_torch
