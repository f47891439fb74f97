// The Hopper prefill GEMM and its bf16 activation pre-pass, every compiled instance, against the
// fp64 reference (MXFP8.md's checks), including the stated flush bound of bf16 dequantization.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include "device/kernels/prefill/activation_bf16.hpp"
#include "device/kernels/prefill/prefill_gemm.hpp"
#include "gpu/gemm_checks.hpp"
#include "gpu/gpu_support.hpp"
#include "host/registry/prefill_config.hpp"
#include "host/registry/prefill_kernel.hpp"
#include "host/registry/registry.hpp"
#include "mxlinear/format.hpp"
#include "support/random.hpp"

namespace mxlinear::test {
namespace {

// The pre-pass of e4m3 rows `ld_q` bytes apart from `q` (scales of `a`) into `out` (row stride
// k elements); it also zeroes `zero_for_next` (a stream-K GEMM's flags).
device::ActivationBf16Params prepass_params(const std::uint8_t* q, std::int64_t ld_q,
                                            const DeviceMx& a, void* out,
                                            device::ZeroedWords zero_for_next = {}) {
  device::ActivationBf16Params p;
  p.q = q;
  p.scales = a.scales.bytes();
  p.ld_q = ld_q;
  p.ld_scales = a.k / kBlockSize;
  p.out = out;
  p.ld_out = a.k;
  p.m = static_cast<int>(a.rows);
  p.k = static_cast<int>(a.k);
  p.zero_for_next = zero_for_next;
  return p;
}

// Runs the pre-pass (prepass_params) into a new, poisoned bf16 buffer; returns it.
DeviceBuffer activation_bf16(const std::uint8_t* q, std::int64_t ld_q, const DeviceMx& a,
                             device::ZeroedWords zero_for_next = {}) {
  DeviceBuffer out(static_cast<std::size_t>(a.rows * a.k) * 2);
  out.poison();
  EXPECT_EQ(
      device::launch_activation_bf16(prepass_params(q, ld_q, a, out.get(), zero_for_next), nullptr),
      cudaSuccess);
  return out;
}

struct Config {
  int instance, splits;
  bool in_memory = false;  // K splits met in memory (GemmParams::split_tiles), not over a cluster
};

// The current device's SMs.
int device_sms() {
  int device = 0, sms = 0;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  return sms;
}

// The output tiles of an m x n call on `i`'s tile.
int output_tiles(const device::PrefillInstanceInfo& i, int m, int n) {
  return (n + i.rows - 1) / i.rows * ((m + i.tokens - 1) / i.tokens);
}

// Bytes of poisoned guard after a stream-K config's flags.
constexpr std::size_t kGuardBytes = 4096;

// A stream-K config's partial tiles and flags for at most `ctas` CTAs (0: one per SM), poisoned
// (the pre-pass must zero the flags) and followed by a poisoned guard, wired into `p`; a k-parts
// config's part sums for every SM, poisoned (a part's sum is stored before it is read) and
// followed by the guard; splits met in memory, a tile for every CTA of p's grid and an arrival
// word for every output tile, poisoned likewise (the pre-pass zeroes the words) and followed by
// the guard; an empty buffer for the other configs.
DeviceBuffer attach_workspace(Config config, device::GemmParams& p, int ctas = 0) {
  const auto& i = device::prefill_gemm_instances()[static_cast<std::size_t>(config.instance)];
  if (config.in_memory) {
    const int tiles = output_tiles(i, p.m, p.n);
    const std::int64_t floats = std::int64_t{tiles} * config.splits * i.rows * i.tokens;
    DeviceBuffer area(static_cast<std::size_t>(floats * 4 + tiles * 4) + kGuardBytes);
    area.poison();
    p.split_tiles = reinterpret_cast<float*>(area.get());
    p.split_tile_floats = floats;
    p.split_arrivals = reinterpret_cast<std::uint32_t*>(area.bytes() + floats * 4);
    p.split_arrival_words = tiles;
    return area;
  }
  if (i.part_sums_in_memory) {
    DeviceBuffer sums(device::prefill_part_sum_bytes(device_sms()) + kGuardBytes);
    sums.poison();
    p.part_sums = reinterpret_cast<float*>(sums.get());
    p.part_sum_slots = device_sms();
    return sums;
  }
  if (!i.stream_k) return {};
  if (ctas == 0) ctas = device_sms();
  DeviceBuffer stream_k(device::prefill_stream_k_bytes(ctas) + kGuardBytes);
  stream_k.poison();
  p.partials = reinterpret_cast<float*>(stream_k.get());
  p.flags = reinterpret_cast<std::uint32_t*>(stream_k.bytes() + static_cast<std::size_t>(ctas) *
                                                                    i.rows * i.tokens * 4);
  p.stream_k_ctas = ctas;
  return stream_k;
}

// The words the pre-pass zeroes for the GEMM: stream-K flags or split arrival words.
device::ZeroedWords flags_of(const device::GemmParams& p) {
  if (p.split_arrivals) return {p.split_arrivals, p.split_arrival_words};
  return {p.flags, p.flags ? p.stream_k_ctas : 0};
}

// Runs the pre-pass and the GEMM of `config` (a stream-K one with room for `stream_k_ctas` CTAs,
// 0: one per SM); its stream-K guard must stay poisoned.
std::vector<std::uint8_t> run_config(Config config, const MxOperand& a, const MxOperand& w,
                                     DType out_dtype, const DeviceBuffer* bias,
                                     device::BiasType bias_type, int stream_k_ctas = 0) {
  DeviceMx da = upload(a);
  DeviceMx dw = upload(w);
  DeviceBuffer out(static_cast<std::size_t>(a.rows * w.rows) * element_size(out_dtype));
  out.poison();
  device::GemmParams p = gemm_params(da, dw, out, out_dtype);
  const DeviceBuffer workspace = attach_workspace(config, p, stream_k_ctas);
  const DeviceBuffer a16 = activation_bf16(da.data.bytes(), a.k, da, flags_of(p));
  if (bias) {
    p.bias = bias->get();
    p.bias_type = bias_type;
  }
  EXPECT_TRUE(device::prefill_gemm_unsupported(p).empty());
  EXPECT_EQ(device::launch_prefill_gemm(p, a16.get(), a.k, config.instance, config.splits, nullptr),
            cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (workspace.size() > 0) {
    const auto bytes = workspace.download<std::uint8_t>(workspace.size());
    EXPECT_TRUE(std::all_of(bytes.end() - kGuardBytes, bytes.end(),
                            [](std::uint8_t b) { return b == 0xFF; }))
        << "the launch wrote past its workspace (stream-K partial tiles and flags of "
        << p.stream_k_ctas << " CTAs, part sums of " << p.part_sum_slots << " SMs, or "
        << p.split_arrival_words << " tiles' splits)";
  }
  return out.download<std::uint8_t>(out.size());
}

// bf16 round-to-nearest-even of x, subnormals included (steps of 2^-133 below 2^-126).
double round_bf16(double x) {
  if (x == 0 || !std::isfinite(x)) return x;
  const int e = std::ilogb(x);
  const int quantum = std::max(e - 7, -133);
  return std::nearbyint(std::ldexp(x, -quantum)) * std::ldexp(1.0, quantum);
}

// One operand with scale bytes 0..3, so that it dequantizes to 2^-136..2^-115: below 2^-126
// bf16 rounds those values to its subnormal grid (the activations in the pre-pass, the weights
// in the main loop's widening). The result must equal the fp64 product with that operand rounded
// (within the accumulation tolerance), and differ from the exact MX result by at most
// 2^-134 * sum_k |other operand| (half a subnormal step per rounded element).
enum class TinyScales { kActivation, kWeight };

void check_flush_bound(const GemmRunner& run, TinyScales tiny, std::mt19937_64& rng) {
  MxOperand a = random_operand(9, 1024, rng);
  MxOperand w = random_operand(70, 1024, rng);
  std::uniform_int_distribution<int> small(0, 3);
  for (auto& s : (tiny == TinyScales::kActivation ? a : w).scales) {
    s = static_cast<std::uint8_t>(small(rng));
  }
  const std::vector<double> exact = reference(a, w, {});
  std::vector<double> rounded(exact.size(), 0.0), bound(exact.size(), 0.0), abs_sums(exact.size());
  for (std::int64_t m = 0; m < a.rows; ++m) {
    for (std::int64_t n = 0; n < w.rows; ++n) {
      double sum = 0, abs_sum = 0, other_abs = 0;
      for (std::int64_t k = 0; k < a.k; ++k) {
        double av =
            static_cast<double>(e4m3_to_float(a.data[static_cast<std::size_t>(m * a.k + k)])) *
            e8m0_to_float(a.scales[static_cast<std::size_t>(m * (a.k / 32) + k / 32)]);
        double wv =
            static_cast<double>(e4m3_to_float(w.data[static_cast<std::size_t>(n * w.k + k)])) *
            e8m0_to_float(w.scales[static_cast<std::size_t>(n * (w.k / 32) + k / 32)]);
        double& rounded_value = tiny == TinyScales::kActivation ? av : wv;
        other_abs += std::fabs(tiny == TinyScales::kActivation ? wv : av);
        rounded_value = round_bf16(rounded_value);
        sum += av * wv;
        abs_sum += std::fabs(av * wv);
      }
      const auto i = static_cast<std::size_t>(m * w.rows + n);
      rounded[i] = sum;
      abs_sums[i] = abs_sum;
      bound[i] = std::ldexp(other_abs, -134);
    }
  }
  const auto out = run(a, w, DType::kF32, nullptr, device::BiasType::kNone);
  expect_within_tolerance(out, rounded, abs_sums, 2 * a.k, DType::kF32);
  for (std::size_t i = 0; i < exact.size(); ++i) {
    const double tol = tolerance(rounded[i], abs_sums[i], 2 * a.k, DType::kF32);
    ASSERT_LE(std::fabs(output_value(out, DType::kF32, i) - exact[i]), bound[i] + tol)
        << "flat index " << i;
  }
}

// Tails on purpose: M and N not multiples of the tiles (or of 8), more than one tile of each;
// K chunks (of 128) that the splits do not divide evenly (10). Output rows 16-byte aligned or
// not (N = 200 and 196 take the epilogue's vector stores, 196 in fp32 with a last group of 4).
// Shapes with fewer chunks than a config's splits are skipped for it (the launcher rejects them).
// K = 544 and 96 end in a part chunk (32 and 96 of 128 K): TMA zero-fills the rest, and their
// scale rows (17 and 3 bytes) are not 4-byte aligned, so the scales are copied byte by byte.
const GemmShape kShapes[] = {{1, 1, 128},     {7, 33, 256},   {300, 257, 512}, {130, 129, 1024},
                             {70, 200, 1280}, {40, 196, 256}, {37, 90, 544},   {5, 70, 96}};

// (instance, K splits, met in memory): every config the registry entry offers, with its splits
// met over a cluster and, where the instance can, in memory.
class PrefillGemmInstance : public ::testing::TestWithParam<std::tuple<int, int, bool>> {
 protected:
  Config config() const {
    return {std::get<0>(GetParam()), std::get<1>(GetParam()), std::get<2>(GetParam())};
  }
  // The shapes with at least as many 128-K chunks (a part chunk counts) as the config has splits.
  std::vector<GemmShape> shapes() const {
    std::vector<GemmShape> fitting;
    for (const GemmShape& c : kShapes) {
      if ((c.k + 127) / 128 >= config().splits) fitting.push_back(c);
    }
    // Every config fits some shape: an empty list would pass its tests without a launch.
    EXPECT_FALSE(fitting.empty()) << "splits " << config().splits;
    return fitting;
  }
  GemmRunner runner() const {
    return [config = config()](const MxOperand& a, const MxOperand& w, DType out_dtype,
                               const DeviceBuffer* bias, device::BiasType bias_type) {
      return run_config(config, a, w, out_dtype, bias, bias_type);
    };
  }
};

// The pre-pass output of `a` equals the CPU's dequantized values at their permuted positions.
// eight_byte_rows: the e4m3 rows start 8 bytes past a 16-byte boundary and lie k + 8 bytes
// apart, the least alignment the pre-pass accepts (it loads 8 bytes at a time).
void expect_prepass_matches_cpu(const MxOperand& a, bool eight_byte_rows = false) {
  const DeviceMx da = upload(a);
  DeviceBuffer padded;
  const std::uint8_t* q = da.data.bytes();
  std::int64_t ld_q = a.k;
  if (eight_byte_rows) {
    ld_q = a.k + 8;
    std::vector<std::uint8_t> host(static_cast<std::size_t>(8 + a.rows * ld_q), 0);
    for (std::int64_t m = 0; m < a.rows; ++m) {
      std::copy_n(a.data.begin() + m * a.k, a.k, host.begin() + 8 + m * ld_q);
    }
    padded = DeviceBuffer::from(host);
    q = padded.bytes() + 8;
  }
  const auto got =
      activation_bf16(q, ld_q, da).download<std::uint16_t>(static_cast<std::size_t>(a.rows * a.k));
  for (std::int64_t m = 0; m < a.rows; ++m) {
    for (std::int64_t k = 0; k < a.k; ++k) {
      const float v = e4m3_to_float(a.data[static_cast<std::size_t>(m * a.k + k)]) *
                      e8m0_to_float(a.scales[static_cast<std::size_t>(m * (a.k / 32) + k / 32)]);
      const std::int64_t at =
          m * a.k + 32 * (k / 32) + device::permuted_position(static_cast<int>(k % 32));
      std::uint32_t bits = std::uint32_t{got[static_cast<std::size_t>(at)]} << 16;
      float g;
      std::memcpy(&g, &bits, 4);
      if (std::isnan(v)) {
        ASSERT_TRUE(std::isnan(g)) << "row " << m << " k " << k;
      } else {
        ASSERT_EQ(g, v) << "row " << m << " k " << k;  // scales 2^-8..2^8: exact in bf16
      }
    }
  }
}

TEST(ActivationBf16, EqualsTheDequantizedValuesAtTheirPermutedPositions) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  MxOperand a = random_operand(37, 256, rng);
  a.scales[5] = 0xFF;  // row 0, block 5: NaN scale
  a.data[3 * 256 + 17] = 0x7F;
  expect_prepass_matches_cpu(a);
}

// More 8-byte groups than two sweeps of the pre-pass's grid, with groups per row (132 and 520)
// that do not divide its stride: every position advance, including the carry into the next row
// (where a warp's quads of lanes, each one block's groups, span two rows), in both store styles.
TEST(ActivationBf16, InputLargerThanTheGridIsWalkedExactly) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  ASSERT_FALSE(device::activation_bf16_quad_stores(4100, 1056));
  expect_prepass_matches_cpu(random_operand(4100, 1056, rng));
  ASSERT_TRUE(device::activation_bf16_quad_stores(2048, 4160));
  expect_prepass_matches_cpu(random_operand(2048, 4160, rng));
}

// The quads' stores write whole 16-byte pieces, and both store styles share one contract: an
// output (or output row) that is not 16-byte aligned is refused before anything runs (no GPU
// needed).
TEST(ActivationBf16, RefusesAnOutputThatIsNot16ByteAligned) {
  device::ActivationBf16Params p;
  p.m = 1;
  p.k = 32;
  p.ld_out = 32;
  p.out = reinterpret_cast<void*>(std::uintptr_t{4096 + 8});
  EXPECT_EQ(device::launch_activation_bf16(p, nullptr), cudaErrorInvalidValue);
  p.out = reinterpret_cast<void*>(std::uintptr_t{4096});
  p.ld_out = 36;
  EXPECT_EQ(device::launch_activation_bf16(p, nullptr), cudaErrorInvalidValue);
}

TEST(ActivationBf16, RowsOnlyEightByteAlignedConvertExactly) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  expect_prepass_matches_cpu(random_operand(70, 96, rng), /*eight_byte_rows=*/true);
}

TEST_P(PrefillGemmInstance, ExactInputsMatchFp64BitForBit) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_exact_on_shapes(runner(), shapes(), rng);
}

// The main loop accumulates all of K in the tensor core's fp32 (k16 steps), not MX blocks, so
// the accumulation slack is that of 2K in tolerance()'s k32 terms.
TEST_P(PrefillGemmInstance, RandomInputsWithinDerivedTolerance) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_random_on_shapes(runner(), shapes(), 2, rng);
}

TEST_P(PrefillGemmInstance, SubnormalActivationsStayWithinTheFlushBound) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_flush_bound(runner(), TinyScales::kActivation, rng);
}

TEST_P(PrefillGemmInstance, SubnormalWeightsStayWithinTheFlushBound) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_flush_bound(runner(), TinyScales::kWeight, rng);
}

// A seed-sized layer (several tiles both ways, K = 6144), run 4 times: bitwise stable, and
// within tolerance of fp64.
TEST_P(PrefillGemmInstance, SeedSizedLayerIsStableAcrossRuns) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  check_stable_across_runs(runner(), {300, 640, 6144}, 4, 2, rng);
}

// A CTA's K range beyond kPrefillScaleSlots chunks keeps its scales in two windows that the
// main loop refills: 100 chunks (windows 0-27, 28-55, 56-83, 84-99: three refills, two of them
// after waiting for the one before) unsplit, in whole chunks (cp.async words) and ending in a
// part chunk (bytewise words). Split configs run the same shapes with fewer chunks a CTA.
TEST_P(PrefillGemmInstance, LongKScaleWindowsMatchFp64) {
  MXL_REQUIRE_GPU();
  static_assert(device::kPrefillScaleSlots == 56 && device::kPrefillScaleWindow == 28);
  auto rng = make_rng();
  const GemmShape long_k[] = {{20, 72, 100 * 128}, {9, 40, 100 * 128 - 32}};
  check_exact_on_shapes(runner(), long_k, rng);
  check_random_on_shapes(runner(), long_k, 2, rng);
}

// The registry entry runs the pre-pass into the call's scratch, then the GEMM, for every config.
TEST(PrefillRegistryEntry, RunsThePrePassAndTheGemmInTheCallsScratch) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  const auto kernels = builtin_kernels();
  const auto it = std::find_if(kernels.begin(), kernels.end(),
                               [](const auto& k) { return k->name() == "prefill"; });
  ASSERT_NE(it, kernels.end());
  const MxOperand a = random_operand(260, 1024, rng);
  const MxOperand w = random_operand(200, 1024, rng);
  const DeviceMx da = upload(a);
  const DeviceMx dw = upload(w);
  DeviceBuffer out(static_cast<std::size_t>(260 * 200) * 4);
  DeviceBuffer scratch(linear_workspace_bytes(260, 1024));
  for (const std::string& config : (*it)->configs()) {
    out.poison();
    KernelCall call{QuantizedActivation{da.data_view(), da.scales_view(), DType::kBF16},
                    MxWeight{dw.data_view(), dw.scales_view()},
                    std::nullopt,
                    TensorView::contiguous(out.get(), {260, 200}, DType::kF32, Location::kDevice),
                    LinearShape{260, 200, 1024},
                    nullptr,
                    Workspace{scratch.get(), scratch.size()}};
    (*it)->run(call, config);
    MXL_CUDA_OK(cudaDeviceSynchronize());
    SCOPED_TRACE(config);
    expect_within_tolerance(out.download<std::uint8_t>(out.size()), reference(a, w, {}),
                            abs_product_sums(a, w), 2 * 1024, DType::kF32);
  }
}

// A stream-K workspace sized for fewer CTAs than this device has SMs (a workspace sized on a
// smaller GPU): the launcher caps its grid there, so the walk spreads the same units over fewer
// CTAs, writes nothing past their partial tiles and flags, and still gives fp64's bits.
TEST(PrefillStreamK, AWorkspaceForFewerCtasCapsTheGrid) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  int instance = -1;
  for (std::size_t i = 0; i < device::prefill_gemm_instances().size(); ++i) {
    if (device::prefill_gemm_instances()[i].stream_k) instance = static_cast<int>(i);
  }
  ASSERT_GE(instance, 0);
  const GemmShape shapes[] = {{300, 1000, 1536}, {520, 257, 1024}};
  for (const int ctas : {1, 7, device_sms() / 2}) {
    SCOPED_TRACE(::testing::Message() << ctas << " CTAs");
    check_exact_on_shapes(
        [&](const MxOperand& a, const MxOperand& w, DType out_dtype, const DeviceBuffer* bias,
            device::BiasType bias_type) {
          return run_config({instance, 1}, a, w, out_dtype, bias, bias_type, ctas);
        },
        shapes, rng);
  }
  // A launch with no room for any CTA is refused.
  device::GemmParams p;
  p.m = 300;
  p.n = 1000;
  p.k = 1536;
  p.partials = reinterpret_cast<float*>(std::uintptr_t{4096});
  p.flags = reinterpret_cast<std::uint32_t*>(std::uintptr_t{8192});
  p.stream_k_ctas = 0;
  const DeviceBuffer w(1000 * 1536), a16(300 * 1536 * 2);
  p.w = w.bytes();
  p.ld_w = 1536;
  EXPECT_EQ(device::launch_prefill_gemm(p, a16.get(), 1536, instance, 1, nullptr),
            cudaErrorInvalidValue);
}

// A split launch given too small an area for its tiles or arrival words, or an instance whose
// splits cannot meet in memory given one, is refused before it launches.
TEST(PrefillSplitsInMemory, TheLauncherRefusesAnAreaItCannotUse) {
  MXL_REQUIRE_GPU();
  const auto& instances = device::prefill_gemm_instances();
  int in_memory = -1, clustered_only = -1;
  for (std::size_t i = 0; i < instances.size(); ++i) {
    if (instances[i].persistent || instances[i].k_parts) continue;
    if (instances[i].splits_in_memory && in_memory < 0) in_memory = static_cast<int>(i);
    if (!instances[i].splits_in_memory && clustered_only < 0) clustered_only = static_cast<int>(i);
  }
  ASSERT_GE(in_memory, 0);
  ASSERT_GE(clustered_only, 0);
  constexpr int kM = 70, kN = 200, kK = 1024;
  const DeviceBuffer w(kN * kK), a16(kM * kK * 2), out(kM * kN * 4);
  DeviceBuffer area(1 << 20);
  const auto refused = [&](int instance, std::int64_t floats, int words) {
    device::GemmParams p;
    p.m = kM;
    p.n = kN;
    p.k = kK;
    p.w = w.bytes();
    p.ld_w = kK;
    p.out = out.get();
    p.ld_out = kN;
    p.split_tiles = reinterpret_cast<float*>(area.get());
    p.split_tile_floats = floats;
    p.split_arrivals = reinterpret_cast<std::uint32_t*>(area.bytes() + (1 << 19));
    p.split_arrival_words = words;
    return device::launch_prefill_gemm(p, a16.get(), kK, instance, 2, nullptr) ==
           cudaErrorInvalidValue;
  };
  const auto& i = instances[static_cast<std::size_t>(in_memory)];
  const int tiles = output_tiles(i, kM, kN);
  const std::int64_t floats = std::int64_t{tiles} * 2 * i.rows * i.tokens;
  EXPECT_TRUE(refused(in_memory, floats - 1, tiles));
  EXPECT_TRUE(refused(in_memory, floats, tiles - 1));
  EXPECT_TRUE(refused(clustered_only, 1 << 17, 1 << 10));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Every config says how many CTAs its launch has and how many the device holds at once: the
// grid of shared down at M = 128 as the launcher builds it, whole clusters for a split, at most
// one CTA per SM for a walk.
TEST(PrefillRegistryEntry, SaysWhetherALaunchFitsOneWave) {
  MXL_REQUIRE_GPU();
  const auto kernels = builtin_kernels();
  const auto it = std::find_if(kernels.begin(), kernels.end(),
                               [](const auto& k) { return k->name() == "prefill"; });
  ASSERT_NE(it, kernels.end());
  int device = 0, sms = 0;
  MXL_CUDA_OK(cudaGetDevice(&device));
  MXL_CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const LinearShape shape{256, 6144, 768};
  for (const std::string& config : (*it)->configs()) {
    SCOPED_TRACE(config);
    if (!(*it)->can_run(shape.m, shape.k, config).ok()) {
      EXPECT_FALSE((*it)->launch_footprint(shape, config).has_value());
      continue;
    }
    const auto f = (*it)->launch_footprint(shape, config);
    ASSERT_TRUE(f.has_value());
    EXPECT_GT(f->resident_ctas, 0);
    const device::PrefillInstanceInfo* instance = nullptr;
    int splits = 0;
    for (const auto& i : device::prefill_gemm_instances()) {
      for (int s = 1; s <= device::kPrefillMaxSplits; ++s) {
        if (config == detail::PrefillConfig::of(i, s).name()) instance = &i, splits = s;
      }
    }
    ASSERT_NE(instance, nullptr);
    if (instance->persistent) {
      EXPECT_LE(f->ctas, sms);
    } else {
      EXPECT_EQ(f->ctas, (6144 / instance->rows) * splits *
                             ((256 + instance->tokens - 1) / instance->tokens));
      EXPECT_EQ(f->resident_ctas % splits, 0);
    }
  }
  EXPECT_FALSE((*it)->launch_footprint(shape, "w128_t999").has_value());
  EXPECT_FALSE((*it)->launch_footprint({0, 6144, 768}, "w64_t64_st4_overlap").has_value());
}

// An instance whose producer warpgroup gives its registers to the consumers (setmaxnreg) must
// start with enough of them: 2 x 128 consumer threads at 232 and 128 producer threads at 40 are
// 64,512 registers, 168 a thread of 384. With fewer, a consumer's setmaxnreg.inc would wait
// forever; the launcher refuses such an instance. The others move none.
TEST(PrefillRegisterMoves, EveryMovingInstanceStartsWithTheRegistersItsMovesNeed) {
  MXL_REQUIRE_GPU();
  const int count = static_cast<int>(device::prefill_gemm_instances().size());
  int moving = 0;
  for (int instance = 0; instance < count; ++instance) {
    device::PrefillRegisterMoves moves{-1, -1};
    ASSERT_EQ(device::prefill_gemm_register_moves(instance, &moves), cudaSuccess) << instance;
    const auto& i = device::prefill_gemm_instances()[static_cast<std::size_t>(instance)];
    if (moves.needed == 0) {
      EXPECT_EQ(moves.compiled, 0) << "instance " << instance;
      EXPECT_LT(i.tokens, 192) << "instance " << instance << " should move registers";
      continue;
    }
    ++moving;
    EXPECT_EQ(moves.needed, 168) << "instance " << instance;
    EXPECT_GE(moves.compiled, moves.needed) << "instance " << instance;
  }
  EXPECT_GT(moving, 0);
  device::PrefillRegisterMoves moves;
  EXPECT_EQ(device::prefill_gemm_register_moves(-1, &moves), cudaErrorInvalidValue);
  EXPECT_EQ(device::prefill_gemm_register_moves(count, &moves), cudaErrorInvalidValue);
  EXPECT_EQ(device::prefill_gemm_register_moves(0, nullptr), cudaErrorInvalidValue);
}

TEST_P(PrefillGemmInstance, NaNBiasAndDeterminism) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  // K = 1024: eight 128-chunks, one per CTA of the widest split (the launcher rejects more).
  check_nan_bias_determinism(runner(), {1024, 300, 257, 1024}, rng);
}

// A chain of four calls, each the pre-pass and the GEMM (check_chain_graph_replay; the bias is
// the first row of the output before).
TEST_P(PrefillGemmInstance, ChainOfCallsInAGraphMatchesEager) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  constexpr std::int64_t kM = 130, kN = 257, kK = 1024;
  const MxOperand a = random_operand(kM, kK, rng);
  const DeviceMx da = upload(a);
  const DeviceMx dw[2] = {upload(random_operand(kN, kK, rng)), upload(random_operand(kN, kK, rng))};
  DeviceBuffer out[2] = {DeviceBuffer(kM * kN * 4), DeviceBuffer(kM * kN * 4)};
  DeviceBuffer a16(static_cast<std::size_t>(kM * kK) * 2);
  device::GemmParams p = gemm_params(da, dw[0], out[0], DType::kF32);
  const DeviceBuffer workspace = attach_workspace(config(), p);
  auto call = [&](int i, cudaStream_t stream) {
    const device::ActivationBf16Params pre =
        prepass_params(da.data.bytes(), kK, da, a16.get(), flags_of(p));
    device::GemmParams gemm = p;
    gemm.w = dw[i % 2].data.bytes();
    gemm.w_scales = dw[i % 2].scales.bytes();
    gemm.out = out[i % 2].get();
    gemm.bias = i > 0 ? out[(i + 1) % 2].get() : nullptr;
    gemm.bias_type = i > 0 ? device::BiasType::kF32 : device::BiasType::kNone;
    const cudaError_t e = device::launch_activation_bf16(pre, stream);
    if (e != cudaSuccess) return e;
    return device::launch_prefill_gemm(gemm, a16.get(), kK, config().instance, config().splits,
                                       stream);
  };
  check_chain_graph_replay(call, 4, out);
}

std::string config_name(const ::testing::TestParamInfo<std::tuple<int, int, bool>>& info) {
  return detail::PrefillConfig::of(
             device::prefill_gemm_instances()[static_cast<std::size_t>(std::get<0>(info.param))],
             std::get<1>(info.param))
             .name() +
         (std::get<2>(info.param) ? "_in_memory" : "");
}

// Every (instance, split count) whose output tile fits the instance's ring: the registry's
// configs.
std::vector<std::tuple<int, int, bool>> every_config() {
  std::vector<std::tuple<int, int, bool>> configs;
  for (int instance = 0; instance < static_cast<int>(device::prefill_gemm_instances().size());
       ++instance) {
    for (int splits = 1; splits <= device::kPrefillMaxSplits; ++splits) {
      if (!device::prefill_gemm_splits_fit(instance, splits)) continue;
      configs.emplace_back(instance, splits, false);
      if (splits > 1 &&
          device::prefill_gemm_instances()[static_cast<std::size_t>(instance)].splits_in_memory) {
        configs.emplace_back(instance, splits, true);
      }
    }
  }
  return configs;
}

INSTANTIATE_TEST_SUITE_P(EveryConfig, PrefillGemmInstance, ::testing::ValuesIn(every_config()),
                         config_name);

// The persistent configs on layers of more tiles than an H200 has SMs (1000 x 8200: 260 to 455
// tiles, so most CTAs walk 2-4 tiles): the ring runs on from tile to tile, through 1 and 3
// chunks of 128 per tile (the scale copy's second group empty, then not), with N and M tails.
class PrefillPersistentWalk : public PrefillGemmInstance {};

TEST_P(PrefillPersistentWalk, ManyTilesPerCtaMatchFp64BitForBit) {
  MXL_REQUIRE_GPU();
  auto rng = make_rng();
  const GemmShape walks[] = {{1000, 8200, 128}, {1000, 8200, 384}};
  check_exact_on_shapes(runner(), walks, rng);
}

std::vector<std::tuple<int, int, bool>> persistent_configs() {
  std::vector<std::tuple<int, int, bool>> configs;
  for (int instance = 0; instance < static_cast<int>(device::prefill_gemm_instances().size());
       ++instance) {
    if (device::prefill_gemm_instances()[static_cast<std::size_t>(instance)].persistent) {
      configs.emplace_back(instance, 1, false);
    }
  }
  return configs;
}

INSTANTIATE_TEST_SUITE_P(PersistentConfigs, PrefillPersistentWalk,
                         ::testing::ValuesIn(persistent_configs()), config_name);

}  // namespace
}  // namespace mxlinear::test
