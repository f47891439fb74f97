"""Gradients through the linear ops: x gets grad_y @ W (W the dequantized weight, straight through
the activation's quantization in W8A8), the bias the sum of grad_y over the rows, and a quantized
operand that requires grad is refused."""

import emulation
import pytest
import torch

import mxlinear
from mxlinear.nn import MXFP8Linear
from test_ops import fresh_gen, random_weight

SIGNIFICANT_BITS = {torch.bfloat16: 8, torch.float16: 11, torch.float32: 24}


def assert_rounded_within(got: torch.Tensor, exact: torch.Tensor, slack: torch.Tensor):
    """|got - exact| <= one ulp of got's dtype at |exact| plus `slack` (the float32 sum's error)."""
    assert torch.isfinite(exact).all()
    _, e = torch.frexp(exact.abs())  # |exact| in [2^(e-1), 2^e)
    ulp = torch.ldexp(torch.ones_like(exact), e - SIGNIFICANT_BITS[got.dtype])
    err = (got.double() - exact).abs()
    assert (err <= ulp + slack).all(), f"worst excess {(err - ulp - slack).max().item()}"


CASES = [("mx", torch.bfloat16), ("mx", torch.float16), ("mx", torch.float32),
         ("bf16", torch.bfloat16), ("bf16", torch.float16)]


@pytest.mark.parametrize("activation,dtype", CASES)
@pytest.mark.parametrize("shape,n", [((2, 3, 96), 40), ((1, 64), 8), ((0, 64), 8)])
def test_x_and_bias_get_their_gradients(activation, dtype, shape, n):
    g = fresh_gen()
    w, ws = random_weight(n, shape[-1], g)
    x = torch.randn(shape, generator=g).to(dtype).requires_grad_()
    bias = torch.randn(n, generator=g).to(dtype).requires_grad_()
    y = mxlinear.linear(x, w, ws, bias, activation=activation)
    grad_y = torch.randn(y.shape, generator=g).to(y.dtype)
    y.backward(grad_y)

    wd = emulation.dequantize(w, ws)  # float64 [N, K]
    gy = grad_y.double()
    assert x.grad.dtype == dtype and x.grad.shape == x.shape
    assert_rounded_within(x.grad, gy @ wd, n * 2.0**-24 * (gy.abs() @ wd.abs()))
    rows = gy.reshape(-1, n)
    assert bias.grad.dtype == dtype and bias.grad.shape == (n,)
    assert_rounded_within(bias.grad, rows.sum(0), rows.shape[0] * 2.0**-24 * rows.abs().sum(0))


def test_a_layer_ahead_of_an_mxfp8_layer_trains():
    g = fresh_gen()
    ahead = torch.nn.Linear(64, 96)
    layer = MXFP8Linear.from_linear(torch.nn.Linear(96, 24))
    x = torch.randn(5, 64, generator=g)
    h = ahead(x)
    h.retain_grad()
    grad_y = torch.randn(5, 24, generator=g)
    layer(h).backward(grad_y)
    wd = layer.dequantized_weight().double()
    gy = grad_y.double()
    assert_rounded_within(h.grad, gy @ wd, 24 * 2.0**-24 * (gy.abs() @ wd.abs()))
    assert ahead.weight.grad is not None and ahead.weight.grad.abs().sum() > 0
    torch.testing.assert_close(ahead.weight.grad, h.grad.T @ x)


def test_quantized_activation_passes_the_bias_gradient_only():
    g = fresh_gen()
    w, ws = random_weight(16, 64, g)
    data, scales = mxlinear.quantize(torch.randn(2, 7, 64, generator=g))
    bias = torch.randn(16, generator=g).requires_grad_()
    y = mxlinear.linear((data, scales), w, ws, bias, out_dtype=torch.float32)
    grad_y = torch.randn(y.shape, generator=g)
    y.backward(grad_y)
    rows = grad_y.double().reshape(-1, 16)
    assert_rounded_within(bias.grad, rows.sum(0), 14 * 2.0**-24 * rows.abs().sum(0))


def test_quantized_operands_that_require_grad_are_refused():
    g = fresh_gen()
    w, ws = random_weight(16, 64, g)
    x = torch.randn(3, 64, generator=g)
    with pytest.raises(RuntimeError, match="mxlinear.linear: argument 'weight' requires grad"):
        mxlinear.linear(x, w.clone().requires_grad_(), ws)
    data, scales = mxlinear.quantize(x)
    with pytest.raises(RuntimeError,
                       match="mxlinear.linear_quantized: argument 'x_data' requires grad"):
        mxlinear.linear((data.clone().requires_grad_(), scales), w, ws)
    # Without grad mode nothing is recorded, so nothing is refused.
    with torch.no_grad():
        assert mxlinear.linear(x, w.clone().requires_grad_(), ws).shape == (3, 16)


def test_opcheck_with_inputs_that_require_grad():
    g = fresh_gen()
    w, ws = random_weight(16, 64, g)
    bias = torch.randn(16, generator=g).requires_grad_()
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    for activation, dtype in CASES:
        x = torch.randn(2, 3, 64, generator=g).to(dtype).requires_grad_()
        index = mxlinear.ACTIVATIONS.index(activation)
        torch.library.opcheck(torch.ops.mxlinear.linear.default,
                              (x, w, ws, bias, None, index, -1), test_utils=utils)
    data, scales = mxlinear.quantize(torch.randn(5, 64, generator=g))
    torch.library.opcheck(torch.ops.mxlinear.linear_quantized.default,
                          (data, scales, w, ws, bias, None, -1), test_utils=utils)
