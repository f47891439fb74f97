// The public linear API on the GPU: both entry points, shapes, workspace, graphs, errors.
#include <cuda_bf16.h>
#include <gmock/gmock.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "gpu/gemm_checks.hpp"
#include "gpu/gpu_support.hpp"
#include "host/registry/registry.hpp"
#include "mxlinear/error.hpp"
#include "mxlinear/quantize.hpp"
#include "support/mx_oracle.hpp"
#include "support/random.hpp"

namespace mxlinear::test {
namespace {

std::vector<std::uint16_t> random_bf16(std::size_t count, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> v(count);
  for (auto& x : v) {
    const __nv_bfloat16 b = __float2bfloat16_rn(normal(rng));
    std::memcpy(&x, &b, 2);
  }
  return v;
}

struct Layer {
  std::int64_t b, s, n, k;
  std::vector<std::uint16_t> x;  // [b, s, k] bf16
  MxOperand w;
  DeviceBuffer dx;
  DeviceMx dw;
  MxWeight weight() const { return {dw.data_view(), dw.scales_view()}; }
  TensorView x_view() const {
    TensorView v = TensorView::contiguous(dx.get(), {b, s, k}, DType::kBF16, Location::kDevice);
    return v;
  }
};

Layer make_layer(std::int64_t b, std::int64_t s, std::int64_t n, std::int64_t k,
                 std::mt19937_64& rng) {
  Layer l{
      b,  s, n, k, random_bf16(static_cast<std::size_t>(b * s * k), rng), random_operand(n, k, rng),
      {}, {}};
  l.dx = DeviceBuffer::from(l.x);
  l.dw = upload(l.w);
  return l;
}

// The layer's activation quantized by the contract's model (RCEIL, the default rule).
MxOperand quantized_activation(const Layer& l) {
  return quantized_bf16_rows(l.x.data(), l.b * l.s, l.k, l.k);
}

// A bf16 output [b*s, n] of the layer against fp64 within the tolerance of MXFP8.md, with the
// accumulation slack of 2K (the prefill kernel's pairwise chunk sums; docs/MXFP8.md), computed
// from each element's own sum of |products|: the weights' scales span 2^-8..2^8, so no single
// magnitude guess bounds them all.
void expect_close_to_fp64(const std::vector<std::uint16_t>& got, const Layer& l) {
  const MxOperand a = quantized_activation(l);
  std::vector<std::uint8_t> raw(got.size() * 2);
  std::memcpy(raw.data(), got.data(), raw.size());
  expect_within_tolerance(raw, reference(a, l.w, {}), abs_product_sums(a, l.w), 2 * l.k,
                          DType::kBF16);
}

TEST(LinearGpu, Bf16ActivationOf3DShapeMatchesCpuReference) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  Layer l = make_layer(2, 50, 72, 544, rng);
  DeviceBuffer out(static_cast<std::size_t>(l.b * l.s * l.n) * 2);
  out.poison();
  linear(l.x_view(), l.weight(), std::nullopt,
         TensorView::contiguous(out.get(), {l.b, l.s, l.n}, DType::kBF16, Location::kDevice),
         nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_close_to_fp64(out.download<std::uint16_t>(static_cast<std::size_t>(l.b * l.s * l.n)), l);
}

TEST(LinearGpu, PrequantizedActivationGivesTheSameBitsAsTheBf16Path) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  Layer l = make_layer(1, 100, 130, 96, rng);
  const std::int64_t m = l.b * l.s;
  DeviceBuffer q(static_cast<std::size_t>(m * l.k));
  DeviceBuffer s(static_cast<std::size_t>(m * l.k / 32));
  const TensorView qv = TensorView::contiguous(q.get(), {m, l.k}, DType::kE4M3, Location::kDevice);
  const TensorView sv =
      TensorView::contiguous(s.get(), {m, l.k / 32}, DType::kE8M0, Location::kDevice);
  quantize(TensorView::contiguous(l.dx.get(), {m, l.k}, DType::kBF16, Location::kDevice), qv, sv,
           nullptr);
  DeviceBuffer out1(static_cast<std::size_t>(m * l.n) * 4),
      out2(static_cast<std::size_t>(m * l.n) * 4);
  out1.poison();
  out2.poison();
  const TensorView o1 =
      TensorView::contiguous(out1.get(), {m, l.n}, DType::kF32, Location::kDevice);
  const TensorView o2 =
      TensorView::contiguous(out2.get(), {m, l.n}, DType::kF32, Location::kDevice);
  linear(QuantizedActivation{qv, sv, DType::kBF16}, l.weight(), std::nullopt, o1, nullptr);
  linear(TensorView::contiguous(l.dx.get(), {m, l.k}, DType::kBF16, Location::kDevice), l.weight(),
         std::nullopt, o2, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto a = out1.download<std::uint32_t>(static_cast<std::size_t>(m * l.n));
  const auto b = out2.download<std::uint32_t>(static_cast<std::size_t>(m * l.n));
  EXPECT_EQ(a, b);
  for (std::uint32_t bits : a) ASSERT_NE(bits, 0xFFFFFFFFu) << "an output was not written";
}

TEST(LinearGpu, OutputRowStrideLeavesTheGapUntouched) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  Layer l = make_layer(1, 7, 33, 64, rng);
  const std::int64_t ld = 40;
  DeviceBuffer out(static_cast<std::size_t>(7 * ld) * 2);
  out.poison();
  linear(l.x_view(), l.weight(), std::nullopt,
         TensorView::matrix(out.get(), 7, 33, ld, DType::kBF16, Location::kDevice), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto raw = out.download<std::uint16_t>(static_cast<std::size_t>(7 * ld));
  std::vector<std::uint16_t> packed;
  for (std::int64_t r = 0; r < 7; ++r) {
    for (std::int64_t c = 0; c < ld; ++c) {
      const std::uint16_t v = raw[static_cast<std::size_t>(r * ld + c)];
      if (c < 33) {
        packed.push_back(v);
      } else {
        EXPECT_EQ(v, 0xFFFF) << "gap element [" << r << ", " << c << "] was written";
      }
    }
  }
  expect_close_to_fp64(packed, l);
}

TEST(LinearGpu, InfInTheActivationMakesItsRowNaN) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  Layer l = make_layer(1, 5, 16, 64, rng);
  l.x[2 * 64 + 40] = 0x7F80;  // +Inf in row 2
  l.dx = DeviceBuffer::from(l.x);
  DeviceBuffer out(5 * 16 * 4);
  out.poison();
  linear(l.x_view(), l.weight(), std::nullopt,
         TensorView::contiguous(out.get(), {5, 16}, DType::kF32, Location::kDevice), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto v = out.download<float>(80);
  for (int i = 0; i < 80; ++i)
    EXPECT_EQ(std::isnan(v[static_cast<std::size_t>(i)]), i / 16 == 2) << i;
}

TEST(LinearGpu, ZeroRowsIsANoOp) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  Layer l = make_layer(1, 1, 16, 64, rng);
  DeviceBuffer out(64);
  out.poison();
  linear(TensorView::contiguous(l.dx.get(), {0, 64}, DType::kBF16, Location::kDevice), l.weight(),
         std::nullopt, TensorView::contiguous(out.get(), {0, 16}, DType::kBF16, Location::kDevice),
         nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (std::uint8_t b : out.download<std::uint8_t>(64)) EXPECT_EQ(b, 0xFF);
}

TEST(LinearGpu, GraphReplayMatchesEagerWithACallerWorkspace) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  for (std::int64_t m : {1, 100, 1000}) {
    Layer l = make_layer(1, m, 257, 544, rng);
    DeviceBuffer ws(linear_workspace_bytes(m, l.k));
    DeviceBuffer eager(static_cast<std::size_t>(m * l.n) * 2),
        graphed(static_cast<std::size_t>(m * l.n) * 2);
    eager.poison();
    graphed.poison();
    cudaStream_t stream;
    MXL_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const Workspace w{ws.get(), ws.size()};
    linear(l.x_view(), l.weight(), std::nullopt,
           TensorView::contiguous(eager.get(), {m, l.n}, DType::kBF16, Location::kDevice), stream,
           w);
    cudaGraph_t graph;
    MXL_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    linear(l.x_view(), l.weight(), std::nullopt,
           TensorView::contiguous(graphed.get(), {m, l.n}, DType::kBF16, Location::kDevice), stream,
           w);
    MXL_CUDA_OK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec;
    MXL_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    MXL_CUDA_OK(cudaGraphLaunch(exec, stream));
    MXL_CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_EQ(eager.download<std::uint16_t>(static_cast<std::size_t>(m * l.n)),
              graphed.download<std::uint16_t>(static_cast<std::size_t>(m * l.n)))
        << "M=" << m;
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

// Three seed-shaped layers chained on one stream, each reading the previous one's output, one
// workspace shared by all. Every kernel is a programmatic dependent launch that lets the next
// one start early, so only the griddepcontrol.wait chain orders a layer's reads after the
// previous layer's writes, and a quantize pass's workspace writes after the previous GEMM's
// reads. Run back to back (eagerly, three times, and as a replayed graph) the chain must give
// the bits it gives with the stream synchronized after every call. Intermediate outputs are
// poisoned with NaN first, so a layer that reads too early shows (a quantize kernel without its
// wait failed every round on the H200).
TEST(LinearGpu, ChainedLayersMatchTheSameLayersRunOneAtATime) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  struct Weights {
    std::int64_t n, k;
    MxOperand host;
    DeviceMx device;
    MxWeight view() const { return {device.data_view(), device.scales_view()}; }
  };
  std::vector<Weights> layers;
  for (auto [n, k] :
       {std::pair<std::int64_t, std::int64_t>{6144, 2048}, {6144, 6144}, {2560, 6144}}) {
    Weights w{n, k, random_operand(n, k, rng), {}};
    w.device = upload(w.host);
    layers.push_back(std::move(w));
  }
  // (ASSERT_* cannot return from the lambdas below; an exception fails the test as well.)
  auto cuda_ok = [](cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
  };
  cudaStream_t stream;
  MXL_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (std::int64_t m : {1, 32, 128, 512}) {
    SCOPED_TRACE("M=" + std::to_string(m));
    const DeviceBuffer x = DeviceBuffer::from(random_bf16(static_cast<std::size_t>(m * 2048), rng));
    std::array<DeviceBuffer, 3> out;
    for (int i = 0; i < 3; ++i)
      out[i] = DeviceBuffer(static_cast<std::size_t>(m * layers[i].n) * 2);
    DeviceBuffer q(static_cast<std::size_t>(m * 6144)), s(static_cast<std::size_t>(m * 6144 / 32));
    DeviceBuffer ws(linear_workspace_bytes(m, 6144));
    const Workspace w{ws.get(), ws.size()};
    auto bf16 = [&](const void* p, std::int64_t cols) {
      return TensorView::contiguous(const_cast<void*>(p), {m, cols}, DType::kBF16,
                                    Location::kDevice);
    };
    const TensorView qv =
        TensorView::contiguous(q.get(), {m, 6144}, DType::kE4M3, Location::kDevice);
    const TensorView sv =
        TensorView::contiguous(s.get(), {m, 6144 / 32}, DType::kE8M0, Location::kDevice);
    // Layer 1 and 3 through the bf16 entry point, layer 2 through the quantized one.
    auto run_chain = [&](bool synchronize_each) {
      for (auto& o : out) cuda_ok(cudaMemsetAsync(o.get(), 0xFF, o.size(), stream), "poison");
      cuda_ok(cudaMemsetAsync(q.get(), 0xFF, q.size(), stream), "poison");
      auto step = [&] {
        if (synchronize_each) cuda_ok(cudaStreamSynchronize(stream), "synchronize");
      };
      linear(bf16(x.get(), 2048), layers[0].view(), std::nullopt, bf16(out[0].get(), 6144), stream,
             w);
      step();
      quantize(bf16(out[0].get(), 6144), qv, sv, stream);
      step();
      linear(QuantizedActivation{qv, sv, DType::kBF16}, layers[1].view(), std::nullopt,
             bf16(out[1].get(), 6144), stream, w);
      step();
      linear(bf16(out[1].get(), 6144), layers[2].view(), std::nullopt, bf16(out[2].get(), 2560),
             stream, w);
      step();
    };
    auto outputs = [&] {
      cuda_ok(cudaStreamSynchronize(stream), "synchronize");
      std::array<std::vector<std::uint16_t>, 3> got;
      for (int i = 0; i < 3; ++i) {
        got[i] = out[i].download<std::uint16_t>(static_cast<std::size_t>(m * layers[i].n));
      }
      return got;
    };
    run_chain(true);
    const auto expected = outputs();
    // The one-at-a-time answer itself must be a real one: finite, so NaN poison read too early
    // cannot agree with it.
    for (int i = 0; i < 3; ++i) {
      const auto finite = std::count_if(expected[i].begin(), expected[i].end(),
                                        [](std::uint16_t b) { return (b & 0x7F80) != 0x7F80; });
      ASSERT_EQ(finite, static_cast<std::ptrdiff_t>(expected[i].size())) << "layer " << i + 1;
    }
    for (int round = 0; round < 3; ++round) {
      run_chain(false);
      EXPECT_EQ(outputs(), expected) << "eager round " << round;
    }
    cudaGraph_t graph;
    MXL_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    run_chain(false);
    MXL_CUDA_OK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec;
    MXL_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 2; ++replay) {
      MXL_CUDA_OK(cudaGraphLaunch(exec, stream));
      EXPECT_EQ(outputs(), expected) << "graph replay " << replay;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(stream);
}

// Seed shapes on the GPU the shipped table was tuned on: linear() hands each M to a tuned kernel
// (the one its row names), through both entry points, and the answer matches the CPU
// reference; the two entry points agree bit for bit (the bf16 one quantizes, and for the
// prefill kernel dequantizes, in one pass; the other runs the kernel's own pre-pass).
struct TunedCase {
  std::int64_t m, n, k;
};

void PrintTo(const TunedCase& c, std::ostream* os) { *os << c.m << " x " << c.n << " x " << c.k; }

// Runs `c` through both entry points: they must agree bit for bit and match fp64.
void expect_both_entry_points_match_fp64(const TunedCase& c) {
  auto rng = make_rng();
  Layer l = make_layer(1, c.m, c.n, c.k, rng);
  DeviceBuffer q(static_cast<std::size_t>(c.m * c.k));
  DeviceBuffer s(static_cast<std::size_t>(c.m * c.k / 32));
  const TensorView qv =
      TensorView::contiguous(q.get(), {c.m, c.k}, DType::kE4M3, Location::kDevice);
  const TensorView sv =
      TensorView::contiguous(s.get(), {c.m, c.k / 32}, DType::kE8M0, Location::kDevice);
  quantize(TensorView::contiguous(l.dx.get(), {c.m, c.k}, DType::kBF16, Location::kDevice), qv, sv,
           nullptr);
  const auto count = static_cast<std::size_t>(c.m * c.n);
  DeviceBuffer from_bf16(count * 2), from_quantized(count * 2);
  from_bf16.poison();
  from_quantized.poison();
  linear(l.x_view(), l.weight(), std::nullopt,
         TensorView::contiguous(from_bf16.get(), {1, c.m, c.n}, DType::kBF16, Location::kDevice),
         nullptr);
  linear(QuantizedActivation{qv, sv, DType::kBF16}, l.weight(), std::nullopt,
         TensorView::contiguous(from_quantized.get(), {c.m, c.n}, DType::kBF16, Location::kDevice),
         nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = from_bf16.download<std::uint16_t>(count);
  EXPECT_EQ(got, from_quantized.download<std::uint16_t>(count));
  expect_close_to_fp64(got, l);
}

std::string case_name(const ::testing::TestParamInfo<TunedCase>& param) {
  // (a stream, not operator+: GCC 12 warns falsely on the latter)
  std::ostringstream name;
  name << "M" << param.param.m << "_N" << param.param.n << "_K" << param.param.k;
  return name.str();
}

// A case's dispatch on this GPU, through the shipped rows; skips where they are not for it.
class LinearGpuShippedDispatch : public ::testing::TestWithParam<TunedCase> {
 protected:
  void SetUp() override {
    MXL_REQUIRE_GPU();
    const DeviceDescription device = DeviceDescription::current();
    if (device.arch != "sm_90a" || device.sms != 132) {
      GTEST_SKIP() << "the shipped rows are for sm_90a with 132 SMs; this GPU is "
                   << device.to_string();
    }
    LayerDescription desc;
    desc.n = GetParam().n;
    desc.k = GetParam().k;
    desc.out_dtype = DType::kBF16;
    const Registry& registry = Registry::global();
    dispatch_ = registry.dispatch(registry.select(desc, device), device, GetParam().m);
    ASSERT_NE(dispatch_.kernel, nullptr);
  }
  Dispatch dispatch_;
};

class LinearGpuTunedKernel : public LinearGpuShippedDispatch {};

TEST_P(LinearGpuTunedKernel, ServesTheSeedShapeThroughBothEntryPoints) {
  const Dispatch& d = dispatch_;
  // Which tuned kernel is the table's business (pinned by the CPU test of the shipped table);
  // here it must be one of them, and right.
  EXPECT_TRUE(d.kernel->needs_tuned_rows()) << d.kernel->name() << "/" << d.config;
  SCOPED_TRACE(std::string(d.kernel->name()) + "/" + d.config);
  expect_both_entry_points_match_fp64(GetParam());
}

INSTANTIATE_TEST_SUITE_P(SeedShapes, LinearGpuTunedKernel,
                         ::testing::Values(TunedCase{1, 6144, 768}, TunedCase{2, 2560, 6144},
                                           TunedCase{8, 1536, 6144}, TunedCase{32, 6144, 768},
                                           TunedCase{128, 6144, 768}, TunedCase{512, 6144, 768},
                                           TunedCase{700, 2560, 6144}),
                         case_name);

// Shapes with no rows of their own take the cost model's choice, which must then be right on a
// shape nobody tuned for (N not a multiple of any tile, long K, a part last chunk).
class LinearGpuUntunedShape : public LinearGpuShippedDispatch {};

TEST_P(LinearGpuUntunedShape, TakesTheCostModelsTensorCoreConfigAndMatchesFp64) {
  const Dispatch& d = dispatch_;
  EXPECT_NE(d.kernel->name(), "generic") << d.config;
  EXPECT_THAT(d.why, ::testing::HasSubstr("cost model"));
  SCOPED_TRACE(std::string(d.kernel->name()) + "/" + d.config + " (" + d.why + ")");
  expect_both_entry_points_match_fp64(GetParam());
}

INSTANTIATE_TEST_SUITE_P(NearSeedShapes, LinearGpuUntunedShape,
                         ::testing::Values(TunedCase{1, 3000, 4096}, TunedCase{5, 3000, 4096},
                                           TunedCase{40, 3000, 4096}, TunedCase{300, 1001, 2048},
                                           TunedCase{1100, 5000, 1024},
                                           // K % 128 != 0: a part chunk, unaligned scale rows
                                           TunedCase{5, 3000, 4064}, TunedCase{40, 3000, 4064},
                                           TunedCase{300, 1001, 2080},
                                           // long K, the down projection of 8B-class models
                                           TunedCase{160, 2048, 14336}, TunedCase{7, 4096, 14336},
                                           TunedCase{64, 2880, 2880}),
                         case_name);

// linear_with runs a given kernel/config through the bf16 entry point's path (the tuner times
// configs this way): every config of every GPU kernel that takes the layer, including the ones
// that quantize the activation themselves, must match fp64 like linear() does.
TEST(LinearGpu, LinearWithEveryConfigOfEveryGpuKernelMatchesFp64) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  Layer l = make_layer(1, 9, 80, 1024, rng);  // two 8-token tiles, K of 8 chunks of 128
  const std::int64_t m = l.b * l.s;
  LayerDescription layer;
  layer.n = l.n;
  layer.k = l.k;
  const DeviceDescription device = DeviceDescription::current();
  for (const auto& kernel : Registry::global().kernels()) {
    if (kernel->name() == "reference" || !kernel->is_supported(device).ok() ||
        !kernel->can_implement(layer).ok()) {
      continue;
    }
    int ran = 0;
    for (const std::string& config : kernel->configs()) {
      SCOPED_TRACE(std::string(kernel->name()) + "/" + config);
      DeviceBuffer out(static_cast<std::size_t>(m * l.n) * 2);
      out.poison();
      try {
        linear_with(
            *kernel, config, l.x_view(), l.weight(), std::nullopt,
            TensorView::contiguous(out.get(), {l.b, l.s, l.n}, DType::kBF16, Location::kDevice),
            nullptr);
      } catch (const Error& e) {
        // A config this shape cannot take (more K splits than chunks, too much shared memory).
        EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
        continue;
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      expect_close_to_fp64(out.download<std::uint16_t>(static_cast<std::size_t>(m * l.n)), l);
      ++ran;
    }
    EXPECT_GT(ran, 0) << kernel->name() << " ran no config";
  }
}

// The stream-K config's flags live in the caller's workspace: the pass before the GEMM must zero
// them every call (the quantize pass on the bf16 path, the kernel's own pre-pass on the quantized
// one), so a workspace of any bytes (here 0xFF, every flag already "published") and replays of a
// captured graph give the eager answer bit for bit on both paths. 16 tiles of 12 chunks on up to
// 132 CTAs cut every tile into several runs, so most owners add more than one partial.
TEST(LinearGpu, StreamKThroughAPoisonedWorkspaceMatchesEagerAndGraphReplays) {
  MXL_REQUIRE_GPU();
  const Kernel* prefill = nullptr;
  for (const auto& kernel : Registry::global().kernels()) {
    if (kernel->name() == "prefill") prefill = kernel.get();
  }
  ASSERT_NE(prefill, nullptr);
  if (!prefill->is_supported(DeviceDescription::current()).ok()) {
    GTEST_SKIP() << "the prefill kernel does not run on this GPU";
  }
  const std::string config = "w128_t256_st4_bk64_overlap_streamk";
  auto rng = make_rng();
  Layer l = make_layer(1, 300, 1000, 1536, rng);
  const std::int64_t m = l.b * l.s;
  DeviceBuffer ws(linear_workspace_bytes(m, l.k));
  const Workspace w{ws.get(), ws.size()};
  DeviceBuffer eager(static_cast<std::size_t>(m * l.n) * 2),
      graphed(static_cast<std::size_t>(m * l.n) * 2);
  cudaStream_t stream;
  MXL_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto out_view = [&](DeviceBuffer& b) {
    return TensorView::contiguous(b.get(), {l.b, l.s, l.n}, DType::kBF16, Location::kDevice);
  };
  eager.poison();
  MXL_CUDA_OK(cudaMemsetAsync(ws.get(), 0xFF, ws.size(), stream));
  linear_with(*prefill, config, l.x_view(), l.weight(), std::nullopt, out_view(eager), stream, w);
  MXL_CUDA_OK(cudaStreamSynchronize(stream));
  const auto expected = eager.download<std::uint16_t>(static_cast<std::size_t>(m * l.n));
  expect_close_to_fp64(expected, l);
  // Replays a captured graph, the workspace poisoned with 0xFF before each launch.
  auto expect_replays_match_eager = [&](cudaGraph_t graph, int replays, const char* path) {
    cudaGraphExec_t exec;
    MXL_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < replays; ++replay) {
      graphed.poison();
      MXL_CUDA_OK(cudaMemsetAsync(ws.get(), 0xFF, ws.size(), stream));
      MXL_CUDA_OK(cudaGraphLaunch(exec, stream));
      MXL_CUDA_OK(cudaStreamSynchronize(stream));
      EXPECT_EQ(graphed.download<std::uint16_t>(static_cast<std::size_t>(m * l.n)), expected)
          << path << ", graph replay " << replay;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  };
  cudaGraph_t graph;
  MXL_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  linear_with(*prefill, config, l.x_view(), l.weight(), std::nullopt, out_view(graphed), stream, w);
  MXL_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  expect_replays_match_eager(graph, 3, "bf16 path");
  // The quantized entry's path: the kernel runs its own pre-pass, which must zero the flags.
  DeviceBuffer q(static_cast<std::size_t>(m * l.k)), s(static_cast<std::size_t>(m * l.k / 32));
  const TensorView qv = TensorView::contiguous(q.get(), {m, l.k}, DType::kE4M3, Location::kDevice);
  const TensorView sv =
      TensorView::contiguous(s.get(), {m, l.k / 32}, DType::kE8M0, Location::kDevice);
  quantize(TensorView::contiguous(l.dx.get(), {m, l.k}, DType::kBF16, Location::kDevice), qv, sv,
           stream);
  MXL_CUDA_OK(cudaStreamSynchronize(stream));
  const KernelCall call{
      QuantizedActivation{qv, sv, DType::kBF16},
      l.weight(),
      std::nullopt,
      TensorView::contiguous(graphed.get(), {m, l.n}, DType::kBF16, Location::kDevice),
      LinearShape{m, l.n, l.k},
      stream,
      w};
  MXL_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  prefill->run(call, config);
  MXL_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  expect_replays_match_eager(graph, 2, "quantized path");
  cudaStreamDestroy(stream);
}

// e4m3 rows that are not 16-byte aligned are beyond the generic kernel (cp.async); the registry
// hands such a layer to the CPU reference kernel, which must still give the right answer.
TEST(LinearGpu, MisalignedWeightRowsFallBackToTheReferenceKernel) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  Layer l = make_layer(1, 6, 24, 96, rng);
  // Re-lay the weight with rows 100 bytes apart: 4-byte aligned only.
  const std::int64_t ld = 100;
  std::vector<std::uint8_t> padded(static_cast<std::size_t>(l.n * ld), 0);
  for (std::int64_t r = 0; r < l.n; ++r) {
    std::copy_n(l.w.data.begin() + r * l.k, l.k, padded.begin() + r * ld);
  }
  DeviceBuffer wd = DeviceBuffer::from(padded);
  const MxWeight w{TensorView::matrix(wd.get(), l.n, l.k, ld, DType::kE4M3, Location::kDevice),
                   l.dw.scales_view()};
  DeviceBuffer out(static_cast<std::size_t>(6 * 24) * 2);
  out.poison();
  linear(l.x_view(), w, std::nullopt,
         TensorView::contiguous(out.get(), {1, 6, 24}, DType::kBF16, Location::kDevice), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_close_to_fp64(out.download<std::uint16_t>(6 * 24), l);
}

TEST(LinearGpu, BadInputIsRejectedBeforeAnyLaunch) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  Layer l = make_layer(1, 4, 16, 64, rng);
  DeviceBuffer out(4 * 16 * 2);
  out.poison();
  const TensorView o = TensorView::contiguous(out.get(), {4, 16}, DType::kBF16, Location::kDevice);
  using ::testing::HasSubstr;
  // Weight scales of the wrong shape.
  MxWeight bad_scales = l.weight();
  bad_scales.scales =
      TensorView::contiguous(l.dw.scales.get(), {16, 3}, DType::kE8M0, Location::kDevice);
  try {
    linear(l.x_view(), bad_scales, std::nullopt, o, nullptr);
    ADD_FAILURE() << "wrong weight scales were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "weight.scales");
    EXPECT_THAT(e.what(), HasSubstr("expected [16, 2]"));
  }
  // A workspace that is too small.
  DeviceBuffer small(64);
  try {
    linear(l.x_view(), l.weight(), std::nullopt, o, nullptr, Workspace{small.get(), small.size()});
    ADD_FAILURE() << "a small workspace was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "workspace");
    EXPECT_THAT(e.what(), HasSubstr("expected at least"));
  }
  // Host memory where device memory is expected.
  std::vector<std::uint16_t> host(4 * 16);
  try {
    linear(l.x_view(), l.weight(), std::nullopt,
           TensorView::contiguous(host.data(), {4, 16}, DType::kBF16, Location::kHost), nullptr);
    ADD_FAILURE() << "a host output was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "out");
    EXPECT_THAT(e.what(), HasSubstr("expected device memory"));
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (std::uint8_t b : out.download<std::uint8_t>(out.size())) ASSERT_EQ(b, 0xFF);
}

}  // namespace
}  // namespace mxlinear::test
