// The anchors every figure is compared with, called from the benchmark itself (TARGETS.md):
// cuBLAS bf16 on bf16 weights, and cuBLASLt FP8 e4m3 with one fp32 scale per tensor.
// All operands row-major: x [m, k], w [n, k], out [m, n] bf16.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <map>
#include <tuple>

namespace mxlinear::bench {

class Anchors {
 public:
  Anchors();
  ~Anchors();
  Anchors(const Anchors&) = delete;
  Anchors& operator=(const Anchors&) = delete;

  void bf16_gemm(const void* x, const void* w, void* out, int m, int n, int k, cudaStream_t stream);
  // m must be a multiple of 16 (cuBLASLt's FP8 kernels need it; callers pad).
  void fp8_gemm(const void* x, const void* w, void* out, int m, int n, int k, cudaStream_t stream);

 private:
  struct Fp8Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Fp8Plan& fp8_plan(int m, int n, int k);

  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  float* unit_scale_ = nullptr;  // 1.0f on the device: the per-tensor scales
  std::map<std::tuple<int, int, int>, Fp8Plan> plans_;
};

}  // namespace mxlinear::bench
