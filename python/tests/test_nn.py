"""MXFP8Linear and quantize_model against the MXFP8 contract (emulation.py)."""

import io

import emulation
import pytest
import torch

from mxlinear.convert import quantize_model
from mxlinear.nn import MXFP8Linear
from test_ops import fresh_gen, fresh_seed

ACT_DTYPES = [torch.bfloat16, torch.float16, torch.float32]
SIGNIFICANT_BITS = {torch.bfloat16: 8, torch.float16: 11, torch.float32: 24}


def blocky(rows: int, k: int, g, spread: int = 4, dtype=torch.float32) -> torch.Tensor:
    """Blocks of 32 with magnitudes 2^-spread..2^spread and elements between a quarter and all of
    the block's magnitude, random signs: quantized elements stay normal E4M3 numbers, so every
    dot product below is exact in float64 (test_exactness_precondition checks the bound)."""
    blocks = k // 32
    mag = torch.pow(2.0, torch.randint(-spread, spread + 1, (rows, blocks, 1), generator=g).double())
    sign = torch.randint(0, 2, (rows, blocks, 32), generator=g).double() * 2 - 1
    v = (0.25 + 0.75 * torch.rand(rows, blocks, 32, generator=g, dtype=torch.float64)) * mag * sign
    return v.reshape(rows, k).to(dtype)


def exact_float64_bound_bits(x, w_data, w_scale, bias) -> float:
    """log2 of (a bound on |x . w + bias|) / (the finest grid all its terms lie on): below 53 the
    float64 sum is exact in any order, so the CPU reference equals emulation's sum bit for bit."""
    xd, xs = emulation.quantize(x)
    dx, dw = emulation.dequantize(xd, xs), emulation.dequantize(w_data, w_scale)

    def finest(data, scales):
        # Each E4M3 value is a multiple of 2^(exponent - 3) >= 2^-9; its block scale shifts that.
        q = data.view(torch.float8_e4m3fn).double().abs()  # data: E4M3 bytes
        _, e = torch.frexp(q)
        grid = (e - 1 - 3).clamp(min=-9) + scales.to(torch.int64).repeat_interleave(32, -1) - 127
        nonzero = grid[q != 0]
        return int(nonzero.min()) if nonzero.numel() else 2**20  # no terms: no constraint
    grid = finest(xd, xs) + finest(w_data, w_scale)
    bound = dx.abs() @ dw.abs().T
    if bias is not None:
        _, e = torch.frexp(bias.double()[bias != 0])
        grid = min(grid, int(e.min()) - SIGNIFICANT_BITS[bias.dtype])
        bound = bound + bias.double().abs()
    return float(torch.log2(bound.max())) + 1 - grid


def assert_same_values(out: torch.Tensor, want: torch.Tensor):
    assert out.dtype == want.dtype and out.shape == want.shape
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(out), nan)
    assert torch.equal(out[~nan], want[~nan])


def random_linear(k: int, n: int, g, dtype=torch.float32, bias=True) -> torch.nn.Linear:
    lin = torch.nn.Linear(k, n, bias=bias, dtype=dtype)
    with torch.no_grad():
        lin.weight.copy_(blocky(n, k, g, spread=3))
        if bias:  # multiples of 1/16: exact in every dtype, on a grid the exactness bound allows
            lin.bias.copy_(torch.randint(-64, 65, (n,), generator=g) / 16)
    return lin


# --------------------------------------------------------------------------- from_linear


@pytest.mark.parametrize("dtype", ACT_DTYPES)
@pytest.mark.parametrize("rule", ["rceil", "floor"])
def test_from_linear_quantizes_like_the_contract(dtype, rule):
    g = fresh_gen()
    lin = torch.nn.Linear(96, 17, dtype=dtype)
    with torch.no_grad():
        block_mag = torch.pow(2.0, torch.randint(-20, 20, (17, 3), generator=g))
        lin.weight.mul_(block_mag.repeat_interleave(32, 1).to(dtype))
    layer = MXFP8Linear.from_linear(lin, rule=rule)
    want_data, want_scales = emulation.quantize(lin.weight.detach(), rule)
    assert layer.weight.dtype == torch.float8_e4m3fn and layer.weight_scale.dtype == torch.uint8
    assert torch.equal(layer.weight.view(torch.uint8), want_data)
    assert torch.equal(layer.weight_scale, want_scales)
    assert torch.equal(layer.bias, lin.bias.detach()) and layer.bias.dtype == dtype
    assert layer.bias.data_ptr() != lin.bias.data_ptr()  # a copy: the source layer can go
    assert (layer.in_features, layer.out_features, layer.rule) == (96, 17, rule)
    assert list(layer.parameters()) == []


def test_exactness_precondition():
    """The bit-exact tests below rely on blocky() keeping float64 sums exact; hold it to that."""
    g = fresh_gen()
    for _ in range(20):
        x = blocky(16, 544, g)
        lin = random_linear(544, 33, g)
        w, ws = emulation.quantize(lin.weight.detach())
        assert exact_float64_bound_bits(x, w, ws, lin.bias.detach()) < 53


@pytest.mark.parametrize("dtype", ACT_DTYPES)
@pytest.mark.parametrize("out_dtype", [None, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape_n", [((1, 32), 8), ((7, 96), 17), ((3, 5, 544), 33)])
def test_forward_bit_exact_on_cpu(dtype, out_dtype, shape_n):
    shape, n = shape_n
    g = fresh_gen()
    rows = 1
    for s in shape[:-1]:
        rows *= s
    x = blocky(rows, shape[-1], g, dtype=dtype)
    if shape[-1] > 32:
        x[0, :32] = 0.0  # an all-zero block
    if rows > 2:
        x[2, 5] = float("nan")  # a NaN block poisons its row only
    x = x.reshape(shape)
    lin = random_linear(shape[-1], n, g, dtype=dtype)
    layer = MXFP8Linear.from_linear(lin, out_dtype=out_dtype)
    out = layer(x)
    want_dtype = out_dtype or dtype
    w, ws = emulation.quantize(lin.weight.detach())
    bias = lin.bias.detach()
    assert exact_float64_bound_bits(torch.nan_to_num(x), w, ws, bias) < 53
    assert out.shape == (*shape[:-1], n)
    assert_same_values(out, emulation.round_once(emulation.linear(x, w, ws, bias), want_dtype))


def test_forward_without_bias_and_on_empty_batch():
    g = fresh_gen()
    lin = random_linear(64, 12, g, dtype=torch.bfloat16, bias=False)
    layer = MXFP8Linear.from_linear(lin)
    assert layer.bias is None
    x = blocky(4, 64, g, dtype=torch.bfloat16)
    w, ws = emulation.quantize(lin.weight.detach())
    assert_same_values(layer(x), emulation.round_once(emulation.linear(x, w, ws), torch.bfloat16))
    assert layer(torch.empty(0, 64, dtype=torch.bfloat16)).shape == (0, 12)


def test_forward_accepts_prequantized_input():
    import mxlinear

    g = fresh_gen()
    layer = MXFP8Linear.from_linear(random_linear(96, 24, g))
    x = blocky(5, 96, g, dtype=torch.bfloat16)
    out = layer(mxlinear.quantize(x))
    assert out.dtype == torch.bfloat16  # the contract's default for a quantized input
    assert_same_values(out, MXFP8Linear.from_quantized(layer.weight, layer.weight_scale, layer.bias,
                                                       out_dtype=torch.bfloat16)(x))


def test_from_linear_rejects_bad_layers():
    with pytest.raises(ValueError, match=r"in_features = 48.*multiple of 32"):
        MXFP8Linear.from_linear(torch.nn.Linear(48, 8))
    with pytest.raises(TypeError, match=r"'linear' is a Conv1d; expected torch.nn.Linear"):
        MXFP8Linear.from_linear(torch.nn.Conv1d(32, 8, 1))
    with pytest.raises(TypeError, match=r"weight dtype torch.float64"):
        MXFP8Linear.from_linear(torch.nn.Linear(32, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"'rule' is 'nearest'"):
        MXFP8Linear.from_linear(torch.nn.Linear(32, 8), rule="nearest")


def test_from_linear_on_meta_keeps_the_device():
    with torch.device("meta"):
        lin = torch.nn.Linear(64, 16, dtype=torch.bfloat16)
    layer = MXFP8Linear.from_linear(lin)
    assert layer.weight.device.type == "meta" and layer.weight.dtype == torch.float8_e4m3fn
    assert layer.weight_scale.shape == (16, 2) and layer.bias.dtype == torch.bfloat16


# --------------------------------------------------------------------------- from_quantized


def test_from_quantized_uses_the_tensors_and_views_e8m0_as_uint8():
    g = fresh_gen()
    w, ws = emulation.quantize(blocky(8, 64, g))
    w = w.view(torch.float8_e4m3fn)
    layer = MXFP8Linear.from_quantized(w, ws.view(torch.float8_e8m0fnu), out_dtype=torch.float32)
    assert layer.weight is w and layer.weight_scale.dtype == torch.uint8
    assert layer.weight_scale.data_ptr() == ws.data_ptr() and torch.equal(layer.weight_scale, ws)
    assert (layer.in_features, layer.out_features, layer.rule, layer.bias) == (64, 8, None, None)
    x = blocky(3, 64, g, dtype=torch.float16)
    assert_same_values(layer(x), emulation.linear(x, w, ws).float())


def test_from_quantized_names_the_bad_argument():
    w = torch.zeros(8, 64, dtype=torch.float8_e4m3fn)
    ws = torch.zeros(8, 2, dtype=torch.uint8)
    cases = [
        (TypeError, r"'weight' is a list", lambda: MXFP8Linear.from_quantized([1.0], ws)),
        (TypeError, r"'weight' has dtype torch.bfloat16; expected float8_e4m3fn",
         lambda: MXFP8Linear.from_quantized(w.bfloat16(), ws)),
        (ValueError, r"'weight' has shape \[512\]", lambda: MXFP8Linear.from_quantized(w.reshape(-1), ws)),
        (ValueError, r"'weight' has shape \[8, 48\]", lambda: MXFP8Linear.from_quantized(w[:, :48], ws)),
        (TypeError, r"'weight_scale' has dtype torch.float32",
         lambda: MXFP8Linear.from_quantized(w, ws.float())),
        (ValueError, r"'weight_scale' has shape \[8, 4\]; expected \[8, 2\]",
         lambda: MXFP8Linear.from_quantized(w, torch.zeros(8, 4, dtype=torch.uint8))),
        (ValueError, r"'weight_scale' has shape \[2, 8\]",
         lambda: MXFP8Linear.from_quantized(w, ws.T.contiguous())),
        (ValueError, r"'bias' has shape \[7\]; expected \[8\]",
         lambda: MXFP8Linear.from_quantized(w, ws, torch.zeros(7))),
        (TypeError, r"'bias' has dtype torch.int32",
         lambda: MXFP8Linear.from_quantized(w, ws, torch.zeros(8, dtype=torch.int32))),
        (ValueError, r"'weight_scale' is on meta", lambda: MXFP8Linear.from_quantized(w, ws.to("meta"))),
        (TypeError, r"'out_dtype' is torch.int8",
         lambda: MXFP8Linear.from_quantized(w, ws, out_dtype=torch.int8)),
        (ValueError, r"'rule' is 'up'", lambda: MXFP8Linear.from_quantized(w, ws, rule="up")),
    ]
    for error, message, call in cases:
        with pytest.raises(error, match=message):
            call()


def test_constructor_checks_sizes():
    with pytest.raises(ValueError, match=r"'in_features' is 40"):
        MXFP8Linear(40, 8)
    with pytest.raises(ValueError, match=r"'out_features' is 0"):
        MXFP8Linear(32, 0)
    with pytest.raises(TypeError, match=r"'bias_dtype' is torch.int64"):
        MXFP8Linear(32, 8, bias_dtype=torch.int64)


# --------------------------------------------------------------------------- module plumbing


def test_state_dict_round_trip_through_torch_save():
    g = fresh_gen()
    src = MXFP8Linear.from_linear(random_linear(128, 20, g, dtype=torch.bfloat16), out_dtype=torch.float32)
    buffer = io.BytesIO()
    torch.save(src.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer)
    assert list(state) == ["weight", "weight_scale", "bias"]
    dst = MXFP8Linear(128, 20, bias_dtype=torch.bfloat16, out_dtype=torch.float32)
    dst.load_state_dict(state)
    for name in ("weight", "weight_scale", "bias"):
        a, b = getattr(src, name), getattr(dst, name)
        assert a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    x = blocky(6, 128, g, dtype=torch.bfloat16)
    assert torch.equal(dst(x), src(x))


def test_load_state_dict_takes_e8m0_scales_and_rejects_float_weights():
    g = fresh_gen()
    src = MXFP8Linear.from_linear(random_linear(64, 8, g))
    state = dict(src.state_dict())
    state["weight_scale"] = state["weight_scale"].view(torch.float8_e8m0fnu)
    dst = MXFP8Linear(64, 8)
    dst.load_state_dict(state)
    assert dst.weight_scale.dtype == torch.uint8 and torch.equal(dst.weight_scale, src.weight_scale)
    with pytest.raises(RuntimeError, match=r"'weight' has dtype torch.float32; expected float8_e4m3fn"):
        dst.load_state_dict({**state, "weight": src.dequantized_weight()})
    with pytest.raises(RuntimeError, match=r"'weight_scale' has dtype torch.float32"):
        dst.load_state_dict({**state, "weight_scale": src.weight_scale.float()})
    with pytest.raises(RuntimeError, match=r"size mismatch for weight_scale"):
        dst.load_state_dict({**state, "weight_scale": src.weight_scale[:, :1]})
    assert torch.equal(dst.weight_scale, src.weight_scale)  # unchanged by the failed loads


def test_dtype_casts_move_the_bias_but_not_the_quantized_weight():
    g = fresh_gen()
    layer = MXFP8Linear.from_linear(random_linear(64, 8, g))
    w_bytes, s_bytes = layer.weight.view(torch.uint8).clone(), layer.weight_scale.clone()
    casts = [(lambda m: m.half(), torch.float16), (lambda m: m.to(torch.bfloat16), torch.bfloat16),
             (lambda m: m.float(), torch.float32), (lambda m: m.to("cpu"), torch.float32)]
    for cast, bias_dtype in casts:
        cast(layer)
        assert layer.weight.dtype == torch.float8_e4m3fn and layer.bias.dtype == bias_dtype
        assert torch.equal(layer.weight.view(torch.uint8), w_bytes)
        assert torch.equal(layer.weight_scale, s_bytes)


def test_dequantized_weight_is_exact_for_every_scale_byte():
    g = fresh_gen()
    data = torch.randint(0, 256, (255, 64), generator=g, dtype=torch.uint8)
    data[(data & 0x7F) == 0x7F] = 0x00  # E4M3 NaN codes are covered by the scale's NaN below
    scales = torch.arange(255 * 2, dtype=torch.int64).remainder(256).to(torch.uint8).reshape(255, 2)
    layer = MXFP8Linear.from_quantized(data.view(torch.float8_e4m3fn), scales)
    got = layer.dequantized_weight()
    assert got.dtype == torch.float32
    assert_same_values(got, emulation.dequantize(data, scales).float())
    assert torch.isnan(got[scales.repeat_interleave(32, 1) == 0xFF]).all()


def test_repr_names_sizes_rule_and_dtypes():
    layer = MXFP8Linear.from_linear(torch.nn.Linear(64, 8, dtype=torch.bfloat16), rule="floor",
                                    out_dtype=torch.float32)
    assert repr(layer) == ("MXFP8Linear(in_features=64, out_features=8, bias=bfloat16, rule=floor, "
                           "out_dtype=float32)")


def test_torch_compile_fullgraph_matches_eager():
    g = fresh_gen()
    stack = torch.nn.Sequential(
        MXFP8Linear.from_linear(random_linear(64, 96, g, dtype=torch.bfloat16)),
        MXFP8Linear.from_linear(random_linear(96, 32, g, dtype=torch.bfloat16), out_dtype=torch.float32),
    )
    # inductor: the graph is the two ops only, so no C++ is generated and it compiles in seconds.
    compiled = torch.compile(stack, fullgraph=True, backend="inductor")
    # aot_eager traces the ops' fake implementations among pointwise ops, which inductor would
    # compile with a C++ compiler for about a minute on two cores.
    mixed = torch.nn.Sequential(stack[0], torch.nn.GELU(), stack[1])
    compiled_mixed = torch.compile(mixed, fullgraph=True, backend="aot_eager")
    for shape in [(7, 64), (2, 3, 64)]:
        x = torch.randn(*shape, generator=g, dtype=torch.bfloat16)
        assert_same_values(compiled(x), stack(x))
        assert_same_values(compiled_mixed(x), mixed(x))


# --------------------------------------------------------------------------- quantize_model


class Block(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)
        self.odd = torch.nn.Linear(width, 24)  # in_features is fine, out_features is free

    def forward(self, x):
        return self.down(torch.relu(self.up(x))) + self.odd(x).sum(-1, keepdim=True)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(64), Block(64)])
        self.narrow = torch.nn.Linear(64, 40)
        self.head = torch.nn.Linear(40, 10)  # in_features 40: cannot be MX-quantized
        self.attn = torch.nn.MultiheadAttention(64, 4, batch_first=True)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        x = x + self.attn(x, x, x, need_weights=False)[0]
        return self.head(self.narrow(x))


def converted_names(model):
    return [n for n, m in model.named_modules() if isinstance(m, MXFP8Linear)]


def test_quantize_model_converts_every_convertible_linear():
    g = fresh_gen()  # also reseeds the global generator that Net() draws from
    model = Net()
    reference = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    result = quantize_model(model, rule="floor")
    want = [f"blocks.{i}.{n}" for i in (0, 1) for n in ("up", "down", "odd")] + ["narrow"]
    assert result.converted == want and converted_names(model) == want
    assert result.skipped == {
        "head": "in_features = 40 is not a multiple of 32",
        "attn.out_proj": "NonDynamicallyQuantizableLinear is a subclass of nn.Linear; "
                         "only nn.Linear itself is converted",
    }
    for name in want:
        layer = model.get_submodule(name)
        data, scales = emulation.quantize(reference[name].weight.detach(), "floor")
        assert layer.rule == "floor" and torch.equal(layer.weight.view(torch.uint8), data)
        assert torch.equal(layer.weight_scale, scales)
    assert type(model.head) is torch.nn.Linear
    out = model(torch.randn(2, 5, 64, generator=g))  # the whole model still runs, attention included
    assert out.shape == (2, 5, 10) and torch.isfinite(out).all()


def test_quantize_model_include_exclude_patterns_and_callables():
    model = Net()
    r = quantize_model(model, include=["blocks.*"], exclude=["*.odd", "blocks.1.down"])
    assert r.converted == ["blocks.0.up", "blocks.0.down", "blocks.1.up"] and r.skipped == {}
    assert converted_names(model) == r.converted

    model = Net()
    r = quantize_model(model, include=lambda name, m: m.out_features == 128, exclude=("blocks.0.*",))
    assert r.converted == ["blocks.1.up"]

    model = Net()
    r = quantize_model(model, include=(p for p in ["narrow", "head*"]))  # a one-shot iterable
    assert r.converted == ["narrow"] and list(r.skipped) == ["head"]


def test_quantize_model_exact_names_must_be_convertible():
    with pytest.raises(ValueError, match=r"'head'.*in_features = 40 is not a multiple of 32"):
        quantize_model(Net(), include=["narrow", "head"])
    with pytest.raises(ValueError, match=r"'blocks.0.upp', which is no module"):
        quantize_model(Net(), include=["blocks.0.upp"])
    with pytest.raises(ValueError, match=r"'blocks.0', which is a Block"):
        quantize_model(Net(), include=["blocks.0"])
    with pytest.raises(ValueError, match=r"'attn.out_proj'.*subclass"):
        quantize_model(Net(), include=["attn.out_proj"])
    model = Net()  # excluded wins over included, so nothing to object to
    assert quantize_model(model, include=["head", "narrow"], exclude=["head"]).converted == ["narrow"]
    with pytest.raises(TypeError, match=r"'include' is the string 'narrow'"):
        quantize_model(Net(), include="narrow")
    with pytest.raises(TypeError, match=r"itself an nn.Linear"):
        quantize_model(torch.nn.Linear(32, 8))


def test_quantize_model_replaces_a_shared_layer_everywhere_once():
    shared = torch.nn.Linear(64, 64)
    model = torch.nn.Sequential(shared, torch.nn.ReLU(), shared)
    r = quantize_model(model)
    assert r.converted == ["0"]
    assert isinstance(model[0], MXFP8Linear) and model[2] is model[0]


def test_quantize_model_is_deterministic():
    fresh_seed()
    a = Net()
    b = Net()
    b.load_state_dict(a.state_dict())
    ra, rb = quantize_model(a), quantize_model(b)
    assert ra == rb
    for (na, ta), (nb, tb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert na == nb and torch.equal(ta.view(torch.uint8) if ta.element_size() == 1 else ta,
                                        tb.view(torch.uint8) if tb.element_size() == 1 else tb)


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_cuda_from_linear_keeps_the_device_and_the_bytes():
    g = fresh_gen()
    lin = random_linear(256, 48, g, dtype=torch.bfloat16)
    cpu = MXFP8Linear.from_linear(lin)
    gpu = MXFP8Linear.from_linear(lin.cuda())
    assert gpu.weight.is_cuda and gpu.weight_scale.is_cuda and gpu.bias.is_cuda
    assert torch.equal(gpu.weight.cpu().view(torch.uint8), cpu.weight.view(torch.uint8))
    assert torch.equal(gpu.weight_scale.cpu(), cpu.weight_scale)


@pytest.mark.gpu
def test_cuda_forward_within_contract_and_module_moves():
    g = fresh_gen()
    k, n = 544, 200
    layer = MXFP8Linear.from_linear(random_linear(k, n, g), out_dtype=torch.float32)
    x = blocky(37, k, g, dtype=torch.bfloat16)
    ref = emulation.linear(x, layer.weight, layer.weight_scale, layer.bias)
    layer.cuda()
    assert layer.weight.dtype == torch.float8_e4m3fn and layer.weight.is_cuda
    out = layer(x.cuda()).cpu().double()
    # the contract's float32-output bound (docs/MXFP8.md)
    assert float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref)) <= 1e-5
    cpu_out = layer.cpu()(x).double()
    assert float(torch.linalg.vector_norm(out - cpu_out) / torch.linalg.vector_norm(ref)) <= 1e-5
