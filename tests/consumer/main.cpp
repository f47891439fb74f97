// Uses an installed mxlinear through find_package: quantizes an activation and a weight with the
// CPU API, runs the CPU reference linear and checks it against products computed here. The
// values are small integers, which MXFP8 holds exactly, so the result must match exactly.
#include <mxlinear/error.hpp>
#include <mxlinear/linear_types.hpp>
#include <mxlinear/quantize.hpp>
#include <mxlinear/reference.hpp>
#include <mxlinear/version.hpp>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace {

constexpr std::int64_t kM = 3;
constexpr std::int64_t kN = 4;
constexpr std::int64_t kK = 64;

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what.c_str());
    ++failures;
  }
}

}  // namespace

int main() {
  using mxlinear::DType;
  using mxlinear::Location;
  using mxlinear::TensorView;

  const std::string version{mxlinear::version()};
  const std::string headers = std::to_string(MXLINEAR_VERSION_MAJOR) + "." +
                              std::to_string(MXLINEAR_VERSION_MINOR) + "." +
                              std::to_string(MXLINEAR_VERSION_PATCH);
  std::printf("mxlinear %s (%s)\n", version.c_str(), std::string{mxlinear::build_info()}.c_str());
  expect(version == headers, "library version " + version + " != header version " + headers);

  // x[m][k] and w[n][k] in -7..7, with zeros and one large value per row to spread the scales.
  std::vector<float> x(static_cast<std::size_t>(kM * kK));
  std::vector<float> w(static_cast<std::size_t>(kN * kK));
  for (std::int64_t m = 0; m < kM; ++m) {
    for (std::int64_t k = 0; k < kK; ++k) {
      x[static_cast<std::size_t>(m * kK + k)] = static_cast<float>((3 * m + 5 * k) % 15 - 7);
    }
    x[static_cast<std::size_t>(m * kK + m)] = 96.0f;
  }
  for (std::int64_t n = 0; n < kN; ++n) {
    for (std::int64_t k = 0; k < kK; ++k) {
      w[static_cast<std::size_t>(n * kK + k)] = static_cast<float>((7 * n + 2 * k) % 11 - 5);
    }
  }

  std::vector<std::uint8_t> w_data(w.size());
  std::vector<std::uint8_t> w_scales(static_cast<std::size_t>(kN * kK / mxlinear::kBlockSize));
  const mxlinear::MxWeight weight{
      TensorView::contiguous(w_data.data(), {kN, kK}, DType::kE4M3, Location::kHost),
      TensorView::contiguous(w_scales.data(), {kN, kK / mxlinear::kBlockSize}, DType::kE8M0,
                             Location::kHost)};
  mxlinear::quantize_rows(TensorView::contiguous(w.data(), {kN, kK}, DType::kF32, Location::kHost),
                          weight.data, weight.scales);

  std::vector<float> bias(static_cast<std::size_t>(kN));
  for (std::int64_t n = 0; n < kN; ++n)
    bias[static_cast<std::size_t>(n)] = 0.5f * static_cast<float>(n);
  std::vector<float> out(static_cast<std::size_t>(kM * kN), -1.0f);
  mxlinear::reference_linear(
      TensorView::contiguous(x.data(), {kM, kK}, DType::kF32, Location::kHost), weight,
      TensorView::contiguous(bias.data(), {kN}, DType::kF32, Location::kHost),
      TensorView::contiguous(out.data(), {kM, kN}, DType::kF32, Location::kHost));

  for (std::int64_t m = 0; m < kM; ++m) {
    for (std::int64_t n = 0; n < kN; ++n) {
      double want = bias[static_cast<std::size_t>(n)];
      for (std::int64_t k = 0; k < kK; ++k) {
        want += static_cast<double>(x[static_cast<std::size_t>(m * kK + k)]) *
                static_cast<double>(w[static_cast<std::size_t>(n * kK + k)]);
      }
      const float got = out[static_cast<std::size_t>(m * kN + n)];
      expect(static_cast<double>(got) == want,
             "out[" + std::to_string(m) + "][" + std::to_string(n) + "] = " + std::to_string(got) +
                 ", expected " + std::to_string(want));
    }
  }

  // Bad input is an mxlinear::Error naming the argument.
  try {
    std::vector<float> short_out(static_cast<std::size_t>(kM * (kN - 1)));
    mxlinear::reference_linear(
        TensorView::contiguous(x.data(), {kM, kK}, DType::kF32, Location::kHost), weight,
        std::nullopt,
        TensorView::contiguous(short_out.data(), {kM, kN - 1}, DType::kF32, Location::kHost));
    expect(false, "a [3, 3] output for N = 4 was accepted");
  } catch (const mxlinear::Error& e) {
    expect(e.code() == mxlinear::ErrorCode::kInvalidArgument,
           std::string{"wrong error code for a bad output shape: "} + e.what());
  }

  if (failures != 0) return 1;
  std::printf("consumer: %lld x %lld reference linear exact\n", static_cast<long long>(kM),
              static_cast<long long>(kN));
  return 0;
}
