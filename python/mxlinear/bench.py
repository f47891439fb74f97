"""``python -m mxlinear.bench``: what the PyTorch op costs on a Hopper GPU.

1. Host overhead: median host time per eager call of ``torch.ops.mxlinear.linear`` against the
   bare C++ ``mxlinear::linear`` call on the same tensors (the internal op
   ``torch.ops.mxlinear._library_call_seconds``), at small shapes where the GPU keeps up.
2. GPU time of the op (bf16 in, quantization included in W8A8) against
   ``torch.nn.functional.linear`` in bf16 on the dequantized weights, per layer shape and M:
   weights rotate through copies worth at least 3x L2, one call per copy is captured into a CUDA
   graph, replays are timed by events.
3. Under a CUDA graph the op adds nothing over the C++ call: R calls of the op in one graph against
   R calls of the library loop in another, time per call of each.

Each figure is taken in each activation mode of --activation: mx (W8A8, the activation
MX-quantized first) and bf16 (W8A16, the bf16 activation multiplied as it is by the dequantized
weights).

Needs a Hopper GPU (sm_90); without one it says so and exits with status 2.
"""

import argparse
import functools
import json
import math
import sys

import torch

from . import _bench_timing as timing

# The distinct layer shapes of the C++ bench's builtin:minimax-m3.1-flash-tp4 table
# (src/host/models.cpp): name, N, K.
DEFAULT_SHAPES = (
    ("self_attn.qkv_proj", 2560, 6144),
    ("self_attn.o_proj", 6144, 2048),
    ("shared_experts.gate_up_proj", 1536, 6144),
    ("shared_experts.down_proj", 6144, 768),
    ("dense_mlp.gate_up_proj", 6144, 6144),
    ("dense_mlp.down_proj", 6144, 3072),
    ("draft.qkv_proj", 2304, 6144),
    ("draft.fused_ctx_kv_proj", 1280, 6144),
)
DEFAULT_M = (1, 32, 128, 512, 2048, 8192)
PARTS = ("host", "gpu", "graph")
# The activation modes, as mxlinear.linear names them; the op takes a mode's index.
ACTIVATIONS = ("mx", "bf16")
# The C++ bench's correctness guard for a bf16 output: relative Frobenius error against the
# float64 product of the dequantized operands.
GUARD_REL_ERROR = 4e-3
LIBRARY_OP = "_library_call_seconds"


def _shape(text: str) -> tuple[int, int]:
    n_text, sep, k_text = text.strip().lower().partition("x")
    try:
        n, k = int(n_text), int(k_text)
    except ValueError:
        n = k = 0
    if not sep or n < 1 or k < 32 or k % 32:
        raise argparse.ArgumentTypeError(
            f"has '{text}'; expected NxK with N >= 1 and K a positive multiple of 32")
    return n, k


def parse_shapes(text: str) -> list[tuple[str, int, int]]:
    shapes = [_shape(part) for part in text.split(",")]
    return [(f"{n}x{k}", n, k) for n, k in shapes]


def parse_ms(text: str) -> list[int]:
    ms = []
    for part in text.split(","):
        try:
            m = int(part)
        except ValueError:
            m = 0
        if m < 1:
            raise argparse.ArgumentTypeError(
                f"has '{part}'; expected positive integers separated by commas")
        ms.append(m)
    return ms


def parse_parts(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",")]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        raise argparse.ArgumentTypeError(f"has {bad}; expected some of {', '.join(PARTS)}")
    return parts


def parse_activations(text: str) -> list[str]:
    modes = [a.strip() for a in text.split(",")]
    bad = [a for a in modes if a not in ACTIVATIONS]
    if bad:
        raise argparse.ArgumentTypeError(f"has {bad}; expected some of {', '.join(ACTIVATIONS)}")
    return list(dict.fromkeys(modes))


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"is '{text}'; expected a positive integer")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m mxlinear.bench", description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", type=parse_parts, default=list(PARTS),
                   help="which measurements, of host,gpu,graph (default: all)")
    p.add_argument("--activation", type=parse_activations, default=list(ACTIVATIONS),
                   help="activation modes, of mx,bf16: mx (W8A8) quantizes the activation to "
                        "MXFP8 first, bf16 (W8A16) multiplies it as it is (default: both)")
    p.add_argument("--shapes", type=parse_shapes, default=None,
                   help="layer shapes NxK,... for the gpu and graph parts (default: the C++ "
                        "bench's builtin:minimax-m3.1-flash-tp4 shapes)")
    p.add_argument("--m", type=parse_ms, default=list(DEFAULT_M),
                   help="token counts M for the gpu part (default: 1,32,128,512,2048,8192)")
    p.add_argument("--host-shape", type=_shape, default=(1024, 1024),
                   help="NxK of the host-overhead part (default: 1024x1024)")
    p.add_argument("--host-m", type=parse_ms, default=[1, 16, 128],
                   help="M of the host-overhead part (default: 1,16,128)")
    p.add_argument("--host-iters", type=_positive, default=100,
                   help="back-to-back calls per host trial, few enough that the launch queue "
                        "never fills (default: 100)")
    p.add_argument("--host-trials", type=_positive, default=51,
                   help="host trials; the figure is their median (default: 51)")
    p.add_argument("--graph-m", type=parse_ms, default=[1, 128, 2048],
                   help="M of the graph part (default: 1,128,2048)")
    p.add_argument("--graph-calls", type=_positive, default=64,
                   help="calls R captured in each graph of the graph part (default: 64)")
    p.add_argument("--replays", type=_positive, default=10,
                   help="timed replays per graph; the figure is their median (default: 10)")
    p.add_argument("--json", metavar="FILE", default=None, help="also write the results here")
    args = p.parse_args(argv)
    if args.shapes is None:
        args.shapes = list(DEFAULT_SHAPES)
    return args


def _dequantize(data: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    n, k = data.shape
    s = torch.ldexp(torch.ones(scales.shape, dtype=torch.float64, device=scales.device),
                    scales.view(torch.uint8).to(torch.int64) - 127)
    w = data.to(torch.float64).reshape(n, k // 32, 32) * s[..., None]
    return w.reshape(n, k).to(dtype)


def _weights(n: int, k: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    # Fresh random weights of a typical magnitude; their values do not change the timing.
    return torch.ops.mxlinear.quantize(torch.randn(n, k, device=device) * 0.02, "rceil")


def _repeat(fn, calls: list[tuple]):
    """A function that queues fn(*args) for each args of `calls`, in order."""

    def enqueue():
        for args in calls:
            fn(*args)

    return enqueue


def _library_loop():
    """The bare C++ call loop, or None where this build lacks it."""
    return getattr(torch.ops.mxlinear, LIBRARY_OP, None)


def host_overhead(args, device, library) -> dict:
    n, k = args.host_shape
    op = torch.ops.mxlinear.linear.default
    rows = []
    for activation in args.activation:
        mode = ACTIVATIONS.index(activation)
        for m in args.host_m:
            x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
            w, s = _weights(n, k, device)
            out = torch.empty(m, n, device=device, dtype=torch.bfloat16)
            issue = functools.partial(op, x, w, s, None, None, mode)
            timing.host_seconds_per_call(issue, 10)  # warm: selection, allocator blocks
            library(x, w, s, out, 10, mode)
            op_s, lib_s = [], []
            for _ in range(args.host_trials):  # interleaved, so drift hits both alike
                op_s.append(timing.host_seconds_per_call(issue, args.host_iters))
                torch.cuda.synchronize()
                lib_s.append(float(library(x, w, s, out, args.host_iters, mode)))
                torch.cuda.synchronize()
            op_us, lib_us = 1e6 * timing.median(op_s), 1e6 * timing.median(lib_s)
            rows.append({"activation": activation, "m": m, "n": n, "k": k, "op_us": op_us,
                         "library_us": lib_us, "overhead_us": op_us - lib_us,
                         "op_min_us": 1e6 * min(op_s), "library_min_us": 1e6 * min(lib_s)})
    return {"iters": args.host_iters, "trials": args.host_trials, "rows": rows}


def _guard(x, w, s, y, activation: str) -> float:
    """Relative Frobenius error of the op's output against float64 on the operands the mode
    multiplies: the dequantized MX activation (mx) or x itself (bf16), and the dequantized
    weights."""
    if activation == "mx":
        xq, xs = torch.ops.mxlinear.quantize(x, "rceil")
        a = _dequantize(xq, xs, torch.float64)
    else:
        a = x.to(torch.float64)
    ref = a @ _dequantize(w, s, torch.float64).T
    return float(torch.linalg.norm(y.double() - ref) / torch.linalg.norm(ref).clamp_min(1e-300))


def gpu_time(args, device) -> dict:
    op = torch.ops.mxlinear.linear.default
    l2 = timing.l2_bytes(device)
    rows = []
    for name, n, k in args.shapes:
        w, s = _weights(n, k, device)
        w_bf16 = _dequantize(w, s, torch.bfloat16)
        fp8_copies = timing.rotation_copies(n * k + n * k // 32, l2)
        bf16_copies = timing.rotation_copies(2 * n * k, l2)
        fp8 = [(w.clone(), s.clone()) for _ in range(fp8_copies)]
        bf16 = [w_bf16.clone() for _ in range(bf16_copies)]
        for m in args.m:
            x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
            ref = None  # the anchor's times, taken once for all modes
            for activation in args.activation:
                mode = ACTIVATIONS.index(activation)
                error = _guard(x, w, s, op(x, w, s, None, None, mode), activation)
                row = {"name": name, "activation": activation, "n": n, "k": k, "m": m,
                       "guard_rel_error": error}
                if not error <= GUARD_REL_ERROR:  # NaN fails too
                    row["wrong"] = True
                    rows.append(row)
                    continue
                # One call per weight copy, at least 8.
                mx_calls = [(x, *fp8[i % fp8_copies], None, None, mode)
                            for i in range(max(8, fp8_copies))]
                mx = timing.graph_us_per_call(_repeat(op, mx_calls), len(mx_calls), args.replays)
                if ref is None:
                    bf16_calls = [(x, bf16[i % bf16_copies]) for i in range(max(8, bf16_copies))]
                    ref = timing.graph_us_per_call(_repeat(torch.nn.functional.linear, bf16_calls),
                                                   len(bf16_calls), args.replays)
                row.update({"mxlinear_us": timing.median(mx),
                            "bf16_linear_us": timing.median(ref),
                            "mxlinear_spread": (max(mx) - min(mx)) / timing.median(mx),
                            "bf16_linear_spread": (max(ref) - min(ref)) / timing.median(ref)})
                # Anchor time over mxlinear's, as the C++ bench reports it: above 1, mxlinear is
                # faster.
                row["speedup"] = row["bf16_linear_us"] / row["mxlinear_us"]
                rows.append(row)
        del fp8, bf16
        torch.cuda.empty_cache()
    # Per activation mode, then per M.
    geomeans = {}
    for activation in args.activation:
        per_m = geomeans[activation] = {}
        for m in args.m:
            ratios = [r["speedup"] for r in rows
                      if r["m"] == m and r["activation"] == activation and "speedup" in r]
            per_m[str(m)] = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
    return {"l2_bytes": l2, "replays": args.replays, "rows": rows, "geomean_speedup": geomeans}


def graph_overhead(args, device, library) -> dict:
    op = torch.ops.mxlinear.linear.default
    calls = args.graph_calls
    rows = []
    for name, n, k in args.shapes:
        w, s = _weights(n, k, device)
        for m in args.graph_m:
            x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
            out = torch.empty(m, n, device=device, dtype=torch.bfloat16)
            for activation in args.activation:
                mode = ACTIVATIONS.index(activation)
                op_us = timing.graph_us_per_call(
                    _repeat(op, [(x, w, s, None, None, mode)] * calls), calls, args.replays)
                # The library loop queues the same `calls` launches from inside one op call.
                lib_us = timing.graph_us_per_call(
                    functools.partial(library, x, w, s, out, calls, mode), calls, args.replays)
                rows.append({"name": name, "activation": activation, "n": n, "k": k, "m": m,
                             "op_us": timing.median(op_us), "library_us": timing.median(lib_us),
                             "ratio": timing.median(op_us) / timing.median(lib_us)})
        torch.cuda.empty_cache()
    return {"calls_per_graph": calls, "replays": args.replays, "rows": rows}


def _table(title: str, header: list[str], rows: list[list]) -> str:
    cells = [header] + [[c if isinstance(c, str) else f"{c:.3f}" if isinstance(c, float)
                         else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [title, "  ".join(h.rjust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells[1:]]
    return "\n".join(lines) + "\n"


def render(results: dict) -> str:
    out = [f"mxlinear {results['mxlinear']} on {results['device']} (torch {results['torch']})\n"]
    for part, skipped in results.get("skipped", {}).items():
        out.append(f"{part}: left out ({skipped})\n")
    if "host" in results:
        h = results["host"]
        out.append(_table(
            f"Host time per eager call, median of {h['trials']} trials of {h['iters']} calls (us)",
            ["act", "M", "N", "K", "op", "C++ call", "op - C++"],
            [[r["activation"], r["m"], r["n"], r["k"], r["op_us"], r["library_us"],
              r["overhead_us"]] for r in h["rows"]]))
    if "gpu" in results:
        g = results["gpu"]
        out.append(_table(
            "GPU time per call, weights from DRAM, CUDA graph, median of "
            f"{g['replays']} replays (us)",
            ["layer", "act", "N", "K", "M", "mxlinear", "bf16 F.linear", "x bf16"],
            [[r["name"], r["activation"], r["n"], r["k"], r["m"], r.get("mxlinear_us", "WRONG"),
              r.get("bf16_linear_us", "-"), r.get("speedup", "-")] for r in g["rows"]]))
        for activation, per_m in g["geomean_speedup"].items():
            out.append(
                f"geomean bf16 time / mxlinear time per M, activation {activation} (above 1: "
                "mxlinear faster): "
                + ", ".join(f"M={m}: {v:.3f}" if v else f"M={m}: n/a" for m, v in per_m.items())
                + "\n")
    if "graph" in results:
        g = results["graph"]
        out.append(_table(
            f"Under a CUDA graph ({g['calls_per_graph']} calls a graph), time per call (us)",
            ["layer", "act", "N", "K", "M", "op", "C++ call", "op / C++"],
            [[r["name"], r["activation"], r["n"], r["k"], r["m"], r["op_us"], r["library_us"],
              r["ratio"]] for r in g["rows"]]))
    return "\n".join(out)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("mxlinear.bench: no CUDA device: the benchmark times the GPU kernels and needs a "
              "Hopper GPU (sm_90); nothing was measured", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device())
    major, minor = torch.cuda.get_device_capability(device)
    name = torch.cuda.get_device_name(device)
    if (major, minor) != (9, 0):
        print(f"mxlinear.bench: the CUDA device is {name} (sm_{major}{minor}); expected a Hopper "
              "GPU (sm_90); nothing was measured", file=sys.stderr)
        return 2
    import mxlinear

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    results = {"mxlinear": mxlinear.__version__, "torch": torch.__version__, "device": name,
               "skipped": {}}
    library = _library_loop()
    for part in args.parts:
        if part in ("host", "graph") and library is None:
            why = (f"torch.ops.mxlinear.{LIBRARY_OP} is not in this build of mxlinear; this "
                   "part compares the op with that bare C++ call loop")
            print(f"mxlinear.bench: {part}: {why}", file=sys.stderr)
            results["skipped"][part] = why
        elif part == "host":
            results["host"] = host_overhead(args, device, library)
        elif part == "gpu":
            results["gpu"] = gpu_time(args, device)
        else:
            results["graph"] = graph_overhead(args, device, library)
    print(render(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
    wrong = [r for r in results.get("gpu", {}).get("rows", []) if r.get("wrong")]
    for r in wrong:
        print(f"mxlinear.bench: {r['name']} M={r['m']} activation {r['activation']}: WRONG, "
              f"relative error {r['guard_rel_error']:.3g} > {GUARD_REL_ERROR}; not timed",
              file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
