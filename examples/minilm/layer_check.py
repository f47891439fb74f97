"""Checks every MXFP8 layer of a real run against the float64 emulation of the MXFP8 contract,
element by element, within the fp32 accumulation bound of docs/MXFP8.md ("The fp32 accumulation
bound").

Forward hooks capture each MXFP8Linear's input and output as the model runs. For each call:
- the activation's quantization by mxlinear.quantize equals the emulation's, byte for byte;
- with p_k = deq(a_k) * deq(w_k) (exact in float64) and S = sum_k |p_k| + |bias|,
      |y - (sum_k p_k + bias)| <= (gamma_{K+1}(2^-24) + gamma_{K+1}(2^-53)) * S
                                    + half an ulp of y's type at y  (+ the underflow term),
  the second gamma covering the float64 sum that stands in for the exact one.
"""

import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import mxlinear
import torch
from mxlinear.nn import MXFP8Linear

REPO_ROOT = Path(__file__).resolve().parents[2]
BLOCK = 32
U_FP32 = 2.0**-24
U_FP64 = 2.0**-53
# Below 2^-126 (fp32's and bf16's smallest normal) values round to a subnormal grid: 2^-149 for
# fp32 (error <= 2^-150), 2^-133 for a bf16 operand (error <= 2^-134).
FP32_HALF_SUBNORMAL = 2.0**-150
BF16_HALF_SUBNORMAL = 2.0**-134
# The smallest scale exponent (b - 127) of a block with a non-zero element for which no
# operand, product or singly scaled block sum can fall below 2^-126: e4m3's smallest non-zero
# magnitude is 2^-9, so a product of raw elements is at least 2^-18 (see the docs section).
MIN_SAFE_EXPONENT = -108


def load_emulation():
    """The contract written out in float64 torch, independently of the C++ code."""
    tests = REPO_ROOT / "python" / "tests"
    if not (tests / "emulation.py").is_file():
        sys.exit(f"layer_check: {tests / 'emulation.py'} is missing; expected the repository's "
                 "float64 emulation of the MXFP8 contract")
    sys.path.insert(0, str(tests))
    import emulation

    return emulation


def gamma(n: int, u: float) -> float:
    if n * u >= 1:
        raise ValueError(f"gamma: argument 'n' is {n}; expected n * u < 1 (u = {u})")
    return n * u / (1 - n * u)


def half_ulp(y: torch.Tensor) -> torch.Tensor:
    """Half the spacing of y's floating-point type at |y| (float64): the largest error of a
    round-to-nearest that produced y. A y of 0 came from at most half the smallest subnormal."""
    info = torch.finfo(y.dtype)
    emin = int(torch.tensor(info.tiny, dtype=torch.float64).log2().item())
    mantissa_bits = int(-torch.tensor(info.eps, dtype=torch.float64).log2().item())
    yd = y.to(torch.float64).abs()
    _, e = torch.frexp(yd)  # yd = m * 2^e with m in [0.5, 1): the binade starts at 2^(e - 1)
    binade = torch.where(yd == 0, torch.full_like(e, emin), (e - 1).clamp(min=emin))
    return torch.ldexp(torch.ones_like(yd), binade - mantissa_bits - 1)


def nonzero_blocks(data: torch.Tensor) -> torch.Tensor:
    """[..., K/32] bool: blocks with a non-zero element (their scale matters)."""
    bytes_ = data.view(torch.uint8).reshape(*data.shape[:-1], -1, BLOCK)
    return ((bytes_ & 0x7F) != 0).any(dim=-1)


def min_exponent(scales: torch.Tensor, live: torch.Tensor) -> int:
    exps = scales.view(torch.uint8).to(torch.int32) - 127
    return int(exps[live].min().item()) if bool(live.any()) else 0


def underflow_term(a, w, a_live, w_live, a_scale, w_scale) -> torch.Tensor:
    """A bound on what gradual underflow can add, for any of the kernels' ways of applying the
    scales: per non-zero product 2^-150 (its fp32 rounding) + 2^-134 (|a| + |w| + 2^-134) (a bf16
    operand on the subnormal grid); per pair of non-zero blocks 2^-150 (1 + s_a + s_w) (a block
    sum scaled by one scale, then the other)."""
    nz_a, nz_w = (a != 0).double(), (w != 0).double()
    products = FP32_HALF_SUBNORMAL * (nz_a @ nz_w.T) + BF16_HALF_SUBNORMAL * (
        a.abs() @ nz_w.T + nz_a @ w.abs().T + BF16_HALF_SUBNORMAL * (nz_a @ nz_w.T))
    la, lw = a_live.double(), w_live.double()
    sa = torch.ldexp(torch.ones_like(la), a_scale.view(torch.uint8).long() - 127)
    sw = torch.ldexp(torch.ones_like(lw), w_scale.view(torch.uint8).long() - 127)
    blocks = FP32_HALF_SUBNORMAL * (la @ lw.T + (la * sa) @ lw.T + la @ (lw * sw).T)
    return products + blocks


@dataclass
class LayerStats:
    name: str
    n: int
    k: int
    calls: int = 0
    elements: int = 0
    max_ratio: float = 0.0  # max |y - exact| / bound
    max_abs_error: float = 0.0
    correctly_rounded: int = 0  # outputs equal to the float64 result rounded to y's type
    quantize_mismatches: int = 0  # activation bytes where mxlinear.quantize and emulation differ
    underflow_calls: int = 0  # calls whose scales allow underflow (the underflow term is added)


@dataclass
class LayerCheck:
    """Hooks every MXFP8Linear of `model` while active (a context manager)."""

    model: torch.nn.Module
    emulation: object = None
    layers: dict = field(default_factory=dict)
    _handles: list = field(default_factory=list)
    _weights: dict = field(default_factory=dict)

    def __enter__(self):
        self.emulation = self.emulation or load_emulation()
        for name, module in self.model.named_modules():
            if isinstance(module, MXFP8Linear):
                n, k = module.weight.shape
                self.layers[name] = LayerStats(name, n, k)
                self._handles.append(module.register_forward_hook(self._hook(name)))
        if not self.layers:
            raise ValueError("LayerCheck: argument 'model' has no MXFP8Linear; expected a "
                             "model converted by mxlinear.convert.quantize_model")
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._weights.clear()
        return False

    def _weight(self, name, module):
        if name not in self._weights:
            w = self.emulation.dequantize(module.weight, module.weight_scale)
            self._weights[name] = (w, nonzero_blocks(module.weight))
        return self._weights[name]

    def _hook(self, name):
        def hook(module, inputs, output):
            with torch.no_grad():
                self._check(name, module, inputs[0], output)

        return hook

    def _check(self, name, module, x, y):
        stats = self.layers[name]
        emu = self.emulation
        k = x.shape[-1]
        x2, y2 = x.reshape(-1, k), y.reshape(-1, y.shape[-1])
        a_data, a_scale = emu.quantize(x2)
        mx_data, mx_scale = mxlinear.quantize(x2)
        stats.quantize_mismatches += int((mx_data.view(torch.uint8) != a_data).sum().item())
        stats.quantize_mismatches += int((mx_scale.view(torch.uint8) != a_scale).sum().item())

        a = emu.dequantize(a_data, a_scale)
        w, w_live = self._weight(name, module)
        exact = a @ w.T
        total = a.abs() @ w.abs().T
        if module.bias is not None:
            exact = exact + module.bias.double()
            total = total + module.bias.double().abs()
        g = gamma(k + 1, U_FP32) + gamma(k + 1, U_FP64)
        bound = g * total + half_ulp(y2)

        a_live = nonzero_blocks(a_data.view(torch.float8_e4m3fn))
        ea = min_exponent(a_scale, a_live)
        ew = min_exponent(module.weight_scale, w_live)
        if ea < MIN_SAFE_EXPONENT or ew < MIN_SAFE_EXPONENT or ea + ew < MIN_SAFE_EXPONENT:
            stats.underflow_calls += 1
            bound = bound + (1 + g) * underflow_term(a, w, a_live, w_live, a_scale,
                                                     module.weight_scale)

        err = (y2.double() - exact).abs()
        ratio = err / bound
        stats.calls += 1
        stats.elements += y2.numel()
        # NaN (an unwritten or poisoned output) must fail, so it counts as an infinite ratio.
        worst = torch.where(torch.isnan(ratio), torch.full_like(ratio, float("inf")), ratio)
        stats.max_ratio = max(stats.max_ratio, float(worst.max().item()))
        stats.max_abs_error = max(stats.max_abs_error, float(err.nan_to_num(float("inf")).max()))
        stats.correctly_rounded += int((exact.to(y2.dtype) == y2).sum().item())

    def summary(self) -> dict:
        layers = [asdict(s) for s in self.layers.values()]
        elements = sum(s["elements"] for s in layers)
        return {
            "layers": len(layers),
            "calls": sum(s["calls"] for s in layers),
            "elements": elements,
            "max_ratio": max((s["max_ratio"] for s in layers), default=float("nan")),
            "correctly_rounded_fraction":
                sum(s["correctly_rounded"] for s in layers) / elements if elements else 0.0,
            "quantize_mismatches": sum(s["quantize_mismatches"] for s in layers),
            "underflow_calls": sum(s["underflow_calls"] for s in layers),
            "per_layer": layers,
        }
