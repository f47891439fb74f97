"""The MXFP8 contract (docs/MXFP8.md) written out in float64 torch, independently of the C++
code: what the ops are checked against."""

import torch

BLOCK = 32
E4M3_MAX = 448.0
FLT_MIN = 2.0**-126


def _e4m3_round(y: torch.Tensor) -> torch.Tensor:
    """Rounds float64 y to the nearest E4M3 value (ties to even), saturating to +-448."""
    mag = y.abs()
    _, exp = torch.frexp(mag)  # mag = m * 2^exp, m in [0.5, 1)
    e = (exp - 1).clamp(min=-6)  # normal binades from 2^-6; below that the subnormal step 2^-9
    ulp = torch.ldexp(torch.ones_like(y), e - 3)
    q = torch.round(y / ulp) * ulp  # torch.round rounds half to even
    return q.clamp(-E4M3_MAX, E4M3_MAX)


def quantize(x: torch.Tensor, rule: str = "rceil"):
    """Returns (data as uint8 bytes, scale bytes) for x [..., K]."""
    k = x.shape[-1]
    v = x.to(torch.float32).reshape(-1, k // BLOCK, BLOCK)
    nonfinite = ~torch.isfinite(v).all(dim=-1)
    amax = v.abs().amax(dim=-1).clamp(min=FLT_MIN)
    if rule == "rceil":
        t = amax / torch.tensor(E4M3_MAX, dtype=torch.float32)  # one fp32 division
        m, e = torch.frexp(t)
        log2_ceil = torch.where(m == 0.5, e - 1, e)
        b = (log2_ceil + 127).clamp(0, 254)
    elif rule == "floor":
        _, e = torch.frexp(amax)
        b = (e - 1 - 8 + 127).clamp(0, 254)
    else:
        raise ValueError(rule)
    b = torch.where(nonfinite, torch.full_like(b, 254), b)
    scaled = v.double() * torch.ldexp(torch.ones_like(amax, dtype=torch.float64), 127 - b)[..., None]
    q = _e4m3_round(torch.where(nonfinite[..., None], torch.zeros_like(scaled), scaled))
    data = q.to(torch.float8_e4m3fn).view(torch.uint8)
    data = torch.where(nonfinite[..., None], torch.full_like(data, 0x7F), data)
    scales = torch.where(nonfinite, torch.full_like(b, 0xFF), b).to(torch.uint8)
    return data.reshape(x.shape), scales.reshape(*x.shape[:-1], k // BLOCK)


def dequantize(data: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """float64 value(q) * 2^(b-127); data e4m3 (or its bytes), scales uint8 [..., K/32]."""
    if data.dtype == torch.uint8:
        data = data.view(torch.float8_e4m3fn)
    q = data.to(torch.float64).reshape(*data.shape[:-1], -1, BLOCK)
    b = scales.view(torch.uint8).to(torch.int64)
    s = torch.ldexp(torch.ones_like(b, dtype=torch.float64), b - 127)
    s = torch.where(b == 0xFF, torch.full_like(s, float("nan")), s)
    return (q * s[..., None]).reshape(data.shape)


def linear(x, weight, weight_scale, bias=None) -> torch.Tensor:
    """The unrounded float64 layer: deq(quantize(x)) @ deq(weight).T (+ bias)."""
    xd, xs = quantize(x)
    out = dequantize(xd, xs) @ dequantize(weight, weight_scale).T
    if bias is not None:
        out = out + bias.double()
    return out


def linear_w8a16(x, weight, weight_scale, bias=None) -> torch.Tensor:
    """The unrounded float64 W8A16 layer: x as it is @ deq(weight).T (+ bias)."""
    out = x.double() @ dequantize(weight, weight_scale).T
    if bias is not None:
        out = out + bias.double()
    return out


# Significant bits, smallest normal exponent and largest exponent of each output format.
_FORMATS = {
    torch.bfloat16: (8, -126, 127),
    torch.float16: (11, -14, 15),
    torch.float32: (24, -126, 127),
}


def round_once(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Rounds float64 y once to dtype, to nearest with ties to even, overflowing to +-inf.

    torch's own float64 -> bfloat16/float16 conversion goes through float32, rounding twice."""
    bits, min_exp, max_exp = _FORMATS[dtype]
    _, exp = torch.frexp(y.abs())  # |y| = m * 2^exp, m in [0.5, 1)
    e = (exp - 1).clamp(min=min_exp)  # below the smallest normal the step stays 2^(min - bits + 1)
    ulp = torch.ldexp(torch.ones_like(y), e - (bits - 1))
    q = torch.round(y / ulp) * ulp  # exact: scaling by powers of 2, half to even
    largest = (2.0 - 2.0 ** (1 - bits)) * 2.0**max_exp
    q = torch.where(q.abs() > largest, torch.copysign(torch.full_like(q, float("inf")), q), q)
    return q.to(dtype)  # exact: q is a value of dtype
