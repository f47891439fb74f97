"""``torchrun --nproc-per-node 2 -m mxlinear.distributed.bench``: the MLP of one transformer block
in MXFP8, tensor parallel over the ranks of the default process group, against the same MLP on one
GPU and in bf16.

The MLP: x [M, hidden] bf16, the same on every rank -> ``ColumnParallelMXFP8Linear`` gate_up
(N = 2 * intermediate, K = hidden, no gather) -> SiLU(gate) * up -> ``RowParallelMXFP8Linear``
down (N = hidden, K = intermediate, ``input_is_parallel``; its fp32 partials are all-reduced) ->
y [M, hidden] bf16 on every rank. Weights are random MXFP8 (RCEIL scales), no bias; --activation
mx runs every layer W8A8, bf16 W8A16.

SiLU-and-multiply needs the gate and the up value of each intermediate feature on the same rank.
So the full gate_up weight is built interleaved per rank: rank r's rows of it (its even N shard)
are [gate rows of part r; up rows of part r], part r being the intermediate features
[r * I/R, (r + 1) * I/R), which are also rank r's K slice of the down layer. A checkpoint's
[gate; up] weight needs that permutation of its rows before it is sharded.

Run it on two Hopper GPUs (NCCL):
    torchrun --nproc-per-node 2 -m mxlinear.distributed.bench --json tp2.json
and on CPU (gloo; the times only show that it runs):
    torchrun --nproc-per-node 2 -m mxlinear.distributed.bench --backend gloo --device cpu \\
        --hidden 256 --intermediate 512 --tokens 1,16 --replays 3
(--tokens is --m: torchrun's parser refuses --m itself as an ambiguous abbreviation of its own
options.)

Figures per M, microseconds per call, taken on every rank; the table and the JSON's figures are
the max over ranks (the JSON also has each rank's):
  column   the column layer's call on its shard (the activation's MX quantization included in
           W8A8)
  row      the row layer's local GEMM without its all-reduce: its partial_sum (the fp32 partial
           its forward reduces, no bias)
  ar bf16  torch.distributed.all_reduce of an [M, hidden] bf16 tensor alone (what a bf16 TP MLP
           reduces)
  ar fp32  the same for float32: what the row layer reduces (its partials are fp32)
  TP       the whole tensor-parallel step: column, SiLU-and-multiply, row with its all-reduce
  1 GPU    the same MLP unsharded, on rank 0 alone (MXFP8Linear over the full weights)
  TP bf16  the TP step in bf16: torch.nn.functional.linear on each rank's bf16 dequantized shards,
           SiLU-and-multiply and a bf16 all-reduce
On CUDA the weights rotate through copies worth at least 3x L2, so every call reads its weights
from DRAM as in a model far larger than L2; the calls (one per copy, at least 8) are captured into
one CUDA graph and the median over --replays replays timed by events is reported. Steps with a
collective are timed the same way if NCCL collectives capture into a CUDA graph here, else eagerly
(events around the calls); the JSON says which. A barrier precedes every timed region (and, for a
step with a collective, every replay). On CPU the figures are time.perf_counter around the calls.

Checks, per M before it is timed (exit status 1 when one fails on any rank; that M is not timed):
the column layer's output shard equals the matching columns of the unsharded gate_up output bit
for bit (in the batch-invariant mode, where each output's summation order depends on K alone), and
the TP output is within the bound of docs/MXFP8.md, "Tensor parallelism", of the unsharded
output; in the timed mode, where the column shard's N may select another kernel, the TP output is
finite and each layer is within the document's bounds of its unsharded form on the same input.
Bad options exit with status 2, as does a missing Hopper GPU with --device cuda.
"""

import argparse
import contextlib
import dataclasses
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import mxlinear  # the package's ops; looked up at call time

from .. import _bench_timing as timing
from ..bench import _dequantize, _positive, _repeat, _table, _weights, parse_ms
from ..nn import BLOCK, MXFP8Linear
from .column import ColumnParallelMXFP8Linear
from .row import RowParallelMXFP8Linear

PROG = "torchrun --nproc-per-node 2 -m mxlinear.distributed.bench"
WHERE = "mxlinear.distributed.bench"
DEFAULT_M = (1, 16, 64, 256, 1024, 4096)
# Copies of the weights at most: small layers would need thousands to fill 3x L2, and then run
# partly from L2 (the JSON's weights_from_dram says whether they did).
MAX_COPIES = 32
# Key in the JSON, column of the table, what it is.
FIGURES = (
    ("column_gemm_us", "column", "column layer's call on the rank's shard"),
    ("row_gemm_us", "row", "row layer's local GEMM (fp32 partial, no bias), without its "
                           "all-reduce"),
    ("allreduce_bf16_us", "ar bf16", "all_reduce of an [M, hidden] bf16 tensor"),
    ("allreduce_fp32_us", "ar fp32", "all_reduce of an [M, hidden] fp32 tensor (the row layer's)"),
    ("tp_mlp_us", "TP", "whole TP step: column, SiLU-and-multiply, row with its all-reduce"),
    ("single_gpu_mlp_us", "1 GPU", "the unsharded MXFP8 MLP on rank 0 alone"),
    ("tp_bf16_mlp_us", "TP bf16", "the TP step in bf16 (F.linear on dequantized shards, bf16 "
                                  "all-reduce)"),
)
U = 2.0**-24  # fp32's unit roundoff


def gamma(n: int) -> float:
    """gamma_n = n u / (1 - n u) of docs/MXFP8.md, "The fp32 accumulation bound"."""
    return n * U / (1 - n * U)


# ---------------------------------------------------------------------------- options


def _block_multiple(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < BLOCK or value % BLOCK:
        raise argparse.ArgumentTypeError(
            f"is '{text}'; expected a positive multiple of {BLOCK} (the MX block size)")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=_block_multiple, default=6144,
                   help="hidden size: gate_up's K and down's N (default: 6144)")
    p.add_argument("--intermediate", type=_block_multiple, default=6144,
                   help="intermediate size over all ranks: gate_up's N is twice it, down's K is "
                        "it; each rank's share must be a multiple of 32 (default: 6144, 3072 a "
                        "rank on 2)")
    # --tokens too: torchrun's own parser refuses --m, as an ambiguous abbreviation of its
    # options (--master-addr, --module, ...), before the module sees it.
    p.add_argument("--m", "--tokens", dest="m", type=parse_ms, default=list(DEFAULT_M),
                   help="token counts M, comma-separated (default: 1,16,64,256,1024,4096); "
                        "under torchrun spell it --tokens")
    p.add_argument("--activation", choices=mxlinear.ACTIVATIONS, default="mx",
                   help="mx (W8A8) MX-quantizes each layer's activation first, bf16 (W8A16) "
                        "multiplies it as it is (default: mx)")
    p.add_argument("--replays", type=_positive, default=10,
                   help="timed replays per figure; the figure is their median (default: 10)")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="also write the figures and the environment here (rank 0)")
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl",
                   help="torch.distributed backend (default: nccl)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="where the layers run (default: cuda; cpu needs --backend gloo)")
    args = p.parse_args(argv)
    if args.backend == "nccl" and args.device == "cpu":
        p.error("argument --backend: is 'nccl' with --device cpu; expected gloo (NCCL reduces "
                "CUDA tensors only)")
    return args


def _device_problem(args) -> str | None:
    """Why this process cannot run on --device, or None."""
    if args.device == "cpu":
        return None
    if not torch.cuda.is_available():
        return "no CUDA device: --device cuda times the GPU kernels and needs a Hopper GPU (sm_90)"
    local = int(os.environ.get("LOCAL_RANK", torch.cuda.current_device()))
    if local >= torch.cuda.device_count():
        return (f"LOCAL_RANK is {local} but {torch.cuda.device_count()} CUDA devices are "
                "visible; expected one GPU per rank")
    major, minor = torch.cuda.get_device_capability(local)
    if (major, minor) != (9, 0):
        return (f"the CUDA device is {torch.cuda.get_device_name(local)} (sm_{major}{minor}); "
                "expected a Hopper GPU (sm_90)")
    return None


# ---------------------------------------------------------------------------- the MLP


def _cat_rows(parts: list[torch.Tensor]) -> torch.Tensor:
    # As bytes: the float8 weight and its uint8 scales alike.
    return torch.cat([p.view(torch.uint8) for p in parts]).view(parts[0].dtype)


def _interleave(gate: torch.Tensor, up: torch.Tensor, world: int) -> torch.Tensor:
    """[gate part 0; up part 0; gate part 1; up part 1; ...] along N: the even split of its rows
    over `world` ranks gives rank r [gate rows of part r; up rows of part r]."""
    return _cat_rows([t for g, u in zip(gate.chunk(world), up.chunk(world)) for t in (g, u)])


def _silu_and_mul(h: torch.Tensor) -> torch.Tensor:
    """h [M, 2i] = [gate | up] -> SiLU(gate) * up [M, i]."""
    i = h.shape[-1] // 2
    return F.silu(h[..., :i]) * h[..., i:]


def _tp_step(col, row, x):
    return row(_silu_and_mul(col(x)))


def _single_step(gate_up, down, x):
    return down(_silu_and_mul(gate_up(x)))


def _bf16_step(w_gate_up, w_down, x):
    y = F.linear(_silu_and_mul(F.linear(x, w_gate_up)), w_down)
    dist.all_reduce(y)
    return y


@dataclasses.dataclass
class _Layers:
    cols: list  # ColumnParallelMXFP8Linear copies of the rank's gate_up shard
    rows: list  # RowParallelMXFP8Linear copies of its down shard
    singles: list  # (gate_up, down) MXFP8Linear pairs over the full weights
    bf16: list  # (gate_up, down) bf16 dequantized shards
    col_abs: torch.Tensor  # |deq(W)| of the rank's gate_up shard, float64 (the checks' bounds)
    down_abs: torch.Tensor  # |deq(W)| of the full down weight, float64


def _build(args, rank: int, world: int, device, copies: int) -> _Layers:
    act = args.activation
    # Every rank draws the same full weights: the same seed and the same generator (the device
    # type's), as a checkpoint would give them.
    torch.manual_seed(0)
    gate = _weights(args.intermediate, args.hidden, device)
    up = _weights(args.intermediate, args.hidden, device)
    down = _weights(args.hidden, args.intermediate, device)
    stacked = [_cat_rows([g, u]) for g, u in zip(gate, up)]  # the unsharded layer's [gate; up]
    tp_gate_up = [_interleave(g, u, world) for g, u in zip(gate, up)]
    del gate, up
    # from_quantized copies the shard out, so each copy has its own weights.
    cols = [ColumnParallelMXFP8Linear.from_quantized(*tp_gate_up, activation=act)
            for _ in range(copies)]
    rows = [RowParallelMXFP8Linear.from_quantized(*down, input_is_parallel=True, activation=act)
            for _ in range(copies)]
    # Every rank holds the unsharded layers for its checks; rank 0 also times copies of them.
    singles = [(MXFP8Linear.from_quantized(*stacked, activation=act),
                MXFP8Linear.from_quantized(*down, activation=act))]
    if rank == 0:
        singles += [(MXFP8Linear.from_quantized(*(t.clone() for t in stacked), activation=act),
                     MXFP8Linear.from_quantized(*(t.clone() for t in down), activation=act))
                    for _ in range(copies - 1)]
    # bf16 holds every MXFP8 value exactly (8 significant bits against e4m3's 4).
    w_gate_up = _dequantize(cols[0].weight, cols[0].weight_scale, torch.bfloat16)
    w_down = _dequantize(rows[0].weight, rows[0].weight_scale, torch.bfloat16)
    bf16 = [(w_gate_up.clone(), w_down.clone()) for _ in range(copies)]
    return _Layers(cols, rows, singles, bf16,
                   _dequantize(cols[0].weight, cols[0].weight_scale, torch.float64).abs(),
                   _dequantize(*down, torch.float64).abs())


# ---------------------------------------------------------------------------- checks


@contextlib.contextmanager
def _batch_invariant(*layers):
    saved = [layer.batch_invariant for layer in layers]
    for layer in layers:
        layer.batch_invariant = True
    try:
        yield
    finally:
        for layer, value in zip(layers, saved):
            layer.batch_invariant = value


def _terms(a: torch.Tensor, w_abs: torch.Tensor, activation: str) -> torch.Tensor:
    """sum_k |p_k| per output, float64: p_k the exact products of the operands the layer
    multiplies, deq(quantize(a)) (W8A8) or a itself (W8A16) against the dequantized weight."""
    operand = (_dequantize(*mxlinear.quantize(a), torch.float64) if activation == "mx"
               else a.double())
    return operand.abs() @ w_abs.T


def _within(y: torch.Tensor, ref: torch.Tensor, terms: torch.Tensor, c: float) -> dict:
    """Whether bf16 outputs y and ref, each element of which the caller has shown to be within
    c_y * terms + ulp/2 of one exact value (c = c_y + c_ref), are close enough, as relative
    Frobenius errors. Elementwise |y - ref| <= c * terms + hu(y) + hu(ref), hu the half ulp of
    bf16 (8 significant bits): hu(v) <= 2^-8 |v| + 2^-134 (the last for subnormals). The triangle
    inequality in the Frobenius norm then bounds ||y - ref|| by c ||terms|| + 2^-8 (||y|| +
    ||ref||) + 2 * 2^-134 sqrt(numel). No underflow term: the random weights and activations
    keep every scale exponent far above -108 (docs/MXFP8.md, "Underflow")."""
    y, ref = y.double(), ref.double()
    norm = torch.linalg.vector_norm
    slack = (c * float(norm(terms)) + 2.0**-8 * (float(norm(y)) + float(norm(ref)))
             + 2 * 2.0**-134 * math.sqrt(ref.numel()))
    diff, size = float(norm(y - ref)), max(float(norm(ref)), 2.0**-134)
    return {"rel_error": diff / size, "tolerance": slack / size,
            "ok": bool(torch.isfinite(y).all()) and diff <= slack}


def _check(layers: _Layers, x: torch.Tensor, activation: str, rank: int, world: int):
    """The rank's checks at one M: a dict of results, and its down layer's input in the timed
    mode (what the row GEMM figure multiplies)."""
    col, row = layers.cols[0], layers.rows[0]
    gate_up, down = layers.singles[0]
    share = row.k_end - row.k_start
    inter, hidden = share * world, x.shape[-1]

    def matching(h):  # rank r's columns of the unsharded [gate | up] output, in its shard's order
        lo, hi = rank * share, (rank + 1) * share
        return torch.cat([h[:, lo:hi], h[:, inter + lo:inter + hi]], dim=1)

    # The row-parallel bound (GPU form, which the CPU one is inside): each element of the TP
    # output within gamma_{K_max + R} * (sum_k |p_k|) + ulp/2 of the exact value, the unsharded
    # one within gamma_{K + 1} * (sum_k |p_k|) + ulp/2 of it; no bias.
    row_c = gamma(share + world) + gamma(inter + 1)
    out = {}
    # Batch-invariant mode: every output's K products are summed in an order K alone fixes
    # (docs/MXFP8.md, "The linear layer"), so the column shard, whose K is the unsharded layer's,
    # must give the same bits even where its smaller N selects another kernel. Then both MLPs feed
    # the down layer the same input, and the row-parallel bound applies to the outputs as is.
    with _batch_invariant(col, row, gate_up, down):
        h, h_full = col(x), gate_up(x)
        out["column_bits_equal"] = {"ok": torch.equal(h, matching(h_full))}
        a_full = _silu_and_mul(h_full)
        out["mlp_vs_single"] = _within(row(_silu_and_mul(h)), down(a_full),
                                       _terms(a_full, layers.down_abs, activation), row_c)
    # The timed mode: the shard's N may select another kernel, so each element of the column
    # output is only within the accumulation bound, as is the unsharded one (K = hidden).
    h, h_full = col(x), gate_up(x)
    out["column_bits_equal_timed_mode"] = torch.equal(h, matching(h_full))  # for information
    out["column_timed_mode"] = _within(h, matching(h_full),
                                       _terms(x, layers.col_abs, activation),
                                       2 * gamma(hidden + 1))
    a = _silu_and_mul(h)
    y = row(a)
    # The row layer against the unsharded down layer on the same input: all ranks' activations.
    parts = [torch.empty_like(a) for _ in range(world)]
    dist.all_gather(parts, a.contiguous())
    a_all = torch.cat(parts, dim=1)
    out["row_timed_mode"] = _within(y, down(a_all), _terms(a_all, layers.down_abs, activation),
                                    row_c)
    # End to end, the shards' own roundings may move the down layer's (W8A8: quantized) input:
    # no bound of the document covers that, so this one is for information.
    y_full = down(_silu_and_mul(h_full))
    out["mlp_vs_single_timed_mode_rel_error"] = float(
        torch.linalg.vector_norm((y - y_full).double())
        / torch.linalg.vector_norm(y_full.double()).clamp_min(2.0**-134))
    return out, a


def _failures(checks: dict) -> list[str]:
    return [name for name, c in checks.items() if isinstance(c, dict) and not c["ok"]]


# ---------------------------------------------------------------------------- timing


def _capture(enqueue) -> torch.cuda.CUDAGraph:
    """enqueue() captured into one CUDA graph after one eager run on a side stream (selection
    caches, allocator blocks, NCCL's lazy set-up), as timing.graph_us_per_call captures. That
    helper replays back to back; a step with a collective needs the ranks lined up before each
    replay, so it is replayed here."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        enqueue()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        enqueue()
    return graph


class _Timer:
    """Median microseconds per call of `calls` calls, timed as the module docstring says."""

    def __init__(self, device: torch.device, backend: str, calls: int, replays: int):
        self.device, self.backend, self.calls, self.replays = device, backend, calls, replays
        self.cuda = device.type == "cuda"
        self.graph_collectives, self.capture_error = False, None
        if self.cuda:
            self.graph_collectives, self.capture_error = self._collectives_capture()
        # A tiny all-reduce right before the start event: it completes on all GPUs at about the
        # same time, so the ranks' timed regions start together whatever each host's delay after
        # the barrier.
        self.start_line = torch.zeros(1, device=device)

    def barrier(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        if self.backend == "nccl":
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()

    def _collectives_capture(self) -> tuple[bool, str | None]:
        """Whether an all-reduce captures into a CUDA graph and replays right, agreed by all ranks
        (one rank capturing while another runs eagerly would deadlock)."""
        error = None if self.backend == "nccl" else f"the backend is {self.backend}, not nccl"
        if error is None:
            t = torch.ones(1, device=self.device)
            try:
                graph = _capture(lambda: dist.all_reduce(t))
                t.fill_(1)
                graph.replay()
                torch.cuda.synchronize()
                if t.item() != dist.get_world_size():
                    error = f"a replayed all_reduce gave {t.item()}"
                del graph
            except Exception as e:  # noqa: BLE001  (any failure means: time eagerly)
                error = f"{type(e).__name__}: {e}"
        ok = torch.tensor([0 if error else 1], device=self.device)
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        if ok.item() == 0 and error is None:
            error = "another rank could not capture it"
        return ok.item() == 1, error

    def local(self, enqueue, here: bool = True) -> float | None:
        """A region without communication, timed on this rank (if `here`)."""
        self.barrier()
        if not here:
            return None
        if self.cuda:
            return timing.median(timing.graph_us_per_call(enqueue, self.calls, self.replays))
        enqueue()  # warm: allocator, thread pools
        per_call = []
        for _ in range(self.replays):
            start = time.perf_counter()
            enqueue()
            per_call.append(1e6 * (time.perf_counter() - start) / self.calls)
        return timing.median(per_call)

    def collective(self, enqueue) -> float:
        """A region with collectives, timed on every rank."""
        if not self.cuda:
            enqueue()
            per_call = []
            for _ in range(self.replays):
                self.barrier()
                start = time.perf_counter()
                enqueue()
                per_call.append(1e6 * (time.perf_counter() - start) / self.calls)
            return timing.median(per_call)
        graph = _capture(enqueue) if self.graph_collectives else None
        run = graph.replay if graph is not None else enqueue
        for _ in range(2):
            run()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        per_call = []
        for _ in range(self.replays):
            self.barrier()
            dist.all_reduce(self.start_line)
            start.record()
            run()
            stop.record()
            stop.synchronize()
            per_call.append(1000.0 * start.elapsed_time(stop) / self.calls)
        del graph
        return timing.median(per_call)


def _cycle(items: list, n: int) -> list[tuple]:
    """n argument tuples, one item each, going round `items` (the weight copies)."""
    return [item if isinstance(item, tuple) else (item,) for item in
            (items[j % len(items)] for j in range(n))]


def _time_m(t: _Timer, layers: _Layers, x: torch.Tensor, a: torch.Tensor, rank: int) -> dict:
    m, hidden = x.shape
    n = t.calls
    ar_bf16 = torch.zeros(m, hidden, dtype=torch.bfloat16, device=x.device)  # stays 0: no overflow
    ar_fp32 = torch.zeros(m, hidden, dtype=torch.float32, device=x.device)
    return {
        "column_gemm_us": t.local(_repeat(lambda c: c(x), _cycle(layers.cols, n))),
        "row_gemm_us": t.local(_repeat(lambda r: r.partial_sum(a), _cycle(layers.rows, n))),
        "allreduce_bf16_us": t.collective(_repeat(dist.all_reduce, [(ar_bf16,)] * n)),
        "allreduce_fp32_us": t.collective(_repeat(dist.all_reduce, [(ar_fp32,)] * n)),
        "tp_mlp_us": t.collective(_repeat(lambda c, r: _tp_step(c, r, x),
                                          _cycle(list(zip(layers.cols, layers.rows)), n))),
        "single_gpu_mlp_us": t.local(_repeat(lambda g, d: _single_step(g, d, x),
                                             _cycle(layers.singles, n)), here=rank == 0),
        "tp_bf16_mlp_us": t.collective(_repeat(lambda g, d: _bf16_step(g, d, x),
                                               _cycle(layers.bf16, n))),
    }


# ---------------------------------------------------------------------------- the run


def _reduce(per_rank: list[dict]) -> dict:
    """Max over the ranks that measured each figure, and each rank's figures."""
    row = {}
    for key, _, _ in FIGURES:
        values = [f[key] for f in per_rank if f[key] is not None]
        row[key] = max(values) if values else None
    row["per_rank"] = {key: [f[key] for f in per_rank] for key, _, _ in FIGURES}
    return row


def render(results: dict) -> str:
    s = results["shapes"]
    lines = [
        f"mxlinear {results['mxlinear']}, tensor parallel over {results['world_size']} ranks "
        f"({results['backend']}, {', '.join(results['device_names'])}), torch {results['torch']}",
        f"MLP hidden {s['hidden']}, intermediate {s['intermediate']} "
        f"({s['intermediate_per_rank']} a rank): gate_up {s['gate_up']['full'][0]}x"
        f"{s['gate_up']['full'][1]} ({s['gate_up']['per_rank'][0]}x{s['gate_up']['per_rank'][1]}"
        f" a rank), down {s['down']['full'][0]}x{s['down']['full'][1]} "
        f"({s['down']['per_rank'][0]}x{s['down']['per_rank'][1]} a rank); activation "
        f"{results['activation']}",
    ]
    rows = []
    for r in results["rows"]:
        if r.get("wrong"):
            rows.append([r["m"]] + ["WRONG"] + ["-"] * (len(FIGURES) + 1))
            continue
        cells = [r["m"]] + [r[key] for key, _, _ in FIGURES]
        tp = r["tp_mlp_us"]
        cells += [r["single_gpu_mlp_us"] / tp, r["tp_bf16_mlp_us"] / tp]
        rows.append(cells)
    tm = results["timing"]
    lines.append(_table(
        f"us per call, median of {results['replays']} replays, max over ranks "
        f"(local regions: {tm['local']}; with collectives: {tm['collective']})",
        ["M"] + [label for _, label, _ in FIGURES] + ["1 GPU / TP", "TP bf16 / TP"], rows))
    lines.append("row: " + results["row_gemm_method"])
    if tm.get("capture_error"):
        lines.append(f"collectives timed eagerly: {tm['capture_error']}")
    return "\n".join(lines) + "\n"


def _run(args) -> int:
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.intermediate % (BLOCK * world):
        if rank == 0:
            print(f"{WHERE}: argument --intermediate: is {args.intermediate}, which {world} ranks "
                  f"cannot split into whole MX blocks ({args.intermediate / world:g} a rank); "
                  f"expected a multiple of {BLOCK * world} ({BLOCK} x the world size {world})",
                  file=sys.stderr)
        return 2
    cuda = args.device == "cuda"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    share = args.intermediate // world
    # One copy per call of a timed region, enough that even the smallest set rotated alone (the
    # row shard) is 3x L2; the larger sets then are too.
    row_shard_bytes = args.hidden * share + args.hidden * share // BLOCK  # e4m3 + scale bytes
    copies = (min(MAX_COPIES, timing.rotation_copies(row_shard_bytes, timing.l2_bytes(device)))
              if cuda else 1)
    calls = max(8, copies) if cuda else 1
    layers = _build(args, rank, world, device, copies)
    timer = _Timer(device, args.backend, calls, args.replays)
    rows = []
    for m in args.m:
        torch.manual_seed(m)  # the same x on every rank
        x = torch.randn(m, args.hidden, device=device, dtype=torch.bfloat16)
        checks, a = _check(layers, x, args.activation, rank, world)
        all_checks = [None] * world
        dist.all_gather_object(all_checks, checks)
        row = {"m": m, "checks": all_checks}
        if any(_failures(c) for c in all_checks):
            row["wrong"] = True  # every rank knows, so every rank skips the same collectives
        else:
            figures = [None] * world
            dist.all_gather_object(figures, _time_m(timer, layers, x, a, rank))
            row.update(_reduce(figures))
        rows.append(row)
        del x, a
        if cuda:
            torch.cuda.empty_cache()
    names = [None] * world
    dist.all_gather_object(names, torch.cuda.get_device_name(device) if cuda else "cpu")
    wrong = [r for r in rows if r.get("wrong")]
    if rank != 0:
        return 1 if wrong else 0
    results = {
        "mxlinear": mxlinear.__version__, "torch": torch.__version__,
        "world_size": world, "backend": args.backend, "device": args.device,
        "device_names": names, "activation": args.activation,
        "batch_invariant_default": mxlinear.default_batch_invariant(),
        "shapes": {"hidden": args.hidden, "intermediate": args.intermediate,
                   "intermediate_per_rank": share,
                   "gate_up": {"full": [2 * args.intermediate, args.hidden],
                               "per_rank": [2 * share, args.hidden]},
                   "down": {"full": [args.hidden, args.intermediate],
                            "per_rank": [args.hidden, share]}},
        "replays": args.replays, "calls_per_region": calls, "weight_copies": copies,
        "l2_bytes": timing.l2_bytes(device) if cuda else None,
        "weights_from_dram": (copies * row_shard_bytes >= 3 * timing.l2_bytes(device)) if cuda
                             else None,
        "timing": {"local": "cuda graph, events" if cuda else "time.perf_counter",
                   "collective": ("cuda graph, events" if timer.graph_collectives else
                                  "eager, events" if cuda else "time.perf_counter"),
                   "capture_error": timer.capture_error},
        "row_gemm_method": ("RowParallelMXFP8Linear.partial_sum: the fp32 partial its forward "
                            "all-reduces, without the bias"),
        "figures": {key: f"{meaning}; us per call" + ("" if key == "single_gpu_mlp_us" else
                                                      ", max over ranks")
                    for key, _, meaning in FIGURES},
        "rows": rows,
    }
    print(render(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
    for r in wrong:
        for rk, c in enumerate(r["checks"]):
            for name in _failures(c):
                print(f"{WHERE}: M={r['m']} rank {rk}: check {name} failed: {c[name]}; not timed",
                      file=sys.stderr)
    return 1 if wrong else 0


def main(argv=None) -> int:
    """Runs the benchmark on the default process group, initialising it (from torchrun's
    environment) when it is not already."""
    args = parse_args(argv)
    problem = _device_problem(args)
    if problem:
        print(f"{WHERE}: {problem}; nothing was measured", file=sys.stderr)
        return 2
    owned = not dist.is_initialized()
    if owned:
        if args.device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(args.backend)
    elif dist.get_backend() != args.backend:
        print(f"{WHERE}: argument --backend: is '{args.backend}' but the process group is "
              f"already initialized with '{dist.get_backend()}'", file=sys.stderr)
        return 2
    try:
        return _run(args)
    finally:
        if owned:
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
