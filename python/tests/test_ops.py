"""The torch ops against the MXFP8 contract: CPU tests run everywhere, GPU tests need CUDA."""

import emulation
import pytest
import torch

import mxlinear

ACT_DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def fresh_seed() -> int:
    """A new random seed, printed so that a failing test's report names it (pytest shows a failed
    test's output). torch.seed() also reseeds the global generator that modules draw from."""
    seed = torch.seed()
    print(f"torch seed {seed}")
    return seed


def fresh_gen(seed: int | None = None) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed if seed is not None else fresh_seed())
    return g


def adversarial_activation(rows: int, k: int, dtype, g) -> torch.Tensor:
    """Random rows with per-block magnitudes over a wide range plus edge blocks: all zero, one
    huge value, tiny values, values straddling 448 * 2^e, ties between E4M3 values, NaN, Inf."""
    blocks = k // 32
    mag = torch.pow(2.0, torch.randint(-20, 20, (rows, blocks, 1), generator=g).double())
    x = (torch.randn(rows, blocks, 32, generator=g, dtype=torch.float64) * mag).reshape(rows, k)
    flat = x.view(rows, blocks, 32)
    if rows >= 8 and blocks >= 2:
        flat[0, 0] = 0.0
        flat[1, 0] = 0.0
        flat[1, 0, 5] = 3.0e4  # one huge value
        flat[2, 0] = torch.randn(32, generator=g, dtype=torch.float64) * 2.0**-30
        e = float(torch.randint(-8, 8, (1,), generator=g))
        flat[3, 0] = 448.0 * 2.0**e * (1 + (torch.arange(32) - 16) * 2.0**-10)
        # Exact ties: amax 448 gives scale 1, then x.5 ulp values between E4M3 neighbours.
        flat[4, 0] = torch.tensor([448.0] + [1.0625 + 0.125 * i for i in range(31)]) / 16
        flat[5, 0, 3] = float("nan")
        flat[6, 0, 7] = float("inf")
        flat[6, 1, 9] = float("-inf")
        flat[7, 1] = -flat[7, 1]
    return x.to(dtype)


# --------------------------------------------------------------------------- quantize (CPU)


def test_quantize_known_values():
    x = torch.zeros(5, 32)
    x[0] = 1.0  # amax 1: t = 1/448, b = ceil(-8.807) + 127 = 119, q = 256 = 0x78
    x[1, 0] = 448.0  # t = 1: b = 127, q = 448 = 0x7E, the rest 0
    x[1, 1] = -448.0  # 0xFE
    # x[2] all zero: amax clamps to FLT_MIN, b clamps to 0, data 0
    x[3, 4] = float("nan")  # non-finite block: scale 0xFF, data 0x7F
    x[4, 0] = 2.0**-17  # a tiny block still gets a full-range scale
    data, scales = mxlinear.quantize(x)
    d = data.view(torch.uint8)
    assert scales.dtype == torch.uint8 and data.dtype == torch.float8_e4m3fn
    assert scales[:4, 0].tolist() == [119, 127, 0, 0xFF]
    assert (d[0] == 0x78).all()
    assert d[1, :3].tolist() == [0x7E, 0xFE, 0x00] and (d[1, 2:] == 0).all()
    assert (d[2] == 0).all()
    assert (d[3] == 0x7F).all()
    # 2^-17: t = 2^-17 / 448, ceil(log2 t) = -25, b = 102, q = 2^-17 * 2^25 = 256 = 0x78.
    assert scales[4, 0] == 102 and d[4, 0] == 0x78 and (d[4, 1:] == 0).all()


def test_quantize_floor_rule_known_values():
    x = torch.zeros(1, 32)
    x[0, 0] = 448.0  # floor(log2 448) = 8: b = 127, q = 448
    x[0, 1] = 1.0
    data, scales = mxlinear.quantize(x, "floor")
    assert scales.tolist() == [[127]]
    assert data.view(torch.uint8)[0, :2].tolist() == [0x7E, 0x38]


@pytest.mark.parametrize("dtype", ACT_DTYPES)
@pytest.mark.parametrize("rule", ["rceil", "floor"])
@pytest.mark.parametrize("shape", [(1, 32), (9, 96), (2, 5, 544)])
def test_quantize_matches_emulation(dtype, rule, shape):
    g = fresh_gen()
    rows = 1
    for s in shape[:-1]:
        rows *= s
    x = adversarial_activation(rows, shape[-1], dtype, g).reshape(shape)
    data, scales = mxlinear.quantize(x, rule)
    want_data, want_scales = emulation.quantize(x, rule)
    assert data.shape == x.shape and scales.shape == (*shape[:-1], shape[-1] // 32)
    assert torch.equal(scales, want_scales)
    assert torch.equal(data.view(torch.uint8), want_data)


def test_quantize_non_contiguous_input():
    g = fresh_gen()
    x = adversarial_activation(16, 64, torch.float32, g).T.contiguous().T  # column-major
    assert not x.is_contiguous()
    data, scales = mxlinear.quantize(x)
    want_data, want_scales = emulation.quantize(x.contiguous())
    assert torch.equal(scales, want_scales) and torch.equal(data.view(torch.uint8), want_data)


# --------------------------------------------------------------------------- linear (CPU)


def random_weight(n: int, k: int, g):
    """Finite weights whose blocks span 2^-6..2^6 (products stay in fp16's range), one block
    all zero and one with a single large value."""
    blocks = k // 32
    mag = torch.pow(2.0, torch.randint(-6, 7, (n, blocks, 1), generator=g).float())
    w = torch.randn(n, blocks, 32, generator=g) * mag
    w[0, 0] = 0.0
    if n > 1:
        w[1, -1, 3] = 300.0
    return mxlinear.quantize(w.reshape(n, k))


def assert_within_contract(out: torch.Tensor, ref64: torch.Tensor):
    """docs/MXFP8.md: fp32 output within a relative Frobenius error of 1e-5; bf16 and fp16
    output within 1 ulp of the rounded reference. The CPU reference accumulates in fp64 and
    rounds once, so it is held to that per element too."""
    finite = torch.isfinite(ref64)
    assert torch.equal(torch.isnan(out), torch.isnan(ref64))
    o, r = out.double()[finite], ref64[finite]
    if out.dtype == torch.float32:
        denom = torch.linalg.vector_norm(r).clamp(min=1e-300)
        assert float(torch.linalg.vector_norm(o - r) / denom) <= 1e-5
    rounded = r.to(out.dtype).double()
    ulp = (torch.nextafter(rounded.to(out.dtype), torch.tensor(float("inf"), dtype=out.dtype)).double() - rounded).abs()
    assert torch.equal(o[rounded.isinf()], rounded[rounded.isinf()])
    fin = ~rounded.isinf()
    assert ((o - rounded).abs()[fin] <= ulp[fin]).all()


@pytest.mark.parametrize("dtype", ACT_DTYPES)
@pytest.mark.parametrize("out_dtype", [None, torch.float32])
@pytest.mark.parametrize("mnk", [(1, 8, 32), (7, 17, 96), (100, 33, 544)])
def test_linear_matches_emulation(dtype, out_dtype, mnk):
    m, n, k = mnk
    g = fresh_gen()
    x = (torch.randn(m, k, generator=g) * 3).to(dtype)
    w, ws = random_weight(n, k, g)
    bias = torch.randn(n, generator=g).to(dtype)
    out = mxlinear.linear(x, w, ws, bias, out_dtype)
    assert out.dtype == (out_dtype or dtype) and out.shape == (m, n)
    assert_within_contract(out, emulation.linear(x, w, ws, bias))


def test_linear_batched_e8m0_scales_and_nan_block():
    g = fresh_gen()
    x = torch.randn(2, 3, 64, generator=g, dtype=torch.bfloat16)
    x[1, 2, 40] = float("nan")
    w, ws = random_weight(24, 64, g)
    out = mxlinear.linear(x, w, ws.view(torch.float8_e8m0fnu))
    assert out.shape == (2, 3, 24)
    assert torch.isnan(out[1, 2]).all() and not torch.isnan(out[:1]).any()
    assert_within_contract(out, emulation.linear(x, w, ws))


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_linear_exact_on_small_integers(out_dtype):
    g = fresh_gen()
    m, n, k = 13, 40, 256
    x = torch.randint(-8, 9, (m, k), generator=g).to(torch.bfloat16)
    wi = torch.randint(-8, 9, (n, k), generator=g)
    w = wi.to(torch.float8_e4m3fn)  # integers up to 8 are E4M3 values: scale 2^0 (byte 127)
    ws = torch.full((n, k // 32), 127, dtype=torch.uint8)
    bias = torch.randint(-4, 5, (n,), generator=g).float()
    exact = x.double() @ wi.double().T + bias.double()
    out = mxlinear.linear(x, w, ws, bias, out_dtype)
    assert torch.equal(out, exact.to(out_dtype))


def test_linear_empty_rows():
    w, ws = mxlinear.quantize(torch.ones(4, 32))
    out = mxlinear.linear(torch.empty(0, 32), w, ws)
    assert out.shape == (0, 4)


# --------------------------------------------------------------------------- torch integration


def test_version():
    assert mxlinear.__version__.count(".") == 2
    assert all(part.isdigit() for part in mxlinear.__version__.split("."))


def test_opcheck_quantize():
    g = fresh_gen()
    for rule in ["rceil", "floor"]:
        x = torch.randn(3, 4, 64, generator=g, dtype=torch.bfloat16)
        torch.library.opcheck(torch.ops.mxlinear.quantize.default, (x, rule))
        torch.library.opcheck(torch.ops.mxlinear._quantize.default, (x, ["rceil", "floor"].index(rule)))


def test_opcheck_linear():
    # opcheck's test_schema compares inputs with a multiplication that torch 2.11 does not
    # implement for float8_e4m3fn, so the weight's immutability and the output's freshness,
    # what that check establishes, are asserted directly below.
    g = fresh_gen()
    w, ws = random_weight(16, 64, g)
    x = torch.randn(2, 5, 64, generator=g, dtype=torch.bfloat16)
    bias = torch.randn(16, generator=g)
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    # With and without the activation mode (W8A8's index 0, W8A16's 1).
    for args in [(x, w, ws, None, None), (x, w, ws, bias, torch.float32),
                 (x, w, ws, bias, None, 0), (x, w, ws, None, torch.float16, 1)]:
        torch.library.opcheck(torch.ops.mxlinear.linear.default, args, test_utils=utils)
        before = [a.view(torch.uint8).clone() if a.dtype.itemsize == 1 else a.clone()
                  for a in args if isinstance(a, torch.Tensor)]
        out = torch.ops.mxlinear.linear(*args)
        after = [a.view(torch.uint8) if a.dtype.itemsize == 1 else a
                 for a in args if isinstance(a, torch.Tensor)]
        assert all(torch.equal(b, a) for b, a in zip(before, after))
        assert all(out.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()
                   for a in after)


def test_torch_compile_fullgraph():
    g = fresh_gen()
    w, ws = random_weight(16, 64, g)
    bias = torch.randn(16, generator=g, dtype=torch.bfloat16)

    def layer(x):
        return torch.ops.mxlinear.linear(x, w, ws, bias, None)

    compiled = torch.compile(layer, fullgraph=True)
    for m in (4, 9):
        x = torch.randn(m, 64, generator=g, dtype=torch.bfloat16)
        assert torch.equal(compiled(x), layer(x))


def test_fake_implementations_on_meta_tensors():
    x = torch.empty(2, 3, 64, dtype=torch.float16, device="meta")
    data, scales = mxlinear.quantize(x)
    assert data.device.type == "meta" and data.dtype == torch.float8_e4m3fn
    assert data.shape == x.shape and scales.shape == (2, 3, 2) and scales.dtype == torch.uint8
    w = torch.empty(24, 64, dtype=torch.float8_e4m3fn, device="meta")
    ws = torch.empty(24, 2, dtype=torch.uint8, device="meta")
    out = mxlinear.linear(x, w, ws, None, torch.bfloat16)
    assert out.shape == (2, 3, 24) and out.dtype == torch.bfloat16
    out = mxlinear.linear(x, w, ws, None, torch.float32, activation="bf16")
    assert out.shape == (2, 3, 24) and out.dtype == torch.float32
    with pytest.raises(RuntimeError, match=r"'x' has dtype Float; .*\(W8A16\)"):
        mxlinear.linear(x.float(), w, ws, activation="bf16")
    with pytest.raises(Exception, match="'weight_scale'"):
        mxlinear.linear(x, w, ws[:, :1])
    with pytest.raises(Exception, match="'x'"):
        mxlinear.quantize(torch.empty(2, 40, device="meta"))
    # A device mix is refused, naming the argument on the other device.
    with pytest.raises(RuntimeError, match="'weight_scale' is on cpu"):
        mxlinear.linear(x, w, torch.empty(24, 2, dtype=torch.uint8))


def test_fake_implementations_refuse_what_eager_refuses_with_its_message():
    # Each bad call on CPU tensors and on their meta copies (the fake kernels): the same
    # RuntimeError, word for word, naming the argument, or the same result shape and dtype.
    g = fresh_gen()
    m, n = (int(v) for v in torch.randint(1, 9, (2,), generator=g))
    k = 32 * int(torch.randint(1, 5, (1,), generator=g))
    w, ws = random_weight(n, k, g)
    x = torch.randn(m, k, generator=g, dtype=torch.bfloat16)
    xd, xs = mxlinear.quantize(x)
    bias = torch.randn(n, generator=g)
    lin, linq = torch.ops.mxlinear.linear, torch.ops.mxlinear.linear_quantized
    quant = torch.ops.mxlinear._quantize
    cases = [
        ("x", lambda x, w, ws, b, xd, xs: quant(x.double(), 0)),
        ("x", lambda x, w, ws, b, xd, xs: quant(x[:, : k - 8], 0)),
        ("x", lambda x, w, ws, b, xd, xs: lin(x.int(), w, ws)),
        ("x", lambda x, w, ws, b, xd, xs: lin(x[:, :0], w, ws)),
        ("x", lambda x, w, ws, b, xd, xs: lin(x.float(), w, ws, None, None, 1)),
        ("weight", lambda x, w, ws, b, xd, xs: lin(x, w.view(torch.uint8), ws)),
        ("weight", lambda x, w, ws, b, xd, xs: lin(x, w[0], ws)),
        ("weight", lambda x, w, ws, b, xd, xs: lin(x, torch.cat([w, w], 1), ws)),
        ("weight", lambda x, w, ws, b, xd, xs: lin(x, w[:0], ws[:0])),
        ("weight", lambda x, w, ws, b, xd, xs: linq(xd, xs, w[:0], ws[:0])),
        ("weight_scale", lambda x, w, ws, b, xd, xs: lin(x, w, ws.float())),
        ("weight_scale", lambda x, w, ws, b, xd, xs: lin(x, w, ws[:, :-1])),
        ("bias", lambda x, w, ws, b, xd, xs: lin(x, w, ws, b.double())),
        ("bias", lambda x, w, ws, b, xd, xs: lin(x, w, ws, torch.cat([b, b]))),
        ("out_dtype", lambda x, w, ws, b, xd, xs: lin(x, w, ws, None, torch.float64)),
        ("out_dtype", lambda x, w, ws, b, xd, xs: linq(xd, xs, w, ws, None, torch.int8)),
        ("x_data", lambda x, w, ws, b, xd, xs: linq(x, xs, w, ws)),
        ("x_data", lambda x, w, ws, b, xd, xs: linq(xd[:, : k - 16], xs, w, ws)),
        ("x_scales", lambda x, w, ws, b, xd, xs: linq(xd, xs.float(), w, ws)),
        ("x_scales", lambda x, w, ws, b, xd, xs: linq(xd, xs[:, :-1], w, ws)),
        (None, lambda x, w, ws, b, xd, xs: lin(x, w, ws.view(torch.float8_e8m0fnu), b)),
        (None, lambda x, w, ws, b, xd, xs: linq(xd, xs, w, ws, b, torch.float16)),
    ]
    for argument, call in cases:
        results = []
        for device in ("cpu", "meta"):
            try:
                out = call(x.to(device), w.to(device), ws.to(device), bias.to(device),
                           xd.to(device), xs.to(device))
                results.append((out.shape, out.dtype))
            except RuntimeError as e:
                results.append(str(e))
        eager, fake = results
        assert fake == eager
        if argument is not None:
            assert isinstance(eager, str) and f"argument '{argument}'" in eager, eager


# --------------------------------------------------------------------------- bad input


def test_bad_inputs_name_the_argument():
    w, ws = mxlinear.quantize(torch.ones(8, 64))
    x = torch.ones(2, 64, dtype=torch.bfloat16)
    cases = [
        (lambda: mxlinear.quantize(torch.ones(2, 64, dtype=torch.int32)), "'x'"),
        (lambda: mxlinear.quantize(torch.ones(2, 48)), "'x'"),
        (lambda: mxlinear.quantize(torch.ones(2, 64), "nearest"), "'rule'"),
        (lambda: mxlinear.linear(torch.ones(2, 48), w, ws), "'x'"),
        (lambda: mxlinear.linear(x.int(), w, ws), "'x'"),
        (lambda: mxlinear.linear(x, w.float(), ws), "'weight'"),
        (lambda: mxlinear.linear(x, w[:, :32], ws), "'weight'"),
        (lambda: mxlinear.linear(x, w, ws.float()), "'weight_scale'"),
        (lambda: mxlinear.linear(x, w, ws[:, :1]), "'weight_scale'"),
        (lambda: mxlinear.linear(x, w, ws[:4]), "'weight_scale'"),
        (lambda: mxlinear.linear(x, w, ws, torch.ones(7)), "'bias'"),
        (lambda: mxlinear.linear(x, w, ws, None, torch.int32), "'out_dtype'"),
        (lambda: mxlinear.linear(x.float(), w, ws, activation="bf16"), "'x'"),
        (lambda: torch.ops.mxlinear.linear(x, w, ws, None, None, 7), "'activation'"),
    ]
    for call, argument in cases:
        with pytest.raises(RuntimeError, match=argument):
            call()


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ACT_DTYPES)
def test_cuda_quantize_bit_exact(dtype):
    g = fresh_gen()
    x = adversarial_activation(64, 544, dtype, g).reshape(4, 16, 544)
    for rule in ["rceil", "floor"]:
        data, scales = mxlinear.quantize(x.cuda(), rule)
        want_data, want_scales = mxlinear.quantize(x, rule)
        assert torch.equal(scales.cpu(), want_scales)
        assert torch.equal(data.cpu().view(torch.uint8), want_data.view(torch.uint8))


@pytest.mark.gpu
@pytest.mark.parametrize("mnk", [(1, 64, 128), (7, 200, 544), (300, 256, 1024)])
def test_cuda_linear_within_contract(mnk):
    m, n, k = mnk
    g = fresh_gen()
    x = torch.randn(m, k, generator=g, dtype=torch.bfloat16)
    w, ws = random_weight(n, k, g)
    bias = torch.randn(n, generator=g, dtype=torch.bfloat16)
    for out_dtype in (torch.bfloat16, torch.float32):
        out = mxlinear.linear(x.cuda(), w.cuda(), ws.cuda(), bias.cuda(), out_dtype)
        assert out.device.type == "cuda" and out.dtype == out_dtype
        ref = emulation.linear(x, w, ws, bias)
        # fp32 accumulation on the GPU: the contract's Frobenius bound, and for bf16 output one
        # ulp plus the fp32 accumulation slack K * 2^-24 * sum |products|.
        o = out.cpu().double()
        absprod = emulation.dequantize(*emulation.quantize(x)).abs() @ emulation.dequantize(w, ws).abs().T
        slack = k * 2.0**-24 * absprod
        rounded = ref.to(out_dtype).double()
        ulp = (torch.nextafter(rounded.to(out_dtype), torch.tensor(float("inf"), dtype=out_dtype)).double() - rounded).abs()
        assert ((o - rounded).abs() <= ulp + slack).all()
        if out_dtype == torch.float32:
            assert float(torch.linalg.vector_norm(o - ref) / torch.linalg.vector_norm(ref)) <= 1e-5


@pytest.mark.gpu
def test_cuda_rejects_mixed_devices():
    w, ws = mxlinear.quantize(torch.ones(8, 64))
    x = torch.ones(2, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(RuntimeError, match="'weight'"):
        mxlinear.linear(x, w, ws.cuda())
    with pytest.raises(RuntimeError, match="'weight_scale'"):
        mxlinear.linear(x, w.cuda(), ws)


@pytest.mark.gpu
def test_cuda_graph_capture_and_replay():
    g = fresh_gen()
    m, n, k = 16, 256, 512
    w, ws = random_weight(n, k, g)
    w, ws = w.cuda(), ws.cuda()
    static_x = torch.randn(m, k, generator=g, dtype=torch.bfloat16).cuda()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        mxlinear.linear(static_x, w, ws)  # warm-up outside the graph
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = mxlinear.linear(static_x, w, ws)
    for _ in range(3):
        static_x.copy_(torch.randn(m, k, generator=g, dtype=torch.bfloat16))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out, mxlinear.linear(static_x, w, ws))
