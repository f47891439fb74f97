// Shared pieces of the GPU tests: device buffers, the visible skip, MX operand generators and the
// tolerance of MXFP8.md.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string_view>
#include <vector>

#include "mxlinear/linear.hpp"

// Skips (visibly, in CTest's output too) when there is no sm_90 GPU; the test still compiles.
// With MXLINEAR_REQUIRE_GPU=1 (the GPU machine's runs) it fails instead: there, a missing GPU is
// a fault, and gpu_available() is library code that a skip must not trust.
#define MXL_REQUIRE_GPU()                        \
  do {                                           \
    if (!::mxlinear::gpu_available()) {          \
      if (::mxlinear::test::gpu_required())      \
        FAIL() << "MXLINEAR_REQUIRE_GPU=1, but " \
                  "gpu_available() is false";    \
      GTEST_SKIP() << "no sm_90 GPU";            \
    }                                            \
  } while (0)

#define MXL_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

namespace mxlinear::test {

// Whether MXLINEAR_REQUIRE_GPU=1: a GPU test fails where it would skip for want of a GPU.
inline bool gpu_required() {
  const char* v = std::getenv("MXLINEAR_REQUIRE_GPU");
  return v != nullptr && std::string_view(v) == "1";
}

// Owns device memory; freed on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer();

  void* get() const { return ptr_; }
  std::uint8_t* bytes() const { return static_cast<std::uint8_t*>(ptr_); }
  std::size_t size() const { return bytes_; }

  template <class T>
  static DeviceBuffer from(const std::vector<T>& host) {
    DeviceBuffer b(host.size() * sizeof(T));
    b.upload(host.data(), host.size() * sizeof(T));
    return b;
  }
  void upload(const void* src, std::size_t bytes);
  template <class T>
  std::vector<T> download(std::size_t count) const {
    std::vector<T> out(count);
    download_to(out.data(), count * sizeof(T));
    return out;
  }
  void download_to(void* dst, std::size_t bytes) const;
  // Fills with 0xFF bytes (NaN in bf16, fp16 and fp32, so an unwritten element fails); done on
  // return, so work on any stream sees it.
  void poison() { fill(0xFF); }
  // Fills every byte with `byte`, done on return (where 0xFF is itself an expected value, a
  // second run poisoned otherwise catches what a kernel left unwritten).
  void fill(unsigned char byte);

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// An MX operand [rows, K] in host memory: e4m3 bytes and e8m0 scales, row-major.
struct MxOperand {
  std::int64_t rows = 0, k = 0;
  std::vector<std::uint8_t> data;
  std::vector<std::uint8_t> scales;
};

// Small integers in [-4, 4] (exact e4m3 codes) and scales 2^-1..2^1, sparse: every partial sum of
// a product of two such operands with K <= 4096 is exact in fp32, so a correct kernel matches
// the fp64 reference bit for bit.
MxOperand exact_operand(std::int64_t rows, std::int64_t k, std::mt19937_64& rng);

// Random finite e4m3 codes with scales spread over 2^-8..2^8.
MxOperand random_operand(std::int64_t rows, std::int64_t k, std::mt19937_64& rng);

// Views of a host operand uploaded to the device (buffers kept alive by the caller).
struct DeviceMx {
  DeviceBuffer data, scales;
  TensorView data_view() const;
  TensorView scales_view() const;
  std::int64_t rows = 0, k = 0;
};
DeviceMx upload(const MxOperand& op);

// fp64 reference for a @ w^T (+ bias as fp64 values).
std::vector<double> reference(const MxOperand& a, const MxOperand& w,
                              const std::vector<double>& bias);

// sum_k |deq(a)[m,k] * deq(w)[n,k]| per output: the scale of the accumulation error.
std::vector<double> abs_product_sums(const MxOperand& a, const MxOperand& w);

// Output element i as fp64 from raw bytes of dtype.
double output_value(const std::vector<std::uint8_t>& raw, DType dtype, std::size_t i);

// fp64 value rounded once to dtype, as fp64.
double round_to(double x, DType dtype);

// Tolerance of MXFP8.md for one output: 1 ulp of the rounded reference in the output dtype plus
// the fp32 accumulation slack 2 * (K/32 + 32) * 2^-24 * sum|products| (the promotion chain has
// K/32 additions and each in-MMA sum at most 32; factor 2 for the tensor core's truncation).
double tolerance(double ref, double abs_sum, std::int64_t k, DType dtype);

}  // namespace mxlinear::test
