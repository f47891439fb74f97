#include "support/random.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace mxlinear::test {

std::uint64_t test_seed() {
  std::uint64_t seed = 0;
  if (const char* env = std::getenv("MXLINEAR_TEST_SEED")) {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    std::random_device device;
    seed = (static_cast<std::uint64_t>(device()) << 32) ^ device();
  }
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name =
      info ? std::string(info->test_suite_name()) + "." + info->name() : std::string("?");
  std::printf("[ seed     ] %s: MXLINEAR_TEST_SEED=%llu\n", name.c_str(),
              static_cast<unsigned long long>(seed));
  // A test process the sanitizer step's timeout kills still shows which tests had started, and
  // with which seeds (its stdout is a file, so unflushed lines would be lost).
  std::fflush(stdout);
  return seed;
}

std::mt19937_64 make_rng() { return std::mt19937_64(test_seed()); }

}  // namespace mxlinear::test
