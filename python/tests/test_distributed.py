"""mxlinear.distributed: column- and row-parallel layers over torch.distributed (gloo on CPU,
NCCL on two CUDA GPUs), against the unsharded layer and the bound of docs/MXFP8.md, "Tensor
parallelism".

The ranks are long-lived worker processes (one pool per world size, started once per module with
torch.multiprocessing's spawn and a file:// rendezvous in a fresh temporary directory, so runs
never share a port or a store). Each check below runs on every rank with the same seed, so every
rank builds the same full tensors; a check returns on success and raises on failure.
"""

import contextlib
import datetime
import io
import json
import math
import os
import queue
import re
import subprocess
import sys
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import mxlinear
from mxlinear.distributed import ColumnParallelMXFP8Linear, RowParallelMXFP8Linear, even_splits
from mxlinear.distributed import bench
from mxlinear.nn import MXFP8Linear
from test_ops import fresh_seed

U32 = 2.0**-24
U64 = 2.0**-53
SIGNIFICANT_BITS = {torch.bfloat16: 8, torch.float16: 11, torch.float32: 24}
MIN_EXPONENT = {torch.bfloat16: -126, torch.float16: -14, torch.float32: -126}
TASK_TIMEOUT_S = 120


def gamma(n: int, u: float = U32) -> float:
    return n * u / (1 - n * u)


# ---------------------------------------------------------------------------- the worker pool


def _worker(rank, world, init, backend, tasks, results):
    torch.set_num_threads(1)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        while True:
            item = tasks.get()
            if item is None:
                break
            name, args = item
            try:
                globals()[name](rank, world, *args)
                results.put((rank, None))
            except BaseException:  # noqa: BLE001  (reported to the test, which fails)
                results.put((rank, traceback.format_exc()))
    finally:
        dist.destroy_process_group()


class Pool:
    """``world`` ranks waiting for checks; ``run(name, *args)`` runs ``name(rank, world, *args)``
    on each and fails the test with every failing rank's traceback."""

    def __init__(self, world: int, directory: str, backend: str):
        ctx = mp.get_context("spawn")
        self.world, self.backend = world, backend
        init = "file://" + os.path.join(directory, f"rendezvous-{backend}-{world}")
        self.tasks = [ctx.Queue() for _ in range(world)]
        self.results = ctx.Queue()
        self.procs = [
            ctx.Process(target=_worker, args=(r, world, init, backend, self.tasks[r], self.results),
                        daemon=True)
            for r in range(world)
        ]
        for p in self.procs:
            p.start()
        self.broken = False

    def run(self, name: str, *args) -> None:
        for q in self.tasks:
            q.put((name, args))
        failures, done, wait = {}, 0, TASK_TIMEOUT_S
        while done < self.world:
            try:
                rank, error = self.results.get(timeout=wait)
            except queue.Empty:
                failures["timeout"] = f"{self.world - done} ranks gave no answer in {wait} s"
                break
            done += 1
            if error is not None:
                failures[rank] = error
                wait = 10  # the others may be stuck in a collective: do not wait for gloo's timeout
        if failures:
            self.close()
            raise AssertionError(
                f"{name}{args} failed on {self.world} ranks:\n"
                + "\n".join(f"--- rank {r}:\n{e}" for r, e in failures.items())
            )

    def close(self) -> None:
        self.broken = True
        for q in self.tasks:
            q.put(None)
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join()


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    made: dict = {}

    def get(world: int, backend: str = "gloo") -> Pool:
        key = (world, backend)
        if key not in made or made[key].broken:
            made[key] = Pool(world, str(tmp_path_factory.mktemp("dist")), backend)
        return made[key]

    yield get
    for p in made.values():
        if not p.broken:
            p.close()


def two_cuda_gpus() -> bool:
    return torch.cuda.is_available() and torch.cuda.device_count() >= 2 and dist.is_nccl_available()


needs_two_gpus = pytest.mark.skipif(not two_cuda_gpus(), reason="needs 2 CUDA GPUs and NCCL: "
                                    "NCCL test skipped")


# ---------------------------------------------------------------------------- data and reference


def gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def random_weight(n: int, k: int, g) -> tuple[torch.Tensor, torch.Tensor]:
    """MX-quantized random weights with block magnitudes 2^-3..2^3."""
    w = torch.randn(n, k, generator=g) * torch.pow(
        2.0, torch.randint(-3, 4, (n, k // 32), generator=g).float()).repeat_interleave(32, 1)
    return mxlinear.quantize(w)


def random_x(shape, g, dtype=torch.bfloat16) -> torch.Tensor:
    return (torch.randn(*shape, generator=g) * 4).to(dtype)


def deq(data, scales) -> torch.Tensor:
    q = data.view(torch.float8_e4m3fn).double().unflatten(-1, (-1, 32))
    s = torch.ldexp(torch.ones_like(scales, dtype=torch.float64), scales.view(torch.uint8).long() - 127)
    return (q * s.unsqueeze(-1)).flatten(-2)


def activation_f64(x, activation) -> torch.Tensor:
    """The activation the layer multiplies, in float64: deq(quantize(x)) (W8A8) or x (W8A16)."""
    return deq(*mxlinear.quantize(x)) if activation == "mx" else x.double()


def half_ulp(y: torch.Tensor) -> torch.Tensor:
    """Half an ulp of each element's binade in y's dtype (half the smallest subnormal for 0)."""
    p, emin = SIGNIFICANT_BITS[y.dtype], MIN_EXPONENT[y.dtype]
    _, e = torch.frexp(y.double())  # |y| = m 2^e, m in [0.5, 1): the binade's exponent is e - 1
    e = torch.where(y == 0, torch.full_like(e, emin), (e - 1).clamp(min=emin))
    return torch.ldexp(torch.ones_like(y, dtype=torch.float64), e - p)  # ulp / 2 = 2^(e-p+1) / 2


def row_parallel_bound(out, x, w, ws, bias, activation, sizes, device):
    """The exact output in float64 and the bound of docs/MXFP8.md, "Tensor parallelism", on
    |out - exact| element by element, for a row-parallel layer over K shards of ``sizes``."""
    world, k = len(sizes), sum(sizes)
    bounds = [(sum(sizes[:r]), sum(sizes[:r + 1])) for r in range(world)]
    a, wd, b = activation_f64(x, activation), deq(w, ws), bias.double()
    p = a.unsqueeze(-2) * wd  # [M, N, K] products, exact in float64
    exact = p.sum(-1) + b
    partials = torch.stack([p[..., s:e].sum(-1) for s, e in bounds])  # [R, M, N]
    terms = p.abs().sum(-1) + b.abs()
    if device == "cpu":  # each partial: its exact value rounded once to fp32
        bound = gamma(world + 1) * (partials.abs().sum(0) + b.abs())
    else:  # each partial: an fp32 sum of its K_r products in the kernel's order
        bound = gamma(max(sizes) + world) * terms
    bound = bound + 2 * gamma(k + 1, U64) * terms  # float64's own sums (reference and here)
    if out.dtype != torch.float32:
        bound = bound + half_ulp(out)
    return exact, bound, terms


# ---------------------------------------------------------------------------- checks (per rank)


def check_column(rank, world, seed, activation, n, k, device="cpu"):
    g = gen(seed)
    w, ws = random_weight(n, k, g)
    x = random_x((3, 7, k), g)  # a 3-D activation
    bias = random_x((n,), g)
    x, w, ws, bias = x.to(device), w.to(device), ws.to(device), bias.to(device)
    full = mxlinear.linear(x, w, ws, bias, activation=activation)
    layer = ColumnParallelMXFP8Linear.from_quantized(w, ws, bias, gather_output=True,
                                                     activation=activation)
    sizes = even_splits(n, world)
    assert layer.n_splits == sizes and max(sizes) - min(sizes) <= 1 and sum(sizes) == n
    n0, n1 = layer.n_start, layer.n_end
    assert (n0, n1) == (sum(sizes[:rank]), sum(sizes[:rank + 1]))
    assert torch.equal(layer.weight.view(torch.uint8), w[n0:n1].view(torch.uint8))
    assert torch.equal(layer.weight_scale, ws[n0:n1]) and torch.equal(layer.bias, bias[n0:n1])
    assert layer.weight.untyped_storage().nbytes() == layer.weight.numel()  # a copy, not a view
    out = layer(x)
    assert out.dtype == torch.bfloat16 and out.shape == full.shape
    if device == "cpu":
        assert torch.equal(out, full)  # each column is the unsharded layer's, bit for bit
    else:  # another kernel may serve the shard's N: hold it to the accumulation bound
        p = activation_f64(x, activation).unsqueeze(-2) * deq(w, ws)
        exact = p.sum(-1) + bias.double()
        bound = gamma(k + 1) * (p.abs().sum(-1) + bias.double().abs()) + half_ulp(out)
        assert bool(((out.double() - exact).abs() <= bound).all())
    layer.gather_output = False
    local = layer(x)
    assert local.shape == (3, 7, n1 - n0)
    assert torch.equal(local, out[..., n0:n1])

    # from_linear quantizes only the rank's rows, to the same bytes as the whole layer's.
    lin = torch.nn.Linear(k, n, dtype=torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(random_x((n, k), g))
        lin.bias.copy_(random_x((n,), g))  # not the global generator's: it differs per rank
    lin = lin.to(device)
    whole = MXFP8Linear.from_linear(lin, activation=activation)
    part = ColumnParallelMXFP8Linear.from_linear(lin, gather_output=True, activation=activation)
    assert torch.equal(part.weight.view(torch.uint8), whole.weight[n0:n1].view(torch.uint8))
    assert torch.equal(part.weight_scale, whole.weight_scale[n0:n1])
    if device == "cpu":
        assert torch.equal(part(x), whole(x))


def check_row(rank, world, seed, activation, k_splits, out_dtype, device="cpu"):
    g = gen(seed)
    n, k = 45, sum(k_splits) if k_splits else 352
    w, ws = random_weight(n, k, g)
    x = random_x((9, k), g)
    bias = random_x((n,), g)
    x, w, ws, bias = x.to(device), w.to(device), ws.to(device), bias.to(device)
    layer = RowParallelMXFP8Linear.from_quantized(w, ws, bias, k_splits=k_splits,
                                                  activation=activation, out_dtype=out_dtype)
    sizes = layer.k_splits
    assert sum(sizes) == k and all(s % 32 == 0 for s in sizes)
    if k_splits is None:
        assert sizes == even_splits(k, world, 32) and max(sizes) - min(sizes) <= 32
    bounds = [(sum(sizes[:r]), sum(sizes[:r + 1])) for r in range(world)]
    k0, k1 = bounds[rank]
    assert (layer.k_start, layer.k_end) == (k0, k1)
    assert torch.equal(layer.weight.view(torch.uint8), w[:, k0:k1].view(torch.uint8))
    assert torch.equal(layer.weight_scale, ws[:, k0 // 32:k1 // 32])
    out = layer(x)
    want_dtype = out_dtype or x.dtype
    assert out.dtype == want_dtype and out.shape == (9, n)

    # The input slice gives the same bits as the full input.
    sliced = RowParallelMXFP8Linear.from_quantized(w, ws, bias, k_splits=k_splits,
                                                   activation=activation, out_dtype=out_dtype,
                                                   input_is_parallel=True)
    assert torch.equal(sliced(x[:, k0:k1]), out)

    # partial_sum is the rank's fp32 part that forward all-reduces and adds the bias to.
    summed = layer.partial_sum(x)
    assert summed.dtype == torch.float32 and summed.shape == (9, n)
    dist.all_reduce(summed)
    assert torch.equal((summed + bias.to(torch.float32)).to(want_dtype), out)

    # Every rank holds the same result.
    outs = [torch.empty_like(out) for _ in range(world)]
    dist.all_gather(outs, out.contiguous())
    assert all(torch.equal(o, out) for o in outs)

    # The bound of docs/MXFP8.md, "Tensor parallelism", element by element in float64.
    exact, bound, terms = row_parallel_bound(out, x, w, ws, bias, activation, sizes, device)
    err = (out.double() - exact).abs()
    assert bool((err <= bound).all()), f"max err/bound {float((err / bound).max())}"
    # The unsharded layer meets the single-device bound; the sharded one stays near it.
    full = mxlinear.linear(x, w, ws, bias, out_dtype=out_dtype, activation=activation)
    assert bool(((full.double() - exact).abs() <= gamma(k + 1) * terms + half_ulp(full)
                 + 2 * gamma(k + 1, U64) * terms).all())

    # from_linear quantizes only the rank's K slice, to the bytes of the whole layer's slice.
    lin = torch.nn.Linear(k, n, dtype=torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(random_x((n, k), g))
        lin.bias.copy_(random_x((n,), g))  # not the global generator's: it differs per rank
    lin = lin.to(device)
    whole = MXFP8Linear.from_linear(lin)
    part = RowParallelMXFP8Linear.from_linear(lin, k_splits=k_splits)
    assert torch.equal(part.weight.view(torch.uint8), whole.weight[:, k0:k1].view(torch.uint8))
    assert torch.equal(part.weight_scale, whole.weight_scale[:, k0 // 32:k1 // 32])
    assert torch.equal(part.bias, lin.bias.detach())


def check_refusal(rank, world):
    w, ws = random_weight(8, 128, gen(1))
    bad = {2: [48, 80], 4: [32, 48, 16, 32]}[world]
    text = {2: r"rank 0's K shard \[0, 48\) has 48 columns; expected a multiple of 32 "
               r"\(whole MX blocks\)",
            4: r"rank 1's K shard \[32, 80\) has 48 columns; expected a multiple of 32"}[world]
    with pytest.raises(ValueError, match=text):
        RowParallelMXFP8Linear.from_quantized(w, ws, k_splits=bad)
    with pytest.raises(ValueError, match=r"k_splits' sums to 96; expected 128 \(K\)"):
        RowParallelMXFP8Linear.from_quantized(w, ws, k_splits=[32] * (world - 1) + [96 - 32 * (world - 1)])
    with pytest.raises(ValueError, match=f"has 1 sizes; expected {world}"):
        RowParallelMXFP8Linear.from_quantized(w, ws, k_splits=[128])
    with pytest.raises(ValueError, match=f"has 1 sizes; expected {world}"):
        ColumnParallelMXFP8Linear.from_quantized(w, ws, n_splits=[8])
    # Uneven N splits are any sizes; the column layer has no alignment rule.
    layer = ColumnParallelMXFP8Linear.from_quantized(w, ws, n_splits=[9 - world] + [1] * (world - 1))
    assert layer.weight.shape[0] == layer.n_splits[rank]
    # Inference-only: an input that requires grad is refused on every rank before any collective
    # (whose gradient would be this rank's part alone), and accepted without grad mode.
    x = torch.randn(3, 128, generator=gen(2)).requires_grad_()
    for parallel in (layer, RowParallelMXFP8Linear.from_quantized(w, ws)):
        with pytest.raises(RuntimeError, match=r"argument 'x' requires grad; expected an "
                                               r"inference call"):
            parallel(x)
        with torch.no_grad():
            assert parallel(x).shape[-1] in (8, layer.weight.shape[0])


def check_bad_input_on_an_empty_shard(rank, world, seed):
    # More ranks than K blocks (row) or one rank holding every row (column): the ranks with an
    # empty shard compute nothing, yet must refuse a bad input as the others do, or they would
    # wait in the collective while the others raise.
    g = gen(seed)
    n = int(torch.randint(1, 41, (1,), generator=g))
    k = 32 * int(torch.randint(1, world, (1,), generator=g))  # fewer blocks than ranks
    w, ws = random_weight(n, k, g)
    bias = random_x((n,), g)
    x = random_x((5, k), g)
    data, scales = mxlinear.quantize(x)
    row = RowParallelMXFP8Linear.from_quantized(w, ws, bias, activation="bf16")
    row_local = RowParallelMXFP8Linear.from_quantized(w, ws, bias, activation="bf16",
                                                      input_is_parallel=True)
    assert row.k_start == row.k_end or rank < k // 32
    k0, k1 = row.k_start, row.k_end
    owner = int(torch.randint(0, world, (1,), generator=g))
    column = ColumnParallelMXFP8Linear.from_quantized(
        w, ws, bias, activation="bf16", n_splits=[n if r == owner else 0 for r in range(world)])

    def with_attribute(layer, name, value, call):
        saved = getattr(layer, name)
        setattr(layer, name, value)
        try:
            call()
        finally:
            setattr(layer, name, saved)

    cases = [
        lambda: row.partial_sum(x.float()),  # W8A16 refuses float32
        lambda: row.partial_sum(x.double()),
        lambda: row.partial_sum((data, scales.float())),
        lambda: row.partial_sum((x, scales)),
        lambda: row.partial_sum((data, scales[..., :-1])),
        lambda: row.partial_sum((data, scales[:-1])),
        lambda: row_local.partial_sum(x[:, k0:k1].int()),
        lambda: with_attribute(row, "batch_invariant", 1, lambda: row.partial_sum(x)),
        lambda: with_attribute(row, "activation", "fp8", lambda: row.partial_sum(x)),
        lambda: column(x.float()),
        lambda: column(torch.cat([x, x], -1)),
        lambda: column(x[:, :-8]),
        lambda: column(x[0, 0]),
        lambda: column((data, scales[:-1])),
        lambda: with_attribute(column, "out_dtype", torch.float64, lambda: column(x)),
    ]
    collective = [  # the calls that hung: forward's all-reduce and all-gather
        lambda: row(x.float()),
        lambda: with_attribute(column, "gather_output", True, lambda: column(x.float())),
    ]

    def outcomes(calls):
        out = []
        for call in calls:
            try:
                call()
                out.append("returned")
            except (RuntimeError, TypeError, ValueError) as e:
                out.append(f"{type(e).__name__}: {re.sub(r'rank [0-9]+', 'rank R', str(e))}")
        everyone = [None] * world
        dist.all_gather_object(everyone, out)
        return everyone

    for calls in (cases, collective):  # the first list has no collective: it cannot hang
        everyone = outcomes(calls)
        for i in range(len(calls)):
            seen = {r: everyone[r][i] for r in range(world)}
            assert len(set(seen.values())) == 1 and seen[0] != "returned", (i, seen)
    # The group is still in step: good inputs work on every rank.
    column.gather_output = True
    assert torch.equal(column(x), mxlinear.linear(x, w, ws, bias, activation="bf16"))
    out = row(x)
    outs = [torch.empty_like(out) for _ in range(world)]
    dist.all_gather(outs, out)
    assert out.shape == (5, n) and all(torch.equal(o, out) for o in outs)


def stored_tensors(path) -> dict:
    """A checkpoint's tensors, each from the file its index names, else from the only file that
    holds it."""
    from safetensors.torch import load_file

    if os.path.isfile(path):
        return load_file(path)
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        return {key: load_file(os.path.join(path, file))[key] for key, file in weight_map.items()}
    full = {}
    for file in os.listdir(path):
        if file.endswith(".safetensors"):
            tensors = load_file(os.path.join(path, file))
            assert not set(tensors) & set(full), file
            full.update(tensors)
    return full


def check_safetensors(rank, world, path, prefix, kind):
    full = stored_tensors(path)
    w, ws, b = full[f"{prefix}.weight"], full[f"{prefix}.weight_scale"], full[f"{prefix}.bias"]
    n, k = w.shape
    if kind == "column":
        layer = ColumnParallelMXFP8Linear.from_safetensors(path, prefix, gather_output=True,
                                                           activation="mx")
        rows = slice(layer.n_start, layer.n_end)
        assert layer.weight.shape == (layer.n_end - layer.n_start, k)
        assert torch.equal(layer.weight.view(torch.uint8), w[rows].view(torch.uint8))
        assert torch.equal(layer.weight_scale, ws[rows].view(torch.uint8))
        assert torch.equal(layer.bias, b[rows])
    else:
        layer = RowParallelMXFP8Linear.from_safetensors(path, prefix, activation="mx")
        k0, k1 = layer.k_start, layer.k_end
        assert layer.weight.shape == (n, k1 - k0) and layer.weight_scale.shape == (n, (k1 - k0) // 32)
        assert torch.equal(layer.weight.view(torch.uint8), w[:, k0:k1].view(torch.uint8))
        assert torch.equal(layer.weight_scale, ws[:, k0 // 32:k1 // 32].view(torch.uint8))
        assert torch.equal(layer.bias, b)
    # Only the slice was read: the shard's tensors own storage of exactly their own size.
    assert layer.weight.untyped_storage().nbytes() == layer.weight.numel() < w.numel()
    assert layer.weight_scale.untyped_storage().nbytes() == layer.weight_scale.numel() < ws.numel()
    assert layer.weight.dtype == torch.float8_e4m3fn and layer.weight_scale.dtype == torch.uint8
    x = random_x((5, k), gen(7))
    if kind == "column":
        assert torch.equal(layer(x), MXFP8Linear.from_quantized(w, ws, b, activation="mx")(x))
    else:  # within the bound of docs/MXFP8.md, "Tensor parallelism", as in check_row
        out = layer(x)
        exact, bound, _ = row_parallel_bound(out, x, w, ws, b, "mx", layer.k_splits, "cpu")
        err = (out.double() - exact).abs()
        assert bool((err <= bound).all()), f"max err/bound {float((err / bound).max())}"


def run_bench(argv) -> tuple[int, str, str]:
    """``mxlinear.distributed.bench.main(argv)`` on the pool's process group: exit status, stdout,
    stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = bench.main(argv)
        except SystemExit as e:  # argparse's errors
            status = e.code
    return status, out.getvalue(), err.getvalue()


# --tokens is --m, which torchrun's parser would take for an abbreviation of its own options.
TINY_BENCH = ["--hidden", "64", "--intermediate", "128", "--tokens", "1,3", "--replays", "2"]


def check_bench_json(path, world, backend, activation, ms=(1, 3)):
    with open(path) as f:
        r = json.load(f)
    assert (r["world_size"], r["backend"], r["activation"]) == (world, backend, activation)
    assert r["torch"] == torch.__version__ and len(r["device_names"]) == world
    assert r["replays"] == 2 and r["timing"]["local"] and r["timing"]["collective"]
    assert r["shapes"] == {"hidden": 64, "intermediate": 128, "intermediate_per_rank": 128 // world,
                           "gate_up": {"full": [256, 64], "per_rank": [256 // world, 64]},
                           "down": {"full": [64, 128], "per_rank": [64, 128 // world]}}
    assert [row["m"] for row in r["rows"]] == list(ms)
    for row in r["rows"]:
        assert not row.get("wrong")
        for key, _, _ in bench.FIGURES:
            assert key in r["figures"]
            assert isinstance(row[key], float) and math.isfinite(row[key]) and row[key] > 0, key
            per_rank = row["per_rank"][key]
            assert len(per_rank) == world
            if key == "single_gpu_mlp_us":  # rank 0 alone
                assert per_rank[1:] == [None] * (world - 1) and row[key] == per_rank[0]
            else:
                assert row[key] == max(per_rank)
        assert len(row["checks"]) == world
        for c in row["checks"]:
            assert c["column_bits_equal"]["ok"]
            for name in ("mlp_vs_single", "column_timed_mode", "row_timed_mode"):
                assert c[name]["ok"] and c[name]["rel_error"] <= c[name]["tolerance"], name
    return r


def check_bench(rank, world, path, activation, device="cpu"):
    backend = "gloo" if device == "cpu" else "nccl"
    status, out, err = run_bench(TINY_BENCH + ["--backend", backend, "--device", device,
                                               "--activation", activation, "--json", path])
    assert status == 0, err
    if rank != 0:
        assert out == ""  # rank 0 prints and writes for all
        return
    check_bench_json(path, world, backend, activation)
    lines = out.splitlines()
    assert any(line.split()[:2] == ["M", "column"] for line in lines), out
    for m in ("1", "3"):
        assert any(line.split()[:1] == [m] for line in lines), out


def check_bench_catches_a_wrong_layout(rank, world):
    # Sharding the [gate; up] rows as they are gives rank 0 two halves of gate and no up: the
    # checks must see it, and nothing is timed.
    interleave = bench._interleave
    bench._interleave = lambda gate, up, world: bench._cat_rows([gate, up])
    try:
        status, out, err = run_bench(TINY_BENCH + ["--backend", "gloo", "--device", "cpu"])
    finally:
        bench._interleave = interleave
    assert status == 1
    if rank == 0:
        assert "rank 0: check column_bits_equal failed" in err and "not timed" in err, err
        assert "check mlp_vs_single failed" in err and "WRONG" in out, out


def check_bench_refusals(rank, world):
    cpu = ["--backend", "gloo", "--device", "cpu", "--m", "1"]  # in-process: --m is fine
    # 96 is whole MX blocks, but not once split over 2 ranks (48 a rank).
    status, _, err = run_bench(cpu + ["--hidden", "64", "--intermediate", "96"])
    assert status == 2
    if rank == 0:
        assert ("argument --intermediate: is 96, which 2 ranks cannot split into whole MX blocks "
                "(48 a rank); expected a multiple of 64") in err, err
    status, _, err = run_bench(cpu + ["--intermediate", "100"])
    assert status == 2
    assert ("argument --intermediate: is '100'; expected a positive multiple of 32") in err, err
    status, _, err = run_bench(["--backend", "nccl", "--device", "cpu"])
    assert status == 2 and "argument --backend: is 'nccl' with --device cpu; expected gloo" in err


# ---------------------------------------------------------------------------- tests


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("activation", ["mx", "bf16"])
def test_column_parallel_gathered_equals_unsharded(pools, world, activation):
    pools(world).run("check_column", fresh_seed() % 2**31, activation, 203, 160)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("activation", ["mx", "bf16"])
@pytest.mark.parametrize("out_dtype", [None, torch.float32])
def test_row_parallel_within_bound_even_split(pools, world, activation, out_dtype):
    pools(world).run("check_row", fresh_seed() % 2**31, activation, None, out_dtype)


@pytest.mark.parametrize("world,k_splits", [(2, [64, 448]), (4, [96, 0, 320, 32])])
@pytest.mark.parametrize("activation", ["mx", "bf16"])
def test_row_parallel_within_bound_explicit_uneven_split(pools, world, k_splits, activation):
    pools(world).run("check_row", fresh_seed() % 2**31, activation, k_splits, None)


@pytest.mark.parametrize("world", [2, 4])
def test_k_shard_not_whole_blocks_is_refused(pools, world):
    pools(world).run("check_refusal")


@pytest.mark.parametrize("world", [2, 4])
def test_empty_shards_refuse_bad_input_as_the_others_do(pools, world):
    pools(world).run("check_bad_input_on_an_empty_shard", fresh_seed() % 2**31)


def write_checkpoint(directory, prefix, n, k, split_files: bool, e8m0: bool) -> str:
    from safetensors.torch import save_file

    w, ws = random_weight(n, k, gen(fresh_seed() % 2**31))
    tensors = {f"{prefix}.weight": w,
               f"{prefix}.weight_scale": ws.view(torch.float8_e8m0fnu) if e8m0 else ws,
               f"{prefix}.bias": random_x((n,), gen(3)),
               "model.embed.weight": torch.zeros(4, 4)}
    if not split_files:
        path = os.path.join(directory, "model.safetensors")
        save_file(tensors, path, {"format": "pt"})
        return path
    first = {key: v for key, v in tensors.items() if not key.endswith("weight_scale")}
    second = {key: v for key, v in tensors.items() if key.endswith("weight_scale")}
    save_file(first, os.path.join(directory, "model-00001-of-00002.safetensors"))
    save_file(second, os.path.join(directory, "model-00002-of-00002.safetensors"))
    index = {"weight_map": {key: ("model-00002-of-00002.safetensors" if key in second
                                  else "model-00001-of-00002.safetensors") for key in tensors}}
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)
    return str(directory)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("kind", ["column", "row"])
@pytest.mark.parametrize("split_files,e8m0", [(False, False), (True, True)])
def test_from_safetensors_reads_the_rank_slice(pools, tmp_path, world, kind, split_files, e8m0):
    prefix = "model.layers.0.mlp.down_proj"
    path = write_checkpoint(tmp_path, prefix, 37, 224, split_files, e8m0)
    pools(world).run("check_safetensors", path, prefix, kind)


def check_safetensors_refused(rank, world, path, prefix, message):
    from mxlinear.checkpoints import CheckpointError

    for kind in (ColumnParallelMXFP8Linear, RowParallelMXFP8Linear):
        with pytest.raises(CheckpointError, match=rf"^{kind.__name__}\.from_safetensors: {message}"):
            kind.from_safetensors(path, prefix)


@pytest.mark.parametrize("unreadable", ["weight_scale", "bias"])
def test_from_safetensors_names_a_tensor_whose_data_cannot_be_read(pools, tmp_path, unreadable):
    # The header parses (a 6-bit float is a safetensors dtype), but torch has no type to read it
    # as: the read of the rank's slice fails, named with the file and the tensor.
    from test_checkpoints import raw_safetensors

    prefix, n, k = "model.layers.0.mlp.down_proj", 36, 64
    entries = {f"{prefix}.weight": ("F8_E4M3", [n, k], bytes(n * k)),
               f"{prefix}.weight_scale": ("U8", [n, k // 32], bytes([127]) * (n * k // 32)),
               f"{prefix}.bias": ("F32", [n], bytes(4 * n))}
    shape = entries[f"{prefix}.{unreadable}"][1]
    entries[f"{prefix}.{unreadable}"] = ("F6_E2M3", shape, bytes(math.prod(shape) * 6 // 8))
    path = tmp_path / "model.safetensors"
    path.write_bytes(raw_safetensors(entries))
    pools(2).run("check_safetensors_refused", str(path), prefix,
                 re.escape(f"'{path}' is not a readable safetensors file: its tensor "
                           f"'{prefix}.{unreadable}' cannot be read (") + r"\w+: .+\); expected")


def check_safetensors_refused_unread(rank, world, path, prefix, message):
    """check_safetensors_refused, and no tensor's data read: the dtypes come from the header."""
    from mxlinear.distributed._safetensors import _SafetensorsLayer

    read, reads = _SafetensorsLayer.read, []

    def counted(self, suffix, *args, **kwargs):
        reads.append(suffix)
        return read(self, suffix, *args, **kwargs)

    _SafetensorsLayer.read = counted
    try:
        check_safetensors_refused(rank, world, path, prefix, message)
    finally:
        _SafetensorsLayer.read = read
    assert reads == [], f"read {reads} before refusing the dtype"


@pytest.mark.parametrize("suffix, dtype, expected", [
    ("weight", torch.bfloat16, "float8_e4m3fn"),
    ("weight_scale", torch.float32, "uint8 or float8_e8m0fnu"),
    ("bias", torch.int32, "bfloat16 or float16 or float32"),
])
def test_from_safetensors_refuses_a_wrong_dtype_before_reading(pools, tmp_path, suffix, dtype,
                                                                expected):
    from safetensors.torch import load_file, save_file

    prefix = "model.layers.0.mlp.down_proj"
    path = write_checkpoint(tmp_path, prefix, 37, 224, split_files=False, e8m0=False)
    tensors = load_file(path)
    key = f"{prefix}.{suffix}"
    tensors[key] = tensors[key].to(dtype)
    save_file(tensors, path)
    pools(2).run("check_safetensors_refused_unread", path, prefix,
                 re.escape(f"tensor '{key}' has dtype {str(dtype).removeprefix('torch.')}; "
                           f"expected {expected}") + "$")


def test_from_safetensors_names_a_malformed_index(pools, tmp_path):
    from test_checkpoints import malformed_indexes

    prefix = "model.layers.0.mlp.down_proj"
    path = write_checkpoint(tmp_path, prefix, 37, 224, split_files=True, e8m0=False)
    index = os.path.join(path, "model.safetensors.index.json")
    with open(index) as f:
        cases = malformed_indexes(json.load(f)["weight_map"])
    for what in ("cut short", "not UTF-8", "nesting past the stack", "null", "weight_map a list",
                 "a file name a number", "a path"):
        contents, message = cases[what]
        with open(index, "wb") as f:
            f.write(contents)
        pools(2).run("check_safetensors_refused", path, prefix, re.escape(f"'{index}'") + message)


def stale_copy(tensors: dict) -> dict:
    """Other values under the same names and shapes, as an earlier save would have left."""
    return {key: (v.view(torch.uint8) ^ 0x11).view(v.dtype) if v.element_size() == 1 else v + 1
            for key, v in tensors.items()}


@pytest.mark.parametrize("kind", ["column", "row"])
def test_from_safetensors_takes_each_tensor_from_the_file_the_index_names(pools, tmp_path, kind):
    # Stale copies in a listed shard that sorts after the one the index names, and in a file the
    # index does not list, are never read.
    from safetensors.torch import load_file, save_file

    prefix = "model.layers.0.mlp.down_proj"
    path = write_checkpoint(tmp_path, prefix, 37, 224, split_files=True, e8m0=False)
    first, second = (os.path.join(path, f"model-0000{i}-of-00002.safetensors") for i in (1, 2))
    in_first = {k: v for k, v in load_file(first).items() if k.startswith(prefix)}
    in_second = load_file(second)
    assert set(in_second) == {f"{prefix}.weight_scale"}
    save_file(stale_copy({**in_first, **in_second}),
              os.path.join(path, "model-00003-of-00003.safetensors"))
    save_file({**in_second, **stale_copy(in_first)}, second)
    pools(2).run("check_safetensors", path, prefix, kind)


def test_from_safetensors_resolves_files_as_load_mxfp8_does(pools, tmp_path):
    from safetensors.torch import load_file, save_file

    prefix = "model.layers.0.mlp.down_proj"
    weight = f"{prefix}.weight"
    path = write_checkpoint(tmp_path, prefix, 37, 224, split_files=True, e8m0=False)
    first, second = (os.path.join(path, f"model-0000{i}-of-00002.safetensors") for i in (1, 2))
    index = os.path.join(path, "model.safetensors.index.json")
    tensors = {**load_file(first), **load_file(second)}

    # The index places the weight in the second shard, which does not hold it.
    with open(index) as f:
        original = json.load(f)
    moved = {"weight_map": {**original["weight_map"], weight: os.path.basename(second)}}
    with open(index, "w") as f:
        json.dump(moved, f)
    pools(2).run("check_safetensors_refused", path, prefix,
                 re.escape(f"'{index}' places tensor '{weight}' in '{second}', which does not "
                           "hold it"))

    # A listed shard holds a tensor that the index does not place.
    bias = f"{prefix}.bias"
    unlisted = {"weight_map": {k: v for k, v in original["weight_map"].items() if k != bias}}
    with open(index, "w") as f:
        json.dump(unlisted, f)
    pools(2).run("check_safetensors_refused", path, prefix,
                 re.escape(f"'{first}' holds tensor '{bias}', which '{index}' does not place; "))

    # Without an index, a tensor in two files could be either: refused, naming both.
    os.remove(index)
    third = os.path.join(path, "model-00003-of-00003.safetensors")
    save_file(stale_copy({weight: tensors[weight]}), third)
    pools(2).run("check_safetensors_refused", path, prefix,
                 re.escape(f"tensor '{weight}' is stored twice, in '{first}' and '{third}', and "
                           f"'{path}' has no model.safetensors.index.json"))


@pytest.mark.parametrize("cuts", [[0, 32, 96], [0, 64, 160, 352], [96, 352]])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_w8a8_quantizing_a_k_slice_equals_slicing_the_quantized_input(cuts, dtype):
    g = gen(fresh_seed() % 2**31)
    x = random_x((11, 352), g, dtype) * torch.pow(
        2.0, torch.randint(-8, 9, (11, 11), generator=g).float()).repeat_interleave(32, 1).to(dtype)
    data, scales = mxlinear.quantize(x)
    for a, b in zip(cuts, cuts[1:]):
        d, s = mxlinear.quantize(x[:, a:b].contiguous())
        assert torch.equal(d.view(torch.uint8), data[:, a:b].view(torch.uint8))
        assert torch.equal(s, scales[:, a // 32:b // 32])


def test_even_splits():
    assert even_splits(203, 4) == [51, 51, 51, 50]
    assert even_splits(352, 4, 32) == [96, 96, 96, 64]
    assert even_splits(64, 4, 32) == [32, 32, 0, 0]


def test_needs_an_initialized_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is initialized in this process")
    w, ws = random_weight(8, 64, gen(1))
    with pytest.raises(RuntimeError, match="torch.distributed is not initialized"):
        ColumnParallelMXFP8Linear.from_quantized(w, ws)


@pytest.mark.parametrize("activation", ["mx", "bf16"])
def test_tp_mlp_bench_runs_on_two_gloo_ranks(pools, tmp_path, activation):
    pools(2).run("check_bench", str(tmp_path / "bench.json"), activation)


def test_tp_mlp_bench_fails_its_checks_on_a_wrong_layout(pools):
    pools(2).run("check_bench_catches_a_wrong_layout")


def test_tp_mlp_bench_refuses_bad_sizes_naming_the_option(pools):
    pools(2).run("check_bench_refusals")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--hidden", "100"], "argument --hidden: is '100'; expected a positive multiple of 32"),
        (["--intermediate", "0"], "argument --intermediate: is '0'; expected a positive multiple"),
        (["--m", "1,0"], "argument --m/--tokens: has '0'; expected positive integers"),
        (["--tokens", "x"], "argument --m/--tokens: has 'x'; expected positive integers"),
        (["--activation", "fp4"], "argument --activation: invalid choice: 'fp4'"),
        (["--backend", "mpi"], "argument --backend: invalid choice: 'mpi'"),
        (["--replays", "0"], "argument --replays: is '0'; expected a positive integer"),
    ],
)
def test_tp_mlp_bench_bad_options_are_named_with_their_value(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(args)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_tp_mlp_bench_under_torchrun(tmp_path):
    # The command line as documented, its process group from torchrun's environment.
    path = tmp_path / "bench.json"
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "mxlinear.distributed.bench", "--backend", "gloo", "--device", "cpu",
         *TINY_BENCH, "--json", str(path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=TASK_TIMEOUT_S, check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    check_bench_json(path, 2, "gloo", "mx")


# ---------------------------------------------------------------------------- NCCL on 2 GPUs


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize("activation", ["mx", "bf16"])
def test_nccl_column_parallel(pools, activation):
    pools(2, "nccl").run("check_column", fresh_seed() % 2**31, activation, 203, 160, "cuda")


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize("activation", ["mx", "bf16"])
@pytest.mark.parametrize("k_splits", [None, [64, 448]])
def test_nccl_row_parallel_within_bound(pools, activation, k_splits):
    pools(2, "nccl").run("check_row", fresh_seed() % 2**31, activation, k_splits, None, "cuda")


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize("activation", ["mx", "bf16"])
def test_nccl_tp_mlp_bench(pools, tmp_path, activation):
    pools(2, "nccl").run("check_bench", str(tmp_path / "bench.json"), activation, "cuda")
