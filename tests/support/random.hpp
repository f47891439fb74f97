// Fresh random inputs for every run. The seed is printed on failure (see SeedReporter) so a
// failing case can be replayed with MXLINEAR_TEST_SEED=<seed>.
#pragma once

#include <cstdint>
#include <random>

namespace mxlinear::test {

// The seed for this test: MXLINEAR_TEST_SEED if set, else a fresh one from std::random_device.
// Also records it in the test's XML properties and prints a repro line if the test fails.
std::uint64_t test_seed();

std::mt19937_64 make_rng();

}  // namespace mxlinear::test
