#!/usr/bin/env python3
"""Plots an `mxlinear bench --json` result: per shape and M, GEMM time of mxlinear and of the
anchors measured in the same run (cuBLAS bf16, cuBLASLt FP8 per-tensor) and the Triton
dot_scaled figure of the anchor table (bench/anchors/), as speed relative to cuBLAS bf16 (higher
is faster). Several reports of the same model (say, one per range of M) plot as one.

Usage: plot_bench.py bench.json [more.json ...] out.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SERIES = [("gemm_us", "mxlinear (GEMM only)"), ("linear_us", "mxlinear (with quantization)"),
          ("w8a16_us", "mxlinear W8A16 (x as it is)"),
          ("cublaslt_fp8_tensor_us", "cuBLASLt FP8 per-tensor"),
          ("tri_mx_us", "Triton dot_scaled (anchor table)")]


def main():
    docs = [json.load(open(path)) for path in sys.argv[1:-1]]
    doc = docs[0]
    rows = [r for d in docs for r in d["rows"]]
    shapes = []
    for r in rows:
        key = (r["layer"], r["n"], r["k"])
        if key not in shapes:
            shapes.append(key)
    ms = sorted({r["m"] for r in rows})
    fig, axes = plt.subplots(2, (len(shapes) + 1) // 2, figsize=(4 * ((len(shapes) + 1) // 2), 7),
                             sharey=True)
    for ax, (layer, n, k) in zip(axes.flat, shapes):
        width = 0.8 / len(SERIES)
        for i, (key, label) in enumerate(SERIES):
            ys = []
            for m in ms:
                r = next((r for r in rows if r["layer"] == layer and r["m"] == m), None)
                base = r.get("cublas_bf16_us") if r else None
                ys.append(base / r[key] if r and base and r.get(key) else 0)
            ax.bar([j + i * width for j in range(len(ms))], ys, width, label=label)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_title(f"{layer}\n{n} x {k}", fontsize=9)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(ms))])
        ax.set_xticklabels([str(m) for m in ms], fontsize=8)
        ax.set_xlabel("M")
    axes.flat[0].set_ylabel("speed vs cuBLAS bf16 (same run)")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"mxlinear bench on {doc['gpu']}: higher is faster; 1.0 = cuBLAS bf16", fontsize=11)
    fig.tight_layout()
    fig.savefig(sys.argv[-1], dpi=110)


if __name__ == "__main__":
    main()
