"""Fake (meta) implementations of the mxlinear ops: shapes and dtypes only, with the same
argument checks and messages as the C++ ops, so torch.compile and meta tensors see the same
errors as eager calls."""

import torch

from . import _C

_BLOCK = 32
_ACTIVATION_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_SCALE_DTYPES = (torch.uint8, torch.float8_e8m0fnu)


def _fail(message: str):
    raise RuntimeError(message)


def _dtype_name(dtype: torch.dtype) -> str:
    """The dtype as the C++ ops spell it: c10's ScalarType name ("Float", "BFloat16", "Byte",
    "Float8_e4m3fn"), which a tensor's type() carries ("torch.meta.FloatTensor")."""
    return torch.empty(0, dtype=dtype, device="meta").type().rsplit(".", 1)[-1][: -len("Tensor")]


def _shape(t: torch.Tensor) -> str:
    return str(list(t.shape))


def _check_k(op: str, name: str, t: torch.Tensor) -> int:
    if t.dim() < 1:
        _fail(f"{op}: argument '{name}' is a 0-d tensor; expected [..., K]")
    k = t.shape[-1]
    torch._check(
        k > 0 and k % _BLOCK == 0,
        lambda: f"{op}: argument '{name}' has K = {k} (shape {_shape(t)}); "
        "expected a positive multiple of 32",
    )
    return k


def _check_activation(op: str, x: torch.Tensor) -> int:
    if x.dtype not in _ACTIVATION_DTYPES:
        _fail(
            f"{op}: argument 'x' has dtype {_dtype_name(x.dtype)}; expected BFloat16, Half or Float"
        )
    return _check_k(op, "x", x)


def _check_weight(op: str, x, weight, weight_scale, k) -> int:
    if weight.dtype != torch.float8_e4m3fn:
        _fail(
            f"{op}: argument 'weight' has dtype {_dtype_name(weight.dtype)}; "
            "expected Float8_e4m3fn"
        )

    def weight_shape() -> str:
        return f"{op}: argument 'weight' has shape {_shape(weight)}; expected [N, {k}] (N, K of x)"

    if weight.dim() != 2:
        _fail(weight_shape())
    torch._check(weight.shape[1] == k, weight_shape)
    n = weight.shape[0]
    torch._check(n >= 1, lambda: f"{op}: argument 'weight' has N = 0; expected N >= 1")
    if weight_scale.dtype not in _SCALE_DTYPES:
        _fail(
            f"{op}: argument 'weight_scale' has dtype {_dtype_name(weight_scale.dtype)}; "
            "expected Byte (uint8) or Float8_e8m0fnu"
        )
    torch._check(
        weight_scale.dim() == 2
        and weight_scale.shape[0] == n
        and weight_scale.shape[1] == k // _BLOCK,
        lambda: f"{op}: argument 'weight_scale' has shape {_shape(weight_scale)}; "
        f"expected [{n}, {k // _BLOCK}] (N, K/32)",
    )
    for name, t in (("weight", weight), ("weight_scale", weight_scale)):
        if t.device != x.device:
            _fail(f"{op}: argument '{name}' is on {t.device}; expected x's device {x.device}")
    return n


def _check_bias(op: str, x, bias, n) -> None:
    if bias is None:
        return
    if bias.dtype not in _ACTIVATION_DTYPES:
        _fail(
            f"{op}: argument 'bias' has dtype {_dtype_name(bias.dtype)}; "
            "expected BFloat16, Half or Float"
        )
    torch._check(
        bias.dim() == 1 and bias.shape[0] == n,
        lambda: f"{op}: argument 'bias' has shape {_shape(bias)}; expected [{n}] (N)",
    )
    if bias.device != x.device:
        _fail(f"{op}: argument 'bias' is on {bias.device}; expected x's device {x.device}")


def _check_activation_mode(op: str, x: torch.Tensor, index: int) -> None:
    """The mode index as the C++ op takes it (-1 MXLINEAR_ACTIVATION's default, 0 mx, 1 bf16),
    and W8A16's refusal of a float32 x."""
    if index not in (-1, 0, 1):
        _fail(
            f"{op}: argument 'activation' has index {index}; expected -1 (MXLINEAR_ACTIVATION's "
            "default), 0 (mx, W8A8) or 1 (bf16, W8A16)"
        )
    w8a16 = index == 1 or (index == -1 and _C._default_activation() == "bf16")
    if w8a16 and x.dtype not in (torch.bfloat16, torch.float16):
        _fail(
            f"{op}: argument 'x' has dtype {_dtype_name(x.dtype)}; the activation mode 'bf16' "
            "(W8A16) multiplies a BFloat16 or Half x as it is"
        )


def _check_batch_invariant(op: str, index: int) -> None:
    """The batch-invariant index as the C++ ops take it (-1 MXLINEAR_BATCH_INVARIANT's default,
    0 off, 1 on). It changes which kernel runs, never the result's shape or dtype."""
    if index not in (-1, 0, 1):
        _fail(
            f"{op}: argument 'batch_invariant' has index {index}; expected -1 "
            "(MXLINEAR_BATCH_INVARIANT's default), 0 (off) or 1 (on)"
        )


def _check_out_dtype(op: str, dtype: torch.dtype) -> torch.dtype:
    if dtype not in _ACTIVATION_DTYPES:
        _fail(
            f"{op}: argument 'out_dtype' is {_dtype_name(dtype)}; expected BFloat16, Half or Float"
        )
    return dtype


@torch.library.register_fake("mxlinear::_quantize")
def _quantize_fake(x: torch.Tensor, rule: int):
    k = _check_activation("mxlinear.quantize", x)
    if rule not in (0, 1):
        _fail(
            f"mxlinear.quantize: argument 'rule' has index {rule}; expected 0 (rceil) or 1 (floor)"
        )
    data = x.new_empty(x.shape, dtype=torch.float8_e4m3fn)
    scales = x.new_empty((*x.shape[:-1], k // _BLOCK), dtype=torch.uint8)
    return data, scales


@torch.library.register_fake("mxlinear::linear")
def _linear_fake(
    x, weight, weight_scale, bias=None, out_dtype=None, activation=-1, batch_invariant=-1
):
    op = "mxlinear.linear"
    k = _check_activation(op, x)
    _check_activation_mode(op, x, activation)
    _check_batch_invariant(op, batch_invariant)
    n = _check_weight(op, x, weight, weight_scale, k)
    _check_bias(op, x, bias, n)
    dtype = _check_out_dtype(op, x.dtype if out_dtype is None else out_dtype)
    return x.new_empty((*x.shape[:-1], n), dtype=dtype)


@torch.library.register_fake("mxlinear::linear_quantized")
def _linear_quantized_fake(
    x_data, x_scales, weight, weight_scale, bias=None, out_dtype=None, batch_invariant=-1
):
    op = "mxlinear.linear_quantized"
    _check_batch_invariant(op, batch_invariant)
    if x_data.dtype != torch.float8_e4m3fn:
        _fail(
            f"{op}: argument 'x_data' has dtype {_dtype_name(x_data.dtype)}; "
            "expected Float8_e4m3fn"
        )
    k = _check_k(op, "x_data", x_data)
    if x_scales.dtype not in _SCALE_DTYPES:
        _fail(
            f"{op}: argument 'x_scales' has dtype {_dtype_name(x_scales.dtype)}; "
            "expected Byte (uint8) or Float8_e8m0fnu"
        )
    torch._check(
        x_scales.dim() == x_data.dim()
        and x_scales.shape[:-1] == x_data.shape[:-1]
        and x_scales.shape[-1] == k // _BLOCK,
        lambda: f"{op}: argument 'x_scales' has shape {_shape(x_scales)}; expected x_data's "
        f"shape with K/32 = {k // _BLOCK} last (x_data is {_shape(x_data)})",
    )
    if x_scales.device != x_data.device:
        _fail(
            f"{op}: argument 'x_scales' is on {x_scales.device}; "
            f"expected x_data's device {x_data.device}"
        )
    n = _check_weight(op, x_data, weight, weight_scale, k)
    _check_bias(op, x_data, bias, n)
    dtype = _check_out_dtype(op, torch.bfloat16 if out_dtype is None else out_dtype)
    return x_data.new_empty((*x_data.shape[:-1], n), dtype=dtype)
