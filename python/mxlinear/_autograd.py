"""Backward formulas of the ops ``mxlinear::linear`` and ``mxlinear::linear_quantized``, so that
gradients reach what feeds an MXFP8 layer (adapters, or layers trained ahead of a frozen quantized
model) instead of stopping there unnoticed.

The weights are constants: a call whose ``weight`` or ``weight_scale`` requires grad is refused,
as is ``linear_quantized`` on ``x_data`` or ``x_scales`` that require grad (e4m3 codes and scale
bytes have no gradient; quantize inside ``linear`` instead). The gradient of ``x`` is
``grad_y @ W``, ``W`` the exactly dequantized weight: the exact derivative in the W8A16 mode; in
the W8A8 mode it passes through the activation's quantization as if it were the identity (the
straight-through estimator). The bias gets ``grad_y`` summed over the rows. The backward
dequantizes the weight once per call, in bfloat16 for a bfloat16 ``x`` (exact: e4m3 times a power
of two fits bfloat16 down to 2^-133) and in float32 otherwise (float16's range cannot hold it)."""

import torch

from .nn import _dequantized


def _refuse_weight_grads(op: str, named: dict) -> None:
    for name, tensor in named.items():
        if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
            raise RuntimeError(
                f"{op}: argument '{name}' requires grad; expected a constant (mxlinear "
                "differentiates x and bias, not the quantized operands)"
            )


def _bias_grad(grad: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return grad.reshape(-1, grad.shape[-1]).sum(0, dtype=torch.float32).to(dtype)


def _linear_setup_context(ctx, inputs, output) -> None:
    x, weight, weight_scale, bias = inputs[:4]
    _refuse_weight_grads("mxlinear.linear", {"weight": weight, "weight_scale": weight_scale})
    ctx.save_for_backward(weight, weight_scale)
    ctx.x_dtype = x.dtype
    ctx.bias_dtype = None if bias is None else bias.dtype


def _linear_backward(ctx, grad: torch.Tensor):
    weight, weight_scale = ctx.saved_tensors
    grad_x = grad_bias = None
    if ctx.needs_input_grad[0]:
        compute = torch.bfloat16 if ctx.x_dtype == torch.bfloat16 else torch.float32
        w = _dequantized(weight, weight_scale).to(compute)
        grad_x = torch.matmul(grad.to(compute), w).to(ctx.x_dtype)
    if ctx.bias_dtype is not None and ctx.needs_input_grad[3]:
        grad_bias = _bias_grad(grad, ctx.bias_dtype)
    return grad_x, None, None, grad_bias, None, None, None


def _linear_quantized_setup_context(ctx, inputs, output) -> None:
    x_data, x_scales, weight, weight_scale, bias = inputs[:5]
    _refuse_weight_grads(
        "mxlinear.linear_quantized",
        {"x_data": x_data, "x_scales": x_scales, "weight": weight, "weight_scale": weight_scale},
    )
    ctx.bias_dtype = None if bias is None else bias.dtype


def _linear_quantized_backward(ctx, grad: torch.Tensor):
    grad_bias = None
    if ctx.bias_dtype is not None and ctx.needs_input_grad[4]:
        grad_bias = _bias_grad(grad, ctx.bias_dtype)
    return None, None, None, None, grad_bias, None, None


torch.library.register_autograd(
    "mxlinear::linear", _linear_backward, setup_context=_linear_setup_context
)
torch.library.register_autograd(
    "mxlinear::linear_quantized",
    _linear_quantized_backward,
    setup_context=_linear_quantized_setup_context,
)
