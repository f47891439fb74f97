#include "anchors.hpp"

#include <stdexcept>
#include <string>
#include <vector>

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

// Sets one attribute of a matmul descriptor to `value`.
template <class T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   const T& value, const char* what) {
  check(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value), what);
}

}  // namespace

std::string cublas_version() {
  int v = 0;
  if (cublasGetProperty(MAJOR_VERSION, &v) != CUBLAS_STATUS_SUCCESS) return "unknown";
  int minor = 0, patch = 0;
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  return std::to_string(v) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

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
    cudaFree(plan.a_scales);
    cudaFree(plan.b_scales);
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

// A device buffer of `count` floats equal to 1 (with room to spare: only the time matters).
float* ones(std::size_t count) {
  const std::vector<float> host(count, 1.0f);
  float* p = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&p), count * sizeof(float)), "scale buffer");
  check(cudaMemcpy(p, host.data(), count * sizeof(float), cudaMemcpyHostToDevice), "scale buffer");
  return p;
}

const Anchors::Fp8Plan& Anchors::fp8_plan(int m, int n, int k, bool block_scaled) {
  const auto key = std::make_tuple(m, n, k, block_scaled);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  Fp8Plan p;
  check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "fp8 desc");
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, transa, "fp8 transa");
  set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, transb, "fp8 transb");
  float* a_scale = unit_scale_;
  float* b_scale = unit_scale_;
  if (block_scaled) {
    const auto blocks = [](int v) { return static_cast<std::size_t>((v + 127) / 128); };
    p.a_scales = ones(2 * blocks(n) * blocks(k) + 64);
    p.b_scales = ones(2 * (blocks(m) * 128) * blocks(k) + 64);
    a_scale = p.a_scales;
    b_scale = p.b_scales;
    const cublasLtMatmulMatrixScale_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const cublasLtMatmulMatrixScale_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    set_attribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode, "fp8 a scale mode");
    set_attribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode, "fp8 b scale mode");
  }
  set_attribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale, "fp8 a scale");
  set_attribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale, "fp8 b scale");
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

void Anchors::fp8_block_gemm(const void* x, const void* w, void* out, int m, int n, int k,
                             cudaStream_t stream) {
  run_fp8(fp8_plan(m, n, k, true), x, w, out, stream);
}

void Anchors::fp8_gemm(const void* x, const void* w, void* out, int m, int n, int k,
                       cudaStream_t stream) {
  run_fp8(fp8_plan(m, n, k, false), x, w, out, stream);
}

void Anchors::run_fp8(const Fp8Plan& p, const void* x, const void* w, void* out,
                      cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasLtMatmul(lt_, p.desc, &alpha, w, p.a, x, p.b, &beta, out, p.d, out, p.d, &p.algo,
                       workspace_, kWorkspaceBytes, stream),
        "cublasLtMatmul fp8");
}

}  // namespace mxlinear::bench
