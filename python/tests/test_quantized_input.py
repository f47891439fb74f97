"""mxlinear.linear on an activation a producer already quantized (torch.ops.mxlinear.linear_quantized)."""

import emulation
import pytest
import torch
from test_ops import assert_within_contract, fresh_gen, random_weight

import mxlinear


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("rule", ["rceil", "floor"])
def test_equals_linear_on_the_same_quantization(dtype, rule):
    # linear(x) quantizes x with rceil; with that rule both paths see the same bytes and give the
    # same bits. With floor, the pair form must match the emulation of those floor bytes.
    g = fresh_gen()
    x = (torch.randn(3, 7, 96, generator=g) * 5).to(dtype)
    w, ws = random_weight(40, 96, g)
    bias = torch.randn(40, generator=g)
    data, scales = mxlinear.quantize(x, rule)
    out = mxlinear.linear((data, scales), w, ws, bias, dtype)
    assert out.shape == (3, 7, 40) and out.dtype == dtype
    if rule == "rceil":
        assert torch.equal(out, mxlinear.linear(x, w, ws, bias))
    ref = emulation.dequantize(data, scales) @ emulation.dequantize(w, ws).T + bias.double()
    assert_within_contract(out, ref)


def test_default_out_dtype_is_bfloat16_and_e8m0_scales_are_accepted():
    g = fresh_gen()
    x = torch.randn(5, 64, generator=g, dtype=torch.bfloat16)
    w, ws = random_weight(8, 64, g)
    data, scales = mxlinear.quantize(x)
    out = mxlinear.linear((data, scales.view(torch.float8_e8m0fnu)), w, ws)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, mxlinear.linear(x, w, ws))


def test_opcheck_linear_quantized():
    g = fresh_gen()
    w, ws = random_weight(16, 64, g)
    data, scales = mxlinear.quantize(torch.randn(2, 3, 64, generator=g))
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    for args in [(data, scales, w, ws, None, None),
                 (data, scales, w, ws, torch.randn(16, generator=g), torch.float32)]:
        torch.library.opcheck(torch.ops.mxlinear.linear_quantized.default, args, test_utils=utils)


def test_compile_fullgraph_with_a_quantizing_producer():
    g = fresh_gen()
    w, ws = random_weight(24, 128, g)

    def block(x):
        return mxlinear.linear(mxlinear.quantize(torch.relu(x)), w, ws, None, torch.float32)

    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    x = torch.randn(6, 128, generator=g)
    assert torch.equal(compiled(x), block(x))


def test_bad_quantized_inputs_name_the_argument():
    w, ws = mxlinear.quantize(torch.ones(8, 64))
    data, scales = mxlinear.quantize(torch.ones(2, 64))
    cases = [
        (lambda: mxlinear.linear((data.view(torch.uint8), scales), w, ws), "'x_data'"),
        (lambda: mxlinear.linear((data, scales.float()), w, ws), "'x_scales'"),
        (lambda: mxlinear.linear((data, scales[:1]), w, ws), "'x_scales'"),
        (lambda: mxlinear.linear((data, scales[:, :1]), w, ws), "'x_scales'"),
        (lambda: mxlinear.linear((data[:, :48], scales), w, ws), "'x_data'"),
        (lambda: mxlinear.linear((data, scales), w[:, :32], ws), "'weight'"),
        (lambda: mxlinear.linear((data, scales), w, ws, None, torch.int8), "'out_dtype'"),
    ]
    for call, argument in cases:
        with pytest.raises(RuntimeError, match=argument):
            call()
    with pytest.raises(TypeError, match="'x'"):
        mxlinear.linear((data, scales, scales), w, ws)
