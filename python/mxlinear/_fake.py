"""Fake (meta) implementations of the mxlinear ops: shapes and dtypes only, with the same
argument checks as the C++ ops, so torch.compile and meta tensors see the same errors."""

import torch

_BLOCK = 32
_ACTIVATION_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _check_activation(op: str, x: torch.Tensor) -> int:
    if x.dtype not in _ACTIVATION_DTYPES:
        raise ValueError(
            f"{op}: argument 'x' has dtype {x.dtype}; expected bfloat16, float16 or float32"
        )
    if x.dim() < 1:
        raise ValueError(f"{op}: argument 'x' is a 0-d tensor; expected [..., K]")
    k = x.shape[-1]
    torch._check(
        k > 0 and k % _BLOCK == 0,
        lambda: f"{op}: argument 'x' has K = {k}; expected a positive multiple of 32",
    )
    return k


@torch.library.register_fake("mxlinear::quantize")
def _quantize_fake(x: torch.Tensor, rule: str = "rceil"):
    k = _check_activation("mxlinear.quantize", x)
    if rule not in ("rceil", "floor"):
        raise ValueError(
            f"mxlinear.quantize: argument 'rule' is {rule!r}; expected 'rceil' or 'floor'"
        )
    data = x.new_empty(x.shape, dtype=torch.float8_e4m3fn)
    scales = x.new_empty((*x.shape[:-1], k // _BLOCK), dtype=torch.uint8)
    return data, scales


@torch.library.register_fake("mxlinear::linear")
def _linear_fake(x, weight, weight_scale, bias=None, out_dtype=None):
    op = "mxlinear.linear"
    k = _check_activation(op, x)
    if weight.dtype != torch.float8_e4m3fn:
        raise ValueError(f"{op}: argument 'weight' has dtype {weight.dtype}; expected float8_e4m3fn")
    if weight.dim() != 2:
        raise ValueError(f"{op}: argument 'weight' has shape {list(weight.shape)}; expected [N, K]")
    torch._check(
        weight.shape[1] == k,
        lambda: f"{op}: argument 'weight' has shape {list(weight.shape)}; expected [N, {k}]",
    )
    n = weight.shape[0]
    if weight_scale.dtype not in (torch.uint8, torch.float8_e8m0fnu):
        raise ValueError(
            f"{op}: argument 'weight_scale' has dtype {weight_scale.dtype}; "
            "expected uint8 or float8_e8m0fnu"
        )
    torch._check(
        weight_scale.dim() == 2
        and weight_scale.shape[0] == n
        and weight_scale.shape[1] == k // _BLOCK,
        lambda: f"{op}: argument 'weight_scale' has shape {list(weight_scale.shape)}; "
        f"expected [{n}, {k // _BLOCK}] (N, K/32)",
    )
    if bias is not None:
        if bias.dtype not in _ACTIVATION_DTYPES:
            raise ValueError(f"{op}: argument 'bias' has dtype {bias.dtype}")
        torch._check(
            bias.dim() == 1 and bias.shape[0] == n,
            lambda: f"{op}: argument 'bias' has shape {list(bias.shape)}; expected [{n}]",
        )
    dtype = x.dtype if out_dtype is None else out_dtype
    if dtype not in _ACTIVATION_DTYPES:
        raise ValueError(f"{op}: argument 'out_dtype' is {dtype}; expected bfloat16, float16 or float32")
    return x.new_empty((*x.shape[:-1], n), dtype=dtype)
