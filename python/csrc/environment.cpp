#include "environment.hpp"

#include "host/registry/registry.hpp"

namespace mxlinear_torch {

mxlinear::ActivationMode default_activation_mode() {
  return mxlinear::Registry::global().environment().activation;
}

}  // namespace mxlinear_torch
