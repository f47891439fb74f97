"""MXFP8 linear layers for NVIDIA Hopper as PyTorch custom ops.

``quantize`` and ``linear`` call ``torch.ops.mxlinear.quantize`` and ``torch.ops.mxlinear.linear``:
on CPU tensors the library's reference, on CUDA tensors its GPU kernels on the current stream.
The numeric contract is docs/MXFP8.md in the source tree.
"""

import torch

from . import _C  # registers torch.ops.mxlinear.*
from . import _fake  # noqa: F401  (fake implementations for torch.compile and meta tensors)

__version__: str = _C.__version__

__all__ = ["quantize", "linear", "__version__"]


def quantize(x: torch.Tensor, rule: str = "rceil") -> tuple[torch.Tensor, torch.Tensor]:
    """MX-quantizes ``x`` ([..., K], K a multiple of 32; bfloat16, float16 or float32).

    Returns ``(data, scales)``: ``data`` float8_e4m3fn [..., K] and ``scales`` uint8 [..., K/32]
    (E8M0 exponents, bias 127). ``rule`` is ``"rceil"`` (the default) or ``"floor"``.
    """
    return torch.ops.mxlinear.quantize(x, rule)


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``deq(quantize(x)) @ deq(weight, weight_scale).T (+ bias)``.

    ``x`` [..., K] bfloat16, float16 or float32; ``weight`` float8_e4m3fn [N, K]; ``weight_scale``
    uint8 or float8_e8m0fnu [N, K/32]; ``bias`` [N]. The result is [..., N] in ``out_dtype``
    (default: ``x.dtype``).
    """
    return torch.ops.mxlinear.linear(x, weight, weight_scale, bias, out_dtype)
