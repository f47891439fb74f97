"""The ops on a Hopper GPU: parity with the library's own linear(), CUDA graphs, torch.compile,
several streams and inference mode, in both activation modes (W8A8 "mx", W8A16 "bf16"). Skipped
visibly without CUDA."""

import emulation
import pytest
import torch
from python_process import run_python
from test_ops import fresh_gen, random_weight

import mxlinear

pytestmark = pytest.mark.gpu

# M across the dispatch boundaries (gemv, decode, generic, prefill) and shapes that are not tile
# multiples.
SHAPES = [(1, 512, 1024), (7, 200, 544), (64, 1024, 2048), (300, 384, 1024), (1000, 256, 4096)]


def cuda_weight(n, k, g):
    w, ws = random_weight(n, k, g)
    return w.cuda(), ws.cuda()


def library_linear(x, w, ws, out_dtype, mode=-1):
    """The library's own linear() on these tensors (no torch dispatch), into a NaN-poisoned out, in
    the activation mode of that index (-1 the default, 0 mx, 1 bf16)."""
    out = torch.full((*x.shape[:-1], w.shape[0]), float("nan"), dtype=out_dtype, device=x.device)
    torch.ops.mxlinear._library_call_seconds(x, w, ws, out, 1, mode)
    return out


def capture(step, *args):
    """Runs `step(*args)` once on a side stream (allocations and first-call setup happen outside
    capture), then captures it in a CUDA graph; returns the graph and the captured call's outputs."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step(*args)
    return graph, outputs


@pytest.mark.parametrize("mnk", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_op_equals_the_library_call_bit_for_bit(mnk, dtype):
    m, n, k = mnk
    g = fresh_gen()
    x = (torch.randn(m, k, generator=g) * 4).to(dtype).cuda()
    w, ws = cuda_weight(n, k, g)
    for out_dtype in (dtype, torch.float32):
        out = mxlinear.linear(x, w, ws, None, out_dtype)
        want = library_linear(x, w, ws, out_dtype)
        assert not want.isnan().any()
        assert torch.equal(out, want)
        assert_within_contract_gpu(out, x, w, ws)


def assert_within_contract_gpu(out, x, w, ws):
    """The layer on the GPU against the fp64 emulation of x's quantization."""
    xc = x.cpu()
    assert_within_fp32_bound(out, *emulation.quantize(xc), w, ws)


def assert_within_fp32_bound(out, x_data, x_scales, w, ws, bias=None):
    """fp32 accumulation in some order: 1 ulp of the rounded fp64 reference plus K * 2^-24 times
    the sum of absolute products (docs/MXFP8.md)."""
    assert_within_fp32_bound_of(out, emulation.dequantize(x_data.cpu(), x_scales.cpu()), w, ws,
                                bias)


def assert_within_fp32_bound_of(out, a, w, ws, bias=None):
    """The same bound for the float64 activation `a` the layer multiplies (x itself in W8A16)."""
    a = a.cpu().double()
    b = emulation.dequantize(w.cpu(), ws.cpu())
    ref = a @ b.T
    if bias is not None:
        ref = ref + bias.cpu().double()
    slack = a.shape[-1] * 2.0**-24 * (a.abs() @ b.abs().T)
    rounded = ref.to(out.dtype).double()
    up = torch.nextafter(rounded.to(out.dtype), torch.tensor(float("inf"), dtype=out.dtype))
    ulp = (up.double() - rounded).abs()
    assert ((out.cpu().double() - rounded).abs() <= ulp + slack).all()


def test_quantized_input_on_gpu():
    g = fresh_gen()
    m, n, k = 33, 256, 1024
    x = torch.randn(2, m, k, generator=g, dtype=torch.bfloat16).cuda()
    w, ws = cuda_weight(n, k, g)
    bias = torch.randn(n, generator=g).cuda()
    data, scales = mxlinear.quantize(x)
    out = mxlinear.linear((data, scales), w, ws, bias, torch.float32)
    assert_within_fp32_bound(out, data, scales, w, ws, bias)
    assert torch.equal(out, mxlinear.linear(x, w, ws, bias, torch.float32))


def test_graph_of_quantize_and_both_linear_forms_replays_eagers_bits():
    g = fresh_gen()
    m, n, k = 48, 512, 1024
    w, ws = cuda_weight(n, k, g)
    static_x = torch.randn(m, k, generator=g, dtype=torch.bfloat16).cuda()

    def step(x):
        a = mxlinear.linear(x, w, ws)
        b = mxlinear.linear(mxlinear.quantize(x), w, ws, None, torch.float32)
        return a, b

    graph, (static_a, static_b) = capture(step, static_x)
    for _ in range(3):
        static_x.copy_(torch.randn(m, k, generator=g, dtype=torch.bfloat16))
        graph.replay()
        a, b = step(static_x)
        assert torch.equal(static_a, a) and torch.equal(static_b, b)


class TwoLayers(torch.nn.Module):
    def __init__(self, g):
        super().__init__()
        self.w1, self.s1 = cuda_weight(512, 256, g)
        self.w2, self.s2 = cuda_weight(256, 512, g)

    def forward(self, x):
        h = torch.nn.functional.gelu(mxlinear.linear(x, self.w1, self.s1))
        return mxlinear.linear(h, self.w2, self.s2)


def test_compile_fullgraph_has_no_graph_breaks_and_same_bits():
    torch._dynamo.reset()
    g = fresh_gen()
    model = TwoLayers(g)
    x = torch.randn(4, 9, 256, generator=g, dtype=torch.bfloat16).cuda()
    explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    compiled = torch.compile(model, fullgraph=True)
    for m in (9, 17):
        x = torch.randn(4, m, 256, generator=g, dtype=torch.bfloat16).cuda()
        assert torch.equal(compiled(x), model(x))


def test_several_streams_give_the_default_streams_bits():
    g = fresh_gen()
    w, ws = cuda_weight(1024, 2048, g)
    xs = [torch.randn(m, 2048, generator=g, dtype=torch.bfloat16).cuda() for m in (1, 16, 200, 700)]
    want = [mxlinear.linear(x, w, ws) for x in xs]
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in xs]
    outs = []
    for _ in range(5):
        for s in streams:
            s.wait_stream(torch.cuda.current_stream())
        outs.clear()
        for x, s in zip(xs, streams):
            with torch.cuda.stream(s):
                outs.append(mxlinear.linear(x, w, ws))
        for s in streams:
            torch.cuda.current_stream().wait_stream(s)
        for got, expected in zip(outs, want):
            assert torch.equal(got, expected)


def test_inference_mode_gives_the_same_bits():
    g = fresh_gen()
    w, ws = cuda_weight(384, 768, g)
    x = torch.randn(3, 11, 768, generator=g, dtype=torch.bfloat16).cuda()
    want = mxlinear.linear(x, w, ws)
    with torch.inference_mode():
        out = mxlinear.linear(x, w, ws)
        data, scales = mxlinear.quantize(x)
        pair = mxlinear.linear((data, scales), w, ws)
    assert out.is_inference() and torch.equal(out, want) and torch.equal(pair, want)


def test_select_reports_the_gpu_kernels():
    sel = mxlinear.select(4096, 4096)
    assert not sel["device"].startswith("cpu")
    assert sel["kernel"] not in (None, "reference")


def test_misaligned_and_mixed_device_inputs_are_served_or_named():
    """An activation 2 bytes off its allocation (a view at an odd offset) is either served within
    the contract or refused with an error naming 'x'; never a crash or a wrong answer. Tensors
    on different devices are refused, naming the argument."""
    g = fresh_gen()
    m, n, k = 5, 256, 512
    w, ws = cuda_weight(n, k, g)
    flat = torch.randn(m * k + 1, generator=g, dtype=torch.bfloat16).cuda()
    x = flat[1:].view(m, k)
    assert x.data_ptr() % 16 != 0
    try:
        out = mxlinear.linear(x, w, ws, None, torch.float32)
    except RuntimeError as e:
        assert "'x'" in str(e)
    else:
        assert_within_fp32_bound(out, *emulation.quantize(x.cpu()), w, ws)
    try:
        data, scales = mxlinear.quantize(x)
    except RuntimeError as e:
        assert "'x'" in str(e)
    else:
        want_data, want_scales = mxlinear.quantize(x.cpu())
        assert torch.equal(scales.cpu(), want_scales)
        assert torch.equal(data.cpu().view(torch.uint8), want_data.view(torch.uint8))
    bias = torch.ones(n)
    with pytest.raises(RuntimeError, match="'bias'"):
        mxlinear.linear(x, w, ws, bias)
    data, scales = mxlinear.quantize(x.contiguous())
    with pytest.raises(RuntimeError, match="'x_scales'"):
        mxlinear.linear((data, scales.cpu()), w, ws)


# --------------------------------------------------------------------------- activation modes


@pytest.mark.parametrize("mnk", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_w8a16_op_equals_the_library_call_and_the_cpu_reference(mnk, dtype):
    m, n, k = mnk
    g = fresh_gen()
    x = (torch.randn(m, k, generator=g) * 4).to(dtype).cuda()
    w, ws = cuda_weight(n, k, g)
    bias = torch.randn(n, generator=g).cuda()
    for out_dtype in (dtype, torch.float32):
        out = mxlinear.linear(x, w, ws, None, out_dtype, activation="bf16")
        want = library_linear(x, w, ws, out_dtype, mode=1)
        assert not want.isnan().any()
        assert torch.equal(out, want)
        assert_within_fp32_bound_of(out, x, w, ws)
        # With a bias, against the CPU reference (float64, rounded once): within the bound of
        # the GPU's fp32 accumulation of it.
        out = mxlinear.linear(x, w, ws, bias, out_dtype, activation="bf16")
        cpu = mxlinear.linear(x.cpu(), w.cpu(), ws.cpu(), bias.cpu(), out_dtype, activation="bf16")
        assert_within_fp32_bound_of(out, x, w, ws, bias)
        assert_within_fp32_bound_of(cpu, x, w, ws, bias)


@pytest.mark.parametrize("activation", ["mx", "bf16"])
@pytest.mark.parametrize("mnk", [(1, 512, 1024), (64, 1024, 2048), (300, 384, 1024)])
def test_both_modes_against_the_cpu_reference(activation, mnk):
    m, n, k = mnk
    g = fresh_gen()
    x = torch.randn(m, k, generator=g, dtype=torch.bfloat16).cuda()
    w, ws = cuda_weight(n, k, g)
    bias = torch.randn(n, generator=g, dtype=torch.bfloat16).cuda()
    out = mxlinear.linear(x, w, ws, bias, torch.float32, activation=activation)
    cpu = mxlinear.linear(x.cpu(), w.cpu(), ws.cpu(), bias.cpu(), torch.float32,
                          activation=activation)
    a = x if activation == "bf16" else emulation.dequantize(*emulation.quantize(x.cpu()))
    assert_within_fp32_bound_of(out, a, w, ws, bias)
    assert_within_fp32_bound_of(cpu, a, w, ws, bias)
    # The other mode is a different layer: the GPU result is no copy of it.
    other = "mx" if activation == "bf16" else "bf16"
    assert not torch.equal(out, mxlinear.linear(x, w, ws, bias, torch.float32, activation=other))


def test_w8a16_refuses_float32_x_on_the_gpu():
    g = fresh_gen()
    w, ws = cuda_weight(64, 128, g)
    x = torch.randn(3, 128, generator=g).cuda()
    with pytest.raises(RuntimeError, match=r"argument 'x' has dtype Float; .*W8A16"):
        mxlinear.linear(x, w, ws, activation="bf16")
    assert mxlinear.linear(x, w, ws, activation="mx").dtype == torch.float32


def test_w8a16_graph_capture_and_compile_replay_eagers_bits():
    torch._dynamo.reset()
    g = fresh_gen()
    m, n, k = 48, 512, 1024
    w, ws = cuda_weight(n, k, g)
    static_x = torch.randn(m, k, generator=g, dtype=torch.bfloat16).cuda()

    def step(x):
        return (mxlinear.linear(x, w, ws, activation="bf16"),
                mxlinear.linear(x, w, ws, None, torch.float32, activation="mx"))

    graph, (static_a, static_b) = capture(step, static_x)
    compiled = torch.compile(step, fullgraph=True)
    for _ in range(3):
        static_x.copy_(torch.randn(m, k, generator=g, dtype=torch.bfloat16))
        graph.replay()
        a, b = step(static_x)
        assert torch.equal(static_a, a) and torch.equal(static_b, b)
        ca, cb = compiled(static_x)
        assert torch.equal(ca, a) and torch.equal(cb, b)


def test_mxlinear_activation_bf16_makes_gpu_calls_w8a16():
    code = (
        "import torch, mxlinear\n"
        "g = torch.Generator().manual_seed(3)\n"
        "w, ws = mxlinear.quantize(torch.randn(256, 512, generator=g).cuda())\n"
        "x = torch.randn(17, 512, generator=g, dtype=torch.bfloat16).cuda()\n"
        "d = mxlinear.linear(x, w, ws)\n"
        "print(mxlinear.default_activation(), torch.equal(d, mxlinear.linear(x, w, ws, "
        "activation='bf16')), torch.equal(d, mxlinear.linear(x, w, ws, activation='mx')))\n"
    )
    r = run_python(code, MXLINEAR_ACTIVATION="bf16")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["bf16", "True", "False"]
