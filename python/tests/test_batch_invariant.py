"""The batch-invariant switch (``batch_invariant``): accepted and checked everywhere the activation
mode is, passed to the ops as an index (-1 MXLINEAR_BATCH_INVARIANT's default, 0 off, 1 on), and
on a GPU a row's bits independent of the batch it is in. CPU tests run everywhere; the GPU tests
need CUDA (Hopper) and skip visibly without it."""

import re

import pytest
import torch
from python_process import run_python
from test_ops import fresh_gen, random_weight
from torch.utils._python_dispatch import TorchDispatchMode

import mxlinear
from mxlinear.convert import quantize_model
from mxlinear.nn import MXFP8Linear

LINEAR_OPS = (torch.ops.mxlinear.linear.default, torch.ops.mxlinear.linear_quantized.default)


class RecordLinearCalls(TorchDispatchMode):
    """Records the arguments, by name and with the schema's defaults filled in, of every call of
    mxlinear::linear and mxlinear::linear_quantized made while the mode is active."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in LINEAR_OPS:
            schema = func._schema.arguments
            bound = {a.name: a.default_value for a in schema if a.has_default_value()}
            bound.update(zip((a.name for a in schema), args))
            bound.update(kwargs)
            self.calls.append((func, bound))
        return func(*args, **kwargs)


def operands(m=5, n=24, k=96, dtype=torch.bfloat16, g=None):
    g = g or fresh_gen()
    w, ws = random_weight(n, k, g)
    x = (torch.randn(m, k, generator=g) * 3).to(dtype)
    bias = torch.randn(n, generator=g, dtype=torch.bfloat16)
    return x, w, ws, bias


# --------------------------------------------------------------------------- the argument


@pytest.mark.parametrize("activation", ["mx", "bf16"])
@pytest.mark.parametrize("batch_invariant", [None, True, False])
def test_cpu_result_equals_the_default_calls_bits(activation, batch_invariant):
    x, w, ws, bias = operands()
    want = mxlinear.linear(x, w, ws, bias, torch.float32, activation)
    got = mxlinear.linear(x, w, ws, bias, torch.float32, activation,
                          batch_invariant=batch_invariant)
    assert torch.equal(got, want)
    # A pre-quantized x (W8A8) takes the switch too.
    if activation == "mx":
        pair = mxlinear.quantize(x)
        assert torch.equal(mxlinear.linear(pair, w, ws, bias, torch.float32,
                                           batch_invariant=batch_invariant), want)


@pytest.mark.parametrize("index", [-1, 0, 1])
def test_ops_take_the_index(index):
    x, w, ws, bias = operands()
    want = mxlinear.linear(x, w, ws, bias)
    assert torch.equal(torch.ops.mxlinear.linear(x, w, ws, bias, None, -1, index), want)
    assert torch.equal(torch.ops.mxlinear.linear(x, w, ws, bias, batch_invariant=index), want)
    data, scales = mxlinear.quantize(x)
    pair = mxlinear.linear((data, scales), w, ws, bias)
    assert torch.equal(
        torch.ops.mxlinear.linear_quantized(data, scales, w, ws, bias, None, index), pair)


@pytest.mark.parametrize("value", [1, 0, -1, "yes", "True", 1.0, torch.tensor(True)])
def test_bad_batch_invariant_is_a_type_error_naming_it(value):
    x, w, ws, _ = operands()
    message = rf"argument 'batch_invariant' is {re.escape(repr(value))} \(a " \
              rf"{type(value).__name__}\); expected None .*, True or False"
    with pytest.raises(TypeError, match=message):
        mxlinear.linear(x, w, ws, batch_invariant=value)
    with pytest.raises(TypeError, match=message):
        mxlinear.linear(mxlinear.quantize(x), w, ws, batch_invariant=value)
    with pytest.raises(TypeError, match=rf"MXFP8Linear: {message}"):
        MXFP8Linear(96, 24, batch_invariant=value)
    with pytest.raises(TypeError, match=rf"MXFP8Linear.from_quantized: {message}"):
        MXFP8Linear.from_quantized(w, ws, batch_invariant=value)
    with pytest.raises(TypeError, match=rf"MXFP8Linear.from_linear: {message}"):
        MXFP8Linear.from_linear(torch.nn.Linear(96, 24), batch_invariant=value)
    with pytest.raises(TypeError, match=rf"quantize_model: {message}"):
        quantize_model(torch.nn.Sequential(torch.nn.Linear(96, 24)), batch_invariant=value)


def test_bad_index_is_named_by_the_ops_and_their_fakes():
    x, w, ws, _ = operands()
    data, scales = mxlinear.quantize(x)
    message = r"argument 'batch_invariant' has index 2; expected -1 \(MXLINEAR_BATCH_INVARIANT"
    for device in ("cpu", "meta"):
        on = [t.to(device) for t in (x, w, ws, data, scales)]
        with pytest.raises(RuntimeError, match=rf"mxlinear.linear: {message}"):
            torch.ops.mxlinear.linear(on[0], on[1], on[2], None, None, -1, 2)
        with pytest.raises(RuntimeError, match=rf"mxlinear.linear_quantized: {message}"):
            torch.ops.mxlinear.linear_quantized(on[3], on[4], on[1], on[2], None, None, 2)


def test_op_schemas_take_the_switch_last_with_the_default_index():
    for op in (torch.ops.mxlinear.linear, torch.ops.mxlinear.linear_quantized,
               torch.ops.mxlinear._library_call_seconds):
        last = op.default._schema.arguments[-1]
        assert last.name == "batch_invariant"
        assert str(last.type) == "int" and last.default_value == -1
    assert "int activation=-1, int batch_invariant=-1) -> Tensor" in str(
        torch.ops.mxlinear.linear.default._schema)


@pytest.mark.parametrize("batch_invariant, index", [(None, -1), (False, 0), (True, 1)])
def test_linear_passes_the_index_to_the_ops(batch_invariant, index):
    x, w, ws, bias = operands()
    with RecordLinearCalls() as record:
        mxlinear.linear(x, w, ws, bias, batch_invariant=batch_invariant)
        mxlinear.linear(x, w, ws, bias, activation="bf16", batch_invariant=batch_invariant)
        mxlinear.linear(mxlinear.quantize(x), w, ws, batch_invariant=batch_invariant)
    assert [(f, c["batch_invariant"]) for f, c in record.calls] == [
        (LINEAR_OPS[0], index), (LINEAR_OPS[0], index), (LINEAR_OPS[1], index)]
    assert [c["activation"] for _, c in record.calls[:2]] == [-1, 1]


def test_cpu_reference_keeps_a_rows_bits_in_any_batch():
    g = fresh_gen()
    k = 544
    w, ws = random_weight(40, k, g)
    fixed = (torch.randn(3, k, generator=g) * 4).to(torch.bfloat16)
    for m in (1, 3, 17, 70):
        x = (torch.randn(m, k, generator=g) * 4).to(torch.bfloat16)
        rows = min(m, 3)
        positions = torch.randperm(m, generator=g)[:rows]
        x[positions] = fixed[:rows]
        for activation in ("mx", "bf16"):
            out = mxlinear.linear(x, w, ws, None, torch.float32, activation, batch_invariant=False)
            expected = mxlinear.linear(fixed, w, ws, None, torch.float32, activation)
            assert torch.equal(out[positions], expected[:rows])


def test_meta_tensors_opcheck_and_compile_take_the_switch():
    w = torch.empty(24, 64, dtype=torch.float8_e4m3fn, device="meta")
    ws = torch.empty(24, 2, dtype=torch.uint8, device="meta")
    x = torch.empty(2, 3, 64, dtype=torch.bfloat16, device="meta")
    for batch_invariant in (None, True, False):
        out = mxlinear.linear(x, w, ws, None, torch.float32, batch_invariant=batch_invariant)
        assert out.shape == (2, 3, 24) and out.dtype == torch.float32 and out.is_meta
    g = fresh_gen()
    x, w, ws, bias = operands(g=g)
    data, scales = mxlinear.quantize(x)
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    for index in (-1, 0, 1):
        torch.library.opcheck(torch.ops.mxlinear.linear.default,
                              (x, w, ws, bias, torch.float32, 1, index), test_utils=utils)
        torch.library.opcheck(torch.ops.mxlinear.linear_quantized.default,
                              (data, scales, w, ws, None, None, index), test_utils=utils)
    torch._dynamo.reset()

    def layer(x):
        return mxlinear.linear(x, w, ws, bias, batch_invariant=True)

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    for m in (4, 9):
        x = torch.randn(m, 96, generator=g, dtype=torch.bfloat16)
        assert torch.equal(compiled(x), layer(x))


# --------------------------------------------------------------------------- the module


def test_module_passes_its_switch_to_the_op():
    g = fresh_gen()
    x = torch.randn(5, 64, generator=g, dtype=torch.bfloat16)
    layer = MXFP8Linear.from_linear(torch.nn.Linear(64, 16, dtype=torch.bfloat16),
                                    batch_invariant=True)
    assert layer.batch_invariant is True
    args = (layer.weight, layer.weight_scale, layer.bias, layer.out_dtype)
    with RecordLinearCalls() as record:
        out = layer(x)
        layer.batch_invariant = False
        layer(x)
        layer.batch_invariant = None
        layer(x)
        layer.batch_invariant = True
        layer(mxlinear.quantize(x))  # a pre-quantized input takes the switch too
    assert [c["batch_invariant"] for _, c in record.calls] == [1, 0, -1, 1]
    assert record.calls[-1][0] == LINEAR_OPS[1]
    assert torch.equal(out, mxlinear.linear(x, *args))
    assert MXFP8Linear(64, 8).batch_invariant is None
    assert MXFP8Linear(64, 8, batch_invariant=False).batch_invariant is False
    assert MXFP8Linear.from_quantized(layer.weight, layer.weight_scale,
                                      batch_invariant=True).batch_invariant is True
    # An attribute, not state: state_dict leaves it out and loading keeps the layer's own.
    assert list(layer.state_dict()) == ["weight", "weight_scale", "bias"]
    other = MXFP8Linear(64, 16, batch_invariant=False)
    other.load_state_dict(layer.state_dict())
    assert other.batch_invariant is False


def test_module_repr_names_a_chosen_switch_only():
    layer = MXFP8Linear(64, 8, bias=False)
    assert "batch_invariant" not in repr(layer)
    layer.batch_invariant = True
    assert repr(layer).endswith("out_dtype=input, batch_invariant=True)")
    layer.activation = "bf16"
    assert repr(layer).endswith("out_dtype=input, activation=bf16, batch_invariant=True)")


def test_quantize_model_sets_the_switch():
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    quantize_model(model, activation="bf16", batch_invariant=True)
    layers = [m for m in model if isinstance(m, MXFP8Linear)]
    assert [(m.activation, m.batch_invariant) for m in layers] == [("bf16", True)] * 2
    plain = torch.nn.Sequential(torch.nn.Linear(64, 32))
    quantize_model(plain)
    assert plain[0].batch_invariant is None


# --------------------------------------------------------------------------- the environment


ENVIRONMENT_CHECK = """
import torch, mxlinear
g = torch.Generator().manual_seed(5)
w, ws = mxlinear.quantize(torch.randn(16, 96, generator=g))
x = torch.randn(7, 96, generator=g, dtype=torch.bfloat16)
default = mxlinear.linear(x, w, ws)
print(mxlinear.default_batch_invariant())
print(all(torch.equal(mxlinear.linear(x, w, ws, batch_invariant=b), default)
          for b in (True, False)))
"""


@pytest.mark.parametrize("variable, default", [("1", True), ("0", False), (None, False),
                                               ("yes", False)])
def test_mxlinear_batch_invariant_sets_the_default(variable, default):
    r = run_python(ENVIRONMENT_CHECK, MXLINEAR_BATCH_INVARIANT=variable)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [str(default), "True"]
    if variable == "yes":  # an invalid value: the registry warns, the mode stays off
        assert "MXLINEAR_BATCH_INVARIANT is 'yes'; expected 1 or 0; using 0" in r.stderr


# --------------------------------------------------------------------------- GPU

BATCHES = (1, 8, 13, 64, 300, 1000)
FIXED_ROWS = 8


def fixed_rows_in_batches(n, k, activation, out_dtype, quantized=False):
    """The outputs of FIXED_ROWS fixed rows of x, placed at random distinct positions (the last
    row among them) in batches of every M of BATCHES whose other rows are fresh random values
    (M = 1: the first fixed row alone), in the batch-invariant mode. Returns {M: [rows, N]}."""
    g = fresh_gen()
    w, ws = random_weight(n, k, g)
    w, ws = w.cuda(), ws.cuda()
    bias = torch.randn(n, generator=g, dtype=torch.bfloat16).cuda()
    fixed = (torch.randn(FIXED_ROWS, k, generator=g) * 4).to(torch.bfloat16)
    outputs = {}
    for m in BATCHES:
        rows = min(m, FIXED_ROWS)
        x = (torch.randn(m, k, generator=g) * 4).to(torch.bfloat16)
        positions = torch.randperm(m, generator=g)[:rows]
        if not (positions == m - 1).any():
            positions[0] = m - 1
        x[positions] = fixed[:rows]
        x = x.cuda()
        if quantized:
            x = mxlinear.quantize(x)
        out = mxlinear.linear(x, w, ws, bias, out_dtype, activation, batch_invariant=True)
        outputs[m] = out[positions.cuda()]
    return outputs


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["mx", "bf16"])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("nk", [(200, 1024), (256, 14336), (1024, 2048)])
def test_gpu_rows_keep_their_bits_in_every_batch(activation, out_dtype, nk):
    outputs = fixed_rows_in_batches(*nk, activation, out_dtype)
    want = outputs[FIXED_ROWS]
    assert want.shape == (FIXED_ROWS, nk[0]) and not want.isnan().any()
    for m, got in outputs.items():
        assert torch.equal(got, want[: got.shape[0]]), f"M = {m}"


@pytest.mark.gpu
@pytest.mark.parametrize("nk", [(200, 1024), (256, 14336)])
def test_gpu_prequantized_rows_keep_their_bits_in_every_batch(nk):
    outputs = fixed_rows_in_batches(*nk, None, torch.float32, quantized=True)
    want = outputs[FIXED_ROWS]
    for m, got in outputs.items():
        assert torch.equal(got, want[: got.shape[0]]), f"M = {m}"


@pytest.mark.gpu
@pytest.mark.parametrize("activation, mode", [("mx", 0), ("bf16", 1)])
@pytest.mark.parametrize("m", [1, 13, 300])
def test_gpu_op_equals_the_library_call_in_the_batch_invariant_mode(activation, mode, m):
    g = fresh_gen()
    n, k = 384, 2048
    w, ws = random_weight(n, k, g)
    w, ws = w.cuda(), ws.cuda()
    x = (torch.randn(m, k, generator=g) * 4).to(torch.bfloat16).cuda()
    out = mxlinear.linear(x, w, ws, None, torch.float32, activation, batch_invariant=True)
    want = torch.full((m, n), float("nan"), device="cuda")
    torch.ops.mxlinear._library_call_seconds(x, w, ws, want, 1, mode, 1)
    assert not want.isnan().any() and torch.equal(out, want)


@pytest.mark.gpu
def test_gpu_mxlinear_batch_invariant_makes_calls_batch_invariant():
    code = (
        "import torch, mxlinear\n"
        "g = torch.Generator().manual_seed(3)\n"
        "w, ws = mxlinear.quantize(torch.randn(256, 4096, generator=g).cuda())\n"
        "x = torch.randn(300, 4096, generator=g, dtype=torch.bfloat16).cuda()\n"
        "d = mxlinear.linear(x, w, ws, None, torch.float32)\n"
        "on = mxlinear.linear(x, w, ws, None, torch.float32, batch_invariant=True)\n"
        "print(mxlinear.default_batch_invariant(), torch.equal(d, on))\n"
    )
    r = run_python(code, MXLINEAR_BATCH_INVARIANT="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]
