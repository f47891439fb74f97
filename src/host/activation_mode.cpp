#include "mxlinear/linear_types.hpp"

namespace mxlinear {

std::string_view activation_mode_name(ActivationMode mode) {
  return mode == ActivationMode::kW8A16 ? "bf16" : "mx";
}

std::optional<ActivationMode> parse_activation_mode(std::string_view name) {
  if (name == "mx") return ActivationMode::kW8A8;
  if (name == "bf16") return ActivationMode::kW8A16;
  return std::nullopt;
}

std::optional<ActivationOperand> activation_operand(ActivationMode mode, DType x_dtype) {
  if (mode == ActivationMode::kW8A8 || x_dtype == DType::kE4M3) return ActivationOperand::kMx;
  if (x_dtype == DType::kBF16) return ActivationOperand::kBf16;
  if (x_dtype == DType::kF16) return ActivationOperand::kF16;
  return std::nullopt;
}

std::string_view describe(ActivationOperand operand) {
  switch (operand) {
    case ActivationOperand::kMx:
      return "W8A8 (x quantized to MXFP8)";
    case ActivationOperand::kBf16:
      return "W8A16 (bf16 x as it is)";
    case ActivationOperand::kF16:
      return "W8A16 (fp16 x as it is)";
  }
  return "";
}

}  // namespace mxlinear
