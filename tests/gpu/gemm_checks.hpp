// Pieces the kernel-level GEMM tests share: launch parameters over uploaded operands, the
// bit-exact and tolerance checks of MXFP8.md, and bias buffers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "device/common/gemm_params.hpp"
#include "gpu/gpu_support.hpp"
#include "support/mx_oracle.hpp"

namespace mxlinear::test {

// out = a @ w^T into `out` ([a.rows, w.rows], row stride w.rows) of dtype out_dtype, no bias.
device::GemmParams gemm_params(const DeviceMx& a, const DeviceMx& w, const DeviceBuffer& out,
                               DType out_dtype);

// Every output element equals the fp64 reference rounded once to dtype; reports up to five.
void expect_bit_exact(const std::vector<std::uint8_t>& out, const std::vector<double>& ref,
                      std::int64_t n, DType dtype);

// Every output element is within tolerance() of the fp64 reference; fp32 output of 64 or more
// elements also within a relative Frobenius error of 1e-5 (MXFP8.md).
void expect_within_tolerance(const std::vector<std::uint8_t>& out, const std::vector<double>& ref,
                             const std::vector<double>& abs_sums, std::int64_t k, DType dtype);

// A bias of exact bf16 values (multiples of 1/4) as fp32 and bf16 device buffers.
struct BiasBuffers {
  std::vector<double> values;
  DeviceBuffer f32, bf16;
};
BiasBuffers quarter_bias(std::int64_t n);

// One kernel config as the shared checks below see it: out = a @ w^T (+ bias) as raw bytes
// [a.rows, w.rows], poisoned before the launch.
using GemmRunner =
    std::function<std::vector<std::uint8_t>(const MxOperand& a, const MxOperand& w, DType out_dtype,
                                            const DeviceBuffer* bias, device::BiasType bias_type)>;

// A NaN scale of one activation block and NaN elements in two weight rows (one in the second
// 64-row tile) make exactly the outputs they feed NaN. K >= 128, a multiple of 128.
void check_nan_propagates_exactly(const GemmRunner& run, std::int64_t k, std::mt19937_64& rng);

// Exact inputs plus a bf16 or fp32 bias equal the fp64 reference bit for bit, in every output
// type, at [9, 21] and [m_large, n_large].
void check_bias_is_added(const GemmRunner& run, std::int64_t k, std::int64_t m_large,
                         std::int64_t n_large, std::mt19937_64& rng);

// Two runs on the same random inputs are bitwise equal.
void check_two_runs_equal(const GemmRunner& run, std::int64_t m, std::int64_t n, std::int64_t k,
                          std::mt19937_64& rng);

// The three checks above under one call, each with its own trace: NaN propagation at K = k_small
// (a multiple of 128), the bias at K = k_small and [m, n], determinism at [m, n, k_large].
struct ContractSizes {
  std::int64_t k_small, m, n, k_large;
};
void check_nan_bias_determinism(const GemmRunner& run, const ContractSizes& sizes,
                                std::mt19937_64& rng);

// A kernel launcher as the generic runner and the graph check see it.
using GemmLauncher = std::function<cudaError_t(const device::GemmParams& p, cudaStream_t stream)>;

// Uploads the operands, poisons the output, launches, synchronizes and returns the raw output
// [a.rows, w.rows] of dtype out_dtype.
std::vector<std::uint8_t> run_launcher(const GemmLauncher& launch, const MxOperand& a,
                                       const MxOperand& w, DType out_dtype,
                                       const DeviceBuffer* bias, device::BiasType bias_type);

struct GemmShape {
  std::int64_t m, n, k;
};

// Exact inputs on every shape, every output dtype: equal to fp64 rounded once, bit for bit.
void check_exact_on_shapes(const GemmRunner& run, std::span<const GemmShape> shapes,
                           std::mt19937_64& rng);

// Random inputs on every shape, bf16 and fp32 output: within tolerance() of fp64, whose
// accumulation slack is that of k_factor * K (1 for per-block promotion, 2 for a kernel that
// accumulates k16 steps in the tensor core).
void check_random_on_shapes(const GemmRunner& run, std::span<const GemmShape> shapes, int k_factor,
                            std::mt19937_64& rng);

// Scale bytes 0 (2^-127, an fp32 subnormal) and 254 (2^127) decode exactly: every activation
// block of an [m, 1024] activation has scale byte 0, weight rows 0 and n - 1 have 254
// everywhere; no sum mixes tiny and normal terms, so every output is exact. n >= 2.
void check_extreme_scale_bytes(const GemmRunner& run, std::int64_t m, std::int64_t n,
                               std::mt19937_64& rng);

// A layer run `runs` times: every run equals the first bit for bit and the first is within
// tolerance (k_factor as in check_random_on_shapes). Seed-sized layers expose ring races that
// small shapes run too briefly to show.
void check_stable_across_runs(const GemmRunner& run, const GemmShape& shape, int runs, int k_factor,
                              std::mt19937_64& rng);

// Three back-to-back launches captured into a CUDA graph (programmatic edges between them)
// replay to the eager result, twice.
void check_graph_replay(const GemmLauncher& launch, const GemmShape& shape, std::mt19937_64& rng);

// Call `call` of a chain, launched on `stream` (nullptr: one call at a time on the legacy one).
using ChainCall = std::function<cudaError_t(int call, cudaStream_t stream)>;

// A chain of `calls` calls as a layer stack runs them, writing out[0] and out[1] in turn (call i
// adds call i - 1's output as its bias and writes the buffer that call i - 1 read): run one call
// at a time, then captured into a CUDA graph and replayed three times, both buffers poisoned
// before each run. The kernels let the next one launch before they end, so a read before the
// wait on the kernel before, or a write into a buffer still being read, changes the last
// output; every replay's must equal the eager one bit for bit.
void check_chain_graph_replay(const ChainCall& call, int calls, DeviceBuffer (&out)[2]);

// A kernel that quantizes a bf16 or fp16 activation itself (GemmParams::x) gives the bits of
// the quantize kernel followed by the same kernel on its output: random activations with a NaN
// and an Inf block, both 16-bit types, dense and strided rows, fp32 output on every shape.
// `finite`: activations without NaN, Inf or subnormal values (every block's scale in 2^-30 ..
// 2^10 but a block of zeros', 2^-127), and no output may be Inf or NaN.
void check_quantizing_inside(const GemmLauncher& launch, std::span<const GemmShape> shapes,
                             std::mt19937_64& rng, bool finite = false);

// --- W8A16 (GemmParams::x_as_is) -----------------------------------------------------------------

// A bf16 or fp16 activation used as it is, as its 16-bit codes: [rows, k] with row stride
// ld_x >= k. The codes past k in each row are NaN, so a kernel reading past K fails.
struct Activation16 {
  std::int64_t rows = 0, k = 0, ld_x = 0;
  DType dtype = DType::kBF16;
  std::vector<std::uint16_t> codes;  // rows * ld_x
};

// Sparse values i * 2^e, |i| <= 7, e in -2..1, a quarter of them non-zero. With exact_operand
// weights (|q| <= 4, scales 2^-1..2^1) and K <= 4096, every block sum is a multiple of 2^-2 below
// 2^11 and every promoted partial sum, in any order, a multiple of 2^-3 below 2^19: all exact in
// fp32, so a correct kernel equals the fp64 reference bit for bit.
Activation16 exact_activation16(std::int64_t rows, std::int64_t k, std::int64_t ld_x, DType dtype,
                                std::mt19937_64& rng);

// bf16 rows (raw codes, `ld_x` apart) quantized by the contract's model (RCEIL): the W8A8
// activation a correct quantizer gives them, for fp64 references.
MxOperand quantized_bf16_rows(const std::uint16_t* codes, std::int64_t rows, std::int64_t k,
                              std::int64_t ld_x);

// Normal(0, 1) samples rounded to dtype (all finite).
Activation16 random_activation16_as_is(std::int64_t rows, std::int64_t k, std::int64_t ld_x,
                                       DType dtype, std::mt19937_64& rng);

// The oracle's view of x as it is times w.
W8A16Operands w8a16_operands(const Activation16& x, const MxOperand& w);

// Uploads x at element offset x_offset of its buffer (1 leaves the base only 2-byte aligned;
// the elements before it are NaN) and w, poisons the output, launches out = x @ deq(w)^T
// (x_as_is, p.a unset) and returns the raw output [x.rows, w.rows] of dtype out_dtype.
std::vector<std::uint8_t> run_w8a16(const GemmLauncher& launch, const Activation16& x,
                                    std::int64_t x_offset, const MxOperand& w, DType out_dtype,
                                    const DeviceBuffer* bias = nullptr,
                                    device::BiasType bias_type = device::BiasType::kNone);

// The activation types W8A16 takes.
inline constexpr DType kActivation16Types[] = {DType::kBF16, DType::kF16};

// Where x's rows lie: `extra_stride` elements past K apart, starting `offset` elements into
// their buffer (the padding and the elements before are NaN: run_w8a16).
struct XLayout {
  std::int64_t extra_stride = 0, offset = 0;
};

// The W8A16 checks below run each 16-bit type of `x_dtypes` (both by default).

// Exact inputs (exact_activation16, exact_operand) give the fp64 reference bit for bit on every
// shape, x layout, 16-bit type and output type listed: the kernel reads x's [M, K] view and
// nothing else.
void check_w8a16_layouts(const GemmLauncher& launch, std::span<const GemmShape> shapes,
                         std::span<const XLayout> layouts, std::span<const DType> out_dtypes,
                         std::mt19937_64& rng,
                         std::span<const DType> x_dtypes = kActivation16Types);

// The same with x's rows packed (XLayout{}) and every output type.
void check_w8a16_exact(const GemmLauncher& launch, std::span<const GemmShape> shapes,
                       std::mt19937_64& rng, std::span<const DType> x_dtypes = kActivation16Types);

// Random inputs stay within the fp32 accumulation bound on every shape, both 16-bit types, bf16
// and fp32 output.
void check_w8a16_random(const GemmLauncher& launch, std::span<const GemmShape> shapes,
                        std::mt19937_64& rng, std::span<const DType> x_dtypes = kActivation16Types);

// A NaN weight scale, a NaN weight code and a NaN in x make exactly the outputs they feed NaN
// (fp32 output, M = 20, N = 70, K = 256 and 544, both 16-bit types).
void check_w8a16_nan_propagation(const GemmLauncher& launch, std::mt19937_64& rng,
                                 std::span<const DType> x_dtypes = kActivation16Types);

// A bf16 and an fp32 bias are added exactly (exact inputs, every output type, K = 544) at
// 9 x 21 and at m_large x 257.
void check_w8a16_bias(const GemmLauncher& launch, std::int64_t m_large, std::mt19937_64& rng,
                      std::span<const DType> x_dtypes = kActivation16Types);

// MXFP8.md's fp32 accumulation bound for one output of a K-long sum: gamma_{K+1} * abs_sum
// (u = 2^-24), plus the fp64 reference's own summation error (gamma_K, u = 2^-53), plus half an
// ulp of the output type at the result's binade (half the smallest subnormal below it).
// Products are exact; the per-block fma chain adds K/32 roundings of at most u times the sum of
// |products|, the K-warp sums a few more, and the tensor core's in-mma sums (truncating, a few
// steps per block) about 8u of each block's sum of |products|: inside gamma_{K+1} for K >= 32.
double fp32_accumulation_bound(double ref, double abs_sum, std::int64_t k, DType dtype);

// Every output element is within fp32_accumulation_bound() of the fp64 reference; reports up to
// five, and the largest |error| / bound.
void expect_within_accumulation_bound(const std::vector<std::uint8_t>& out,
                                      const std::vector<double>& ref,
                                      const std::vector<double>& abs_sums, std::int64_t k,
                                      DType dtype);

}  // namespace mxlinear::test
