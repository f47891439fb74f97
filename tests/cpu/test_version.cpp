// mxlinear::version() and the version macros against the project version the build configured
// (MXLINEAR_EXPECTED_VERSION and _ARCH come from CMake, not from the library) and the toolkit's
// own runtime header.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

#include "mxlinear/version.hpp"

namespace mxlinear {
namespace {

TEST(Version, LibraryVersionIsTheProjectVersion) {
  EXPECT_EQ(version(), MXLINEAR_EXPECTED_VERSION);
  EXPECT_EQ(std::string{MXLINEAR_VERSION_STRING}, MXLINEAR_EXPECTED_VERSION);
}

TEST(Version, MacrosSpellTheVersionString) {
  const std::string from_macros = std::to_string(MXLINEAR_VERSION_MAJOR) + "." +
                                  std::to_string(MXLINEAR_VERSION_MINOR) + "." +
                                  std::to_string(MXLINEAR_VERSION_PATCH);
  EXPECT_EQ(from_macros, version());
  static_assert(MXLINEAR_VERSION_MAJOR >= 0 && MXLINEAR_VERSION_MINOR >= 0 &&
                MXLINEAR_VERSION_PATCH >= 0);
}

TEST(Version, BuildInfoNamesTheToolkitAndTheTarget) {
  const std::string cuda =
      std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
  EXPECT_EQ(build_info(), "CUDA " + cuda + ", " + MXLINEAR_EXPECTED_ARCH);
}

}  // namespace
}  // namespace mxlinear
