#include "anchors.hpp"

#include <stdexcept>
#include <string>

namespace mxlinear::bench {
namespace {

constexpr std::size_t kWorkspaceBytes = 32u << 20;

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(s));
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

Anchors::Anchors() {
  check(cublasCreate(&cublas_), "cublasCreate");
  check(cublasLtCreate(&lt_), "cublasLtCreate");
  check(cudaMalloc(&workspace_, kWorkspaceBytes), "anchor workspace");
  // A fixed workspace keeps cuBLAS from allocating inside graph capture.
  check(cublasSetWorkspace(cublas_, workspace_, kWorkspaceBytes), "cublasSetWorkspace");
  check(cudaMalloc(reinterpret_cast<void**>(&unit_scale_), sizeof(float)), "anchor scale");
  const float one = 1.0f;
  check(cudaMemcpy(unit_scale_, &one, sizeof one, cudaMemcpyHostToDevice), "anchor scale");
}

Anchors::~Anchors() {
  for (auto& [key, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.d);
    cublasLtMatmulDescDestroy(plan.desc);
  }
  cudaFree(unit_scale_);
  cudaFree(workspace_);
  cublasLtDestroy(lt_);
  cublasDestroy(cublas_);
}

void Anchors::bf16_gemm(const void* x, const void* w, void* out, int m, int n, int k,
                        cudaStream_t stream) {
  // Column-major view: out^T [n, m] = w [k, n]^T * x^T [k, m].
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasSetStream(cublas_, stream), "cublasSetStream");
  check(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, CUDA_R_16BF, k, x,
                     CUDA_R_16BF, k, &beta, out, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx bf16");
}

const Anchors::Fp8Plan& Anchors::fp8_plan(int m, int n, int k) {
  const auto key = std::make_tuple(m, n, k);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  Fp8Plan p;
  check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "fp8 desc");
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa),
        "fp8 transa");
  check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb),
        "fp8 transb");
  check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &unit_scale_,
                                       sizeof unit_scale_),
        "fp8 a scale");
  check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &unit_scale_,
                                       sizeof unit_scale_),
        "fp8 b scale");
  // The TN layout FP8 needs: A = w as [k, n] column-major transposed, B = x as [k, m].
  check(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, k, n, k), "fp8 layout a");
  check(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, k, m, k), "fp8 layout b");
  check(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_16BF, n, m, n), "fp8 layout d");
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "fp8 preference");
  const std::size_t ws = kWorkspaceBytes;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws),
        "fp8 preference workspace");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  check(s, "fp8 heuristic");
  if (found == 0) throw std::runtime_error("cuBLASLt has no FP8 algorithm for this shape");
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void Anchors::fp8_gemm(const void* x, const void* w, void* out, int m, int n, int k,
                       cudaStream_t stream) {
  const Fp8Plan& p = fp8_plan(m, n, k);
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasLtMatmul(lt_, p.desc, &alpha, w, p.a, x, p.b, &beta, out, p.d, out, p.d, &p.algo,
                       workspace_, kWorkspaceBytes, stream),
        "cublasLtMatmul fp8");
}

}  // namespace mxlinear::bench
