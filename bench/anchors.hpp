// The anchors every figure is compared with, timed by the benchmark itself in the same run:
// cuBLAS bf16 on bf16 weights, and cuBLASLt FP8 e4m3 with one fp32 scale per tensor.
// All operands row-major: x [m, k], w [n, k], out [m, n] bf16.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <tuple>

namespace mxlinear::bench {

// "major.minor.patch" of the cuBLAS library loaded.
std::string cublas_version();

class Anchors {
 public:
  Anchors();
  ~Anchors();
  Anchors(const Anchors&) = delete;
  Anchors& operator=(const Anchors&) = delete;

  void bf16_gemm(const void* x, const void* w, void* out, int m, int n, int k, cudaStream_t stream);
  // m must be a multiple of 16 (cuBLASLt's FP8 kernels need it; callers pad).
  void fp8_gemm(const void* x, const void* w, void* out, int m, int n, int k, cudaStream_t stream);
  // The same with DeepSeek-style fp32 scales: 128x128 blocks on the weight, 1x128 on the
  // activation (all 1.0: only the time matters). Throws where cuBLASLt has no such kernel.
  void fp8_block_gemm(const void* x, const void* w, void* out, int m, int n, int k,
                      cudaStream_t stream);

 private:
  struct Fp8Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    float* a_scales = nullptr;  // block-scaled plans own their scale buffers
    float* b_scales = nullptr;
  };
  const Fp8Plan& fp8_plan(int m, int n, int k, bool block_scaled);
  void run_fp8(const Fp8Plan& plan, const void* x, const void* w, void* out, cudaStream_t stream);

  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  float* unit_scale_ = nullptr;  // 1.0f on the device: the per-tensor scales
  std::map<std::tuple<int, int, int, bool>, Fp8Plan> plans_;
};

}  // namespace mxlinear::bench
