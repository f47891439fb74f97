"""The activation modes on CPU: W8A8 ("mx", the default) and W8A16 ("bf16", a bfloat16 or float16
x multiplied as it is by the dequantized weights), against float64 computed here."""

import emulation
import pytest
import torch
from python_process import run_python
from test_ops import assert_within_contract, fresh_gen, random_weight

import mxlinear
from mxlinear.convert import quantize_model
from mxlinear.nn import MXFP8Linear

HALF_DTYPES = [torch.bfloat16, torch.float16]


def exact_operands(m: int, n: int, k: int, x_dtype, g):
    """x: small integers times 2^-4..2^4 (values of bfloat16 and float16); weights: every finite
    E4M3 value under scales 2^-15..2^-5; bias: small integers. Every product lies on the grid
    2^-28 and below 2^11, so any float64 sum of K = 256 of them (below 2^19) is exact, and the
    layer's result is one rounding of the exact value: in range of float16 mostly, at times past
    it or among its subnormals."""
    x = (torch.randint(-8, 9, (m, k), generator=g) * torch.pow(
        2.0, torch.randint(-4, 5, (m, k), generator=g).double())).to(x_dtype)
    codes = torch.randint(0, 256, (n, k), generator=g, dtype=torch.int64)
    codes = torch.where((codes & 0x7F) == 0x7F, codes & 0x80, codes)  # no NaN codes
    w = codes.to(torch.uint8).view(torch.float8_e4m3fn)
    ws = torch.randint(112, 123, (n, k // 32), generator=g).to(torch.uint8)
    bias = torch.randint(-16, 17, (n,), generator=g).to(torch.bfloat16)
    return x, w, ws, bias


# --------------------------------------------------------------------------- W8A16 numerics


@pytest.mark.parametrize("x_dtype", HALF_DTYPES)
@pytest.mark.parametrize("out_dtype", [None, torch.bfloat16, torch.float16, torch.float32])
def test_w8a16_is_one_rounding_of_the_exact_product(x_dtype, out_dtype):
    g = fresh_gen()
    m, n, k = 9, 24, 256
    x, w, ws, bias = exact_operands(m, n, k, x_dtype, g)
    exact = x.double() @ emulation.dequantize(w, ws).T + bias.double()
    out = mxlinear.linear(x, w, ws, bias, out_dtype, activation="bf16")
    dtype = out_dtype or x_dtype
    assert out.dtype == dtype and out.shape == (m, n)
    assert torch.equal(out, emulation.round_once(exact, dtype))
    # The same through the op's mode index, and without a bias.
    assert torch.equal(torch.ops.mxlinear.linear(x, w, ws, bias, out_dtype, 1), out)
    nobias = mxlinear.linear(x, w, ws, None, out_dtype, activation="bf16")
    assert torch.equal(nobias, emulation.round_once(exact - bias.double(), dtype))


def test_round_once_is_a_single_rounding():
    # 1 + 2^-8 + 2^-30 is above bfloat16's tie 1 + 2^-8: one rounding goes up to 1 + 2^-7, while
    # float32 first would land on the tie and round to even (1).
    y = torch.tensor([1 + 2.0**-8 + 2.0**-30, 1 + 2.0**-8, 3.0e38 * 2, -70000.0, 2.0**-140],
                     dtype=torch.float64)
    got = emulation.round_once(y, torch.bfloat16).tolist()
    assert got[:3] == [1 + 2.0**-7, 1.0, float("inf")]
    assert emulation.round_once(y[3:4], torch.float16).tolist() == [float("-inf")]
    assert got[4] == 0.0  # below half of bfloat16's smallest subnormal, 2^-133


@pytest.mark.parametrize("x_dtype", HALF_DTYPES)
@pytest.mark.parametrize("out_dtype", [None, torch.float32])
@pytest.mark.parametrize("mnk", [(1, 8, 32), (7, 17, 96), (50, 33, 544)])
def test_w8a16_matches_float64_on_random_inputs(x_dtype, out_dtype, mnk):
    m, n, k = mnk
    g = fresh_gen()
    x = (torch.randn(2, m, k, generator=g) * 3).to(x_dtype)
    w, ws = random_weight(n, k, g)
    bias = torch.randn(n, generator=g).to(x_dtype)
    out = mxlinear.linear(x, w, ws, bias, out_dtype, activation="bf16")
    assert out.shape == (2, m, n) and out.dtype == (out_dtype or x_dtype)
    ref = emulation.linear_w8a16(x, w, ws, bias)
    assert_within_contract(out, ref)
    # W8A8 of the same x is a different layer: x's quantization shows in the result.
    mx = mxlinear.linear(x, w, ws, bias, torch.float32, activation="mx")
    assert_within_contract(mx, emulation.linear(x.reshape(-1, k), w, ws, bias).reshape(2, m, n))
    assert not torch.equal(mx, mxlinear.linear(x, w, ws, bias, torch.float32, activation="bf16"))


def test_w8a16_empty_rows_and_e8m0_scales():
    g = fresh_gen()
    w, ws = random_weight(4, 64, g)
    out = mxlinear.linear(torch.empty(0, 64, dtype=torch.bfloat16), w, ws, activation="bf16")
    assert out.shape == (0, 4) and out.dtype == torch.bfloat16
    x = torch.randn(3, 64, generator=g, dtype=torch.float16)
    a = mxlinear.linear(x, w, ws.view(torch.float8_e8m0fnu), activation="bf16")
    assert torch.equal(a, mxlinear.linear(x, w, ws, activation="bf16"))


# --------------------------------------------------------------------------- refusals


def test_w8a16_refuses_a_float32_x_naming_it():
    w, ws = mxlinear.quantize(torch.ones(8, 64))
    for rows in (2, 0):  # refused before the empty-input shortcut too
        with pytest.raises(RuntimeError, match=r"argument 'x' has dtype Float; .*W8A16"):
            mxlinear.linear(torch.ones(rows, 64), w, ws, activation="bf16")
    with pytest.raises(RuntimeError, match=r"argument 'x' has dtype Float; .*W8A16"):
        torch.ops.mxlinear.linear(torch.ones(2, 64), w, ws, None, None, 1)
    # W8A8 takes it.
    assert mxlinear.linear(torch.ones(2, 64), w, ws, activation="mx").dtype == torch.float32


@pytest.mark.parametrize("value", ["BF16", "w8a16", "", "fp8", 1, b"mx"])
def test_bad_activation_is_a_value_error_naming_it(value):
    w, ws = mxlinear.quantize(torch.ones(8, 64))
    x = torch.ones(2, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=rf"argument 'activation' is {value!r}; expected None"):
        mxlinear.linear(x, w, ws, activation=value)
    with pytest.raises(ValueError, match=r"argument 'activation'"):
        MXFP8Linear(64, 8, activation=value)
    with pytest.raises(ValueError, match=r"argument 'activation'"):
        MXFP8Linear.from_quantized(w, ws, activation=value)
    with pytest.raises(ValueError, match=r"quantize_model: argument 'activation'"):
        quantize_model(torch.nn.Sequential(torch.nn.Linear(64, 8)), activation=value)


def test_bad_mode_index_is_named_by_the_op_and_its_fake():
    w, ws = mxlinear.quantize(torch.ones(8, 64))
    x = torch.ones(2, 64, dtype=torch.bfloat16)
    for device in ("cpu", "meta"):
        with pytest.raises(RuntimeError, match=r"argument 'activation' has index 2; expected -1"):
            torch.ops.mxlinear.linear(x.to(device), w.to(device), ws.to(device), None, None, 2)


def test_a_quantized_x_is_w8a8_and_refuses_bf16():
    g = fresh_gen()
    w, ws = random_weight(8, 64, g)
    pair = mxlinear.quantize(torch.randn(3, 64, generator=g, dtype=torch.bfloat16))
    want = mxlinear.linear(pair, w, ws)
    assert torch.equal(mxlinear.linear(pair, w, ws, activation="mx"), want)
    with pytest.raises(ValueError, match=r"argument 'activation' is 'bf16' \(W8A16\) with an "
                                         r"already quantized x"):
        mxlinear.linear(pair, w, ws, activation="bf16")


# --------------------------------------------------------------------------- fake tensors, compile


def test_meta_tensors_take_the_mode_and_refuse_float32_in_w8a16():
    w = torch.empty(24, 64, dtype=torch.float8_e4m3fn, device="meta")
    ws = torch.empty(24, 2, dtype=torch.uint8, device="meta")
    x = torch.empty(2, 3, 64, dtype=torch.float16, device="meta")
    for activation in ("mx", "bf16", None):
        out = mxlinear.linear(x, w, ws, None, torch.float32, activation=activation)
        assert out.shape == (2, 3, 24) and out.dtype == torch.float32 and out.is_meta
    x32 = torch.empty(2, 64, device="meta")
    with pytest.raises(RuntimeError, match=r"argument 'x' has dtype Float; .*W8A16"):
        mxlinear.linear(x32, w, ws, activation="bf16")
    assert mxlinear.linear(x32, w, ws, activation="mx").dtype == torch.float32


def test_opcheck_linear_in_both_modes():
    g = fresh_gen()
    w, ws = random_weight(16, 64, g)
    x = torch.randn(2, 5, 64, generator=g, dtype=torch.float16)
    bias = torch.randn(16, generator=g)
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    for mode in (-1, 0, 1):
        torch.library.opcheck(torch.ops.mxlinear.linear.default,
                              (x, w, ws, bias, torch.float32, mode), test_utils=utils)


@pytest.mark.parametrize("activation", ["mx", "bf16"])
def test_torch_compile_fullgraph_with_the_mode(activation):
    torch._dynamo.reset()
    g = fresh_gen()
    w, ws = random_weight(16, 64, g)
    bias = torch.randn(16, generator=g, dtype=torch.bfloat16)

    def layer(x):
        return mxlinear.linear(x, w, ws, bias, None, activation=activation)

    compiled = torch.compile(layer, fullgraph=True)
    for m in (4, 9):
        x = torch.randn(m, 64, generator=g, dtype=torch.bfloat16)
        assert torch.equal(compiled(x), layer(x))
    # A float32 x in W8A16 is refused while tracing too, naming 'x'.
    if activation == "bf16":
        with pytest.raises(Exception, match=r"'x'.*W8A16"):
            torch.compile(layer, fullgraph=True)(torch.randn(4, 64, generator=g))


# --------------------------------------------------------------------------- the module


def test_module_honours_its_activation_attribute():
    g = fresh_gen()
    linear = torch.nn.Linear(64, 16, dtype=torch.bfloat16)
    x = torch.randn(5, 64, generator=g, dtype=torch.bfloat16)
    layer = MXFP8Linear.from_linear(linear, activation="bf16")
    assert layer.activation == "bf16"
    args = (layer.weight, layer.weight_scale, layer.bias, layer.out_dtype)
    assert torch.equal(layer(x), mxlinear.linear(x, *args, activation="bf16"))
    layer.activation = "mx"
    assert torch.equal(layer(x), mxlinear.linear(x, *args, activation="mx"))
    assert not torch.equal(layer(x), mxlinear.linear(x, *args, activation="bf16"))
    layer.activation = None
    assert torch.equal(layer(x), mxlinear.linear(x, *args))
    # A pre-quantized input is W8A8 whatever the attribute says.
    layer.activation = "bf16"
    pair = mxlinear.quantize(x)
    assert torch.equal(layer(pair), mxlinear.linear(pair, *args))
    assert MXFP8Linear(64, 8).activation is None
    assert MXFP8Linear(64, 8, activation="mx").activation == "mx"
    assert MXFP8Linear.from_quantized(layer.weight, layer.weight_scale,
                                      activation="bf16").activation == "bf16"


def test_module_mode_is_not_state():
    g = fresh_gen()
    src = MXFP8Linear.from_linear(torch.nn.Linear(64, 8), activation="bf16")
    state = src.state_dict()
    assert list(state) == ["weight", "weight_scale", "bias"]
    dst = MXFP8Linear(64, 8, activation="mx")
    dst.load_state_dict(state)
    assert dst.activation == "mx"
    x = torch.randn(3, 64, generator=g, dtype=torch.bfloat16)
    assert torch.equal(dst(x), mxlinear.linear(x, src.weight, src.weight_scale, src.bias,
                                               activation="mx"))


def test_module_repr_names_a_chosen_mode_only():
    layer = MXFP8Linear(64, 8, bias=False)
    assert "activation" not in repr(layer)
    layer.activation = "bf16"
    assert repr(layer).endswith("out_dtype=input, activation=bf16)")


def test_quantize_model_sets_the_mode():
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    quantize_model(model, activation="bf16")
    assert [m.activation for m in model if isinstance(m, MXFP8Linear)] == ["bf16", "bf16"]


# --------------------------------------------------------------------------- the environment


ENVIRONMENT_CHECK = """
import torch, mxlinear
g = torch.Generator().manual_seed(5)
w, ws = mxlinear.quantize(torch.randn(16, 96, generator=g))
x = torch.randn(7, 96, generator=g, dtype=torch.bfloat16)
default = mxlinear.linear(x, w, ws)
explicit = {a: mxlinear.linear(x, w, ws, activation=a) for a in ("mx", "bf16")}
print(mxlinear.default_activation())
print([a for a, out in explicit.items() if torch.equal(out, default)])
try:
    mxlinear.linear(torch.empty(2, 96, device="meta"), w.to("meta"), ws.to("meta"))
    print("meta float32 served")
except RuntimeError as e:
    print("meta float32 refused" if "W8A16" in str(e) else e)
try:
    mxlinear.linear(x.float(), w, ws)
    print("float32 served")
except RuntimeError as e:
    print("float32 refused" if "W8A16" in str(e) else e)
"""


@pytest.mark.parametrize(
    "variable, mode, default_matches, fp32",
    [
        ("bf16", "bf16", ["bf16"], "refused"),
        ("mx", "mx", ["mx"], "served"),
        (None, "mx", ["mx"], "served"),
        ("int4", "mx", ["mx"], "served"),  # an invalid value: the registry warns, W8A8 applies
    ],
)
def test_mxlinear_activation_sets_the_default(variable, mode, default_matches, fp32):
    r = run_python(ENVIRONMENT_CHECK, MXLINEAR_ACTIVATION=variable)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines == [mode, repr(default_matches), f"meta float32 {fp32}", f"float32 {fp32}"]
    if variable == "int4":
        assert "MXLINEAR_ACTIVATION is 'int4'; expected mx or bf16; using mx" in r.stderr
