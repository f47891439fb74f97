#include "gpu/gpu_support.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "mxlinear/format.hpp"

namespace mxlinear::test {

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  if (cudaMalloc(&ptr_, bytes) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(other.ptr_), bytes_(other.bytes_) {
  other.ptr_ = nullptr;
  other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = other.ptr_;
    bytes_ = other.bytes_;
    other.ptr_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

void DeviceBuffer::upload(const void* src, std::size_t bytes) {
  if (bytes && cudaMemcpy(ptr_, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
    throw std::runtime_error("upload failed");
  }
}

void DeviceBuffer::download_to(void* dst, std::size_t bytes) const {
  if (bytes && cudaMemcpy(dst, ptr_, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
    throw std::runtime_error("download failed");
  }
}

// cudaMemset runs on the legacy stream and may still be in flight when it returns, and work on
// a non-blocking stream does not wait for it: a poison landing after a kernel's stores would fail
// a correct kernel (the likely cause of a graph replay once seen failing with 0xFF bytes where
// eager had a value). So the fill is complete on return.
void DeviceBuffer::fill(unsigned char byte) {
  if (bytes_ &&
      (cudaMemset(ptr_, byte, bytes_) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)) {
    throw std::runtime_error("fill failed");
  }
}

MxOperand exact_operand(std::int64_t rows, std::int64_t k, std::mt19937_64& rng) {
  MxOperand op{rows, k, std::vector<std::uint8_t>(static_cast<std::size_t>(rows * k)),
               std::vector<std::uint8_t>(static_cast<std::size_t>(rows * k / kBlockSize))};
  std::uniform_int_distribution<int> value(-4, 4);
  std::uniform_int_distribution<int> keep(0, 3);
  std::uniform_int_distribution<int> scale(126, 128);
  for (auto& q : op.data) q = keep(rng) == 0 ? float_to_e4m3(static_cast<float>(value(rng))) : 0;
  for (auto& s : op.scales) s = static_cast<std::uint8_t>(scale(rng));
  return op;
}

MxOperand random_operand(std::int64_t rows, std::int64_t k, std::mt19937_64& rng) {
  MxOperand op{rows, k, std::vector<std::uint8_t>(static_cast<std::size_t>(rows * k)),
               std::vector<std::uint8_t>(static_cast<std::size_t>(rows * k / kBlockSize))};
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> scale(119, 135);
  for (auto& q : op.data) {
    int b = byte(rng);
    while ((b & 0x7F) == 0x7F) b = byte(rng);
    q = static_cast<std::uint8_t>(b);
  }
  for (auto& s : op.scales) s = static_cast<std::uint8_t>(scale(rng));
  return op;
}

TensorView DeviceMx::data_view() const {
  return TensorView::contiguous(data.get(), {rows, k}, DType::kE4M3, Location::kDevice);
}

TensorView DeviceMx::scales_view() const {
  return TensorView::contiguous(scales.get(), {rows, k / kBlockSize}, DType::kE8M0,
                                Location::kDevice);
}

DeviceMx upload(const MxOperand& op) {
  DeviceMx d;
  d.data = DeviceBuffer::from(op.data);
  d.scales = DeviceBuffer::from(op.scales);
  d.rows = op.rows;
  d.k = op.k;
  return d;
}

namespace {

std::vector<double> dequantize(const MxOperand& op) {
  std::vector<double> out(op.data.size());
  for (std::int64_t r = 0; r < op.rows; ++r) {
    for (std::int64_t c = 0; c < op.k; ++c) {
      const auto i = static_cast<std::size_t>(r * op.k + c);
      const double scale = std::ldexp(
          1.0, op.scales[static_cast<std::size_t>(r * op.k / kBlockSize + c / kBlockSize)] - 127);
      out[i] = static_cast<double>(e4m3_to_float(op.data[i])) * scale;
    }
  }
  return out;
}

template <class F>
std::vector<double> accumulate(const MxOperand& a, const MxOperand& w, F term) {
  const std::vector<double> da = dequantize(a);
  const std::vector<double> dw = dequantize(w);
  std::vector<double> out(static_cast<std::size_t>(a.rows * w.rows));
  const auto k = static_cast<std::size_t>(a.k);
  for (std::int64_t m = 0; m < a.rows; ++m) {
    for (std::int64_t n = 0; n < w.rows; ++n) {
      double acc = 0;
      for (std::size_t i = 0; i < k; ++i) {
        acc +=
            term(da[static_cast<std::size_t>(m) * k + i], dw[static_cast<std::size_t>(n) * k + i]);
      }
      out[static_cast<std::size_t>(m * w.rows + n)] = acc;
    }
  }
  return out;
}

}  // namespace

std::vector<double> reference(const MxOperand& a, const MxOperand& w,
                              const std::vector<double>& bias) {
  std::vector<double> out = accumulate(a, w, [](double x, double y) { return x * y; });
  if (!bias.empty()) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += bias[i % bias.size()];
  }
  return out;
}

std::vector<double> abs_product_sums(const MxOperand& a, const MxOperand& w) {
  return accumulate(a, w, [](double x, double y) { return std::fabs(x * y); });
}

double output_value(const std::vector<std::uint8_t>& raw, DType dtype, std::size_t i) {
  switch (dtype) {
    case DType::kBF16: {
      __nv_bfloat16 v;
      std::memcpy(&v, raw.data() + 2 * i, 2);
      return __bfloat162float(v);
    }
    case DType::kF16: {
      __half v;
      std::memcpy(&v, raw.data() + 2 * i, 2);
      return __half2float(v);
    }
    default: {
      float v;
      std::memcpy(&v, raw.data() + 4 * i, 4);
      return v;
    }
  }
}

double round_to(double x, DType dtype) {
  const float f = static_cast<float>(x);  // exact for the values compared bit for bit
  switch (dtype) {
    case DType::kBF16:
      return __bfloat162float(__float2bfloat16_rn(f));
    case DType::kF16:
      return __half2float(__float2half_rn(f));
    default:
      return f;
  }
}

double tolerance(double ref, double abs_sum, std::int64_t k, DType dtype) {
  const int mantissa_bits = dtype == DType::kBF16 ? 7 : (dtype == DType::kF16 ? 10 : 23);
  const int min_exponent = dtype == DType::kF16 ? -14 : -126;
  const double mag = std::fabs(ref);
  const int e = mag > 0 ? std::max(std::ilogb(mag), min_exponent) : min_exponent;
  const double ulp = std::ldexp(1.0, e - mantissa_bits);
  const double slack =
      2.0 * (static_cast<double>(k) / kBlockSize + 32.0) * std::ldexp(1.0, -24) * abs_sum;
  return ulp + slack;
}

}  // namespace mxlinear::test
