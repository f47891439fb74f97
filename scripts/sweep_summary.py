#!/usr/bin/env python3
"""Summarises an `mxlinear bench --all-configs` JSON per kernel: for each figure the fastest
config of each kernel that passed the check, its ratios against the anchors measured in the
same run (above 1: ours is faster), geometric means per M over the distinct shapes, every config
that failed the correctness check, (a sweep run with --batch-invariant) the batch-invariant
mode's choice against the fastest config that keeps the K order, and the cost model's estimates
against the configs' times. Usage: sweep_summary.py bench.json [kernel ...]
"""
import json
import math
import sys


def is_w8a16(key):
    """Whether a "kernel/config" key is a W8A16 kernel's: those are named *_a16 and serve only
    W8A16 calls."""
    return key.split("/")[0].endswith("_a16")


def anchor_us(row, key):
    """An anchor's time in `row`, or nan where the anchors failed (anchor_error: no times)."""
    value = row.get(key)
    return float("nan") if value is None else value


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main():
    doc = json.load(open(sys.argv[1]))
    kernels = sys.argv[2:] or sorted(
        {name.split("/")[0] for row in doc["rows"] for name in row.get("configs", {})})
    print(f"# Config sweep: {doc.get('gpu')} ({doc.get('sms')} SMs)\n")
    ceilings = doc.get("ceilings", {})
    print(f"Ceilings: read {ceilings.get('read_tb_s', float('nan')):.2f} TB/s, "
          f"cuBLAS bf16 {ceilings.get('bf16_tflop_s', float('nan')):.0f} TFLOP/s, "
          f"cuBLASLt FP8 {ceilings.get('fp8_tflop_s', float('nan')):.0f} TFLOP/s.\n")
    header = "| layer | N x K | M | cuBLAS bf16 | cuBLASLt FP8 | tri_mx |"
    rule = "|---|---|---|---|---|---|"
    for k in kernels:
        header += f" {k} best (us) | {k} config |"
        rule += "---|---|"
    print(header + " x bf16 | x FP8 | x tri_mx |")
    print(rule + "---|---|---|")
    ratios = {}
    for row in doc["rows"]:
        configs = row.get("configs", {})
        cells = ""
        best_us = float("inf")
        for k in kernels:
            mine = {c: t for c, t in configs.items() if c.startswith(k + "/")}
            if mine:
                name, t = min(mine.items(), key=lambda item: item[1])
                waves = row.get("configs_waves", {}).get(name, 1)
                note = f" ({waves} waves)" if waves > 1 else ""
                cells += f" {t:.2f} | {name.split('/', 1)[1]}{note} |"
                best_us = min(best_us, t)
            else:
                cells += " - | - |"
        if best_us == float("inf"):
            continue  # none of these kernels runs this figure
        # A row whose anchors failed (anchor_error) lacks their times: nan, left out of geomeans.
        bf16, fp8 = (anchor_us(row, key) for key in ("cublas_bf16_us", "cublaslt_fp8_tensor_us"))
        tri = anchor_us(row, "tri_mx_us")
        r = (bf16 / best_us, fp8 / best_us, tri / best_us)
        key = (row["m"], row["n"], row["k"])
        ratios.setdefault(row["m"], {})[key] = r
        print(f"| {row['layer']} | {row['n']}x{row['k']} | {row['m']} | {bf16:.2f} | {fp8:.2f} | "
              f"{tri:.1f} |{cells} {r[0]:.2f} | {r[1]:.2f} | {r[2]:.2f} |")
    print("\nGeometric mean over the distinct shapes of anchor time / fastest config time:\n")
    print("| M | x cuBLAS bf16 | x cuBLASLt FP8 | x tri_mx |\n|---|---|---|---|")
    for m, by_shape in sorted(ratios.items()):
        cols = [geomean([r[i] for r in by_shape.values() if not math.isnan(r[i])]) for i in range(3)]
        print(f"| {m} | {cols[0]:.2f} | {cols[1]:.2f} | {cols[2]:.2f} |")
    # Per activation mode (is_w8a16).
    for mode, w8a16 in (("W8A8", False), ("W8A16", True)):
        linear = {}
        for row in doc["rows"]:
            mine = [t for c, t in row.get("configs_linear", {}).items()
                    if is_w8a16(c) == w8a16]
            if mine:
                best = min(mine)
                linear.setdefault(row["m"], []).append(
                    (anchor_us(row, "cublas_bf16_us") / best,
                     anchor_us(row, "cublaslt_fp8_tensor_us") / best))
        if linear:
            print(f"\n{mode}: the same with each config timed as the full linear from bf16 "
                  "(configs_linear: activation quantization included, or done by the config "
                  "itself, or none in W8A16), against the same GEMM-only anchors:\n")
            print("| M | x cuBLAS bf16 | x cuBLASLt FP8 |\n|---|---|---|")
            for m, pairs in sorted(linear.items()):
                cols = [geomean([p[i] for p in pairs if not math.isnan(p[i])]) for i in range(2)]
                print(f"| {m} | {cols[0]:.2f} | {cols[1]:.2f} |")
    streamed = [row for row in doc["rows"] if row.get("weight_stream_us") and row.get("configs")
                and row["m"] <= 8]
    if streamed:
        print("\nAt M <= 8, the fastest config against a plain kernel that only reads the same "
              "weight bytes, launched the same way (weight_stream_us: what launch gaps, the DRAM "
              "ramp and the tail leave):\n")
        print("weight_tiles_us reads the same bytes in the decode kernel's pattern (64-row tiles, "
              "8 K ranges, 128-byte pieces a row apart).\n")
        print("| layer | M | fastest (us) | only reading (us) | ratio | reading in tiles (us) |\n"
              "|---|---|---|---|---|---|")
        for row in streamed:
            best = min(row["configs"].values())
            tiles = row.get("weight_tiles_us", float("nan"))
            print(f"| {row['layer']} | {row['m']} | {best:.2f} | {row['weight_stream_us']:.2f} | "
                  f"{best / row['weight_stream_us']:.2f} | {tiles:.2f} |")
    prepassed = [row for row in doc["rows"] if row.get("prefill_prepass_us") and
                 any(c.startswith("prefill/") for c in row.get("configs", {}))]
    if prepassed:
        print("\nThe prefill kernel's activation pre-pass alone (prefill_prepass_us: e4m3 and "
              "scales in, bf16 out), against the fastest prefill config, whose time includes it; "
              "TB/s counts the bytes read and written:\n")
        print("| layer | M | pre-pass (us) | fastest prefill (us) | share | TB/s |\n"
              "|---|---|---|---|---|---|")
        for row in prepassed:
            best = min(t for c, t in row["configs"].items() if c.startswith("prefill/"))
            us = row["prefill_prepass_us"]
            moved = row["m"] * row["k"] * (1 + 1 / 32 + 2)
            print(f"| {row['layer']} | {row['m']} | {us:.2f} | {best:.2f} | {us / best:.2f} | "
                  f"{moved / us / 1e6:.2f} |")
    invariant_choices(doc["rows"])
    model_against_sweep(doc["rows"])
    waves = [w for row in doc["rows"] for w in row.get("configs_waves", {}).values()]
    if waves:
        many = sum(1 for w in waves if w > 1)
        print(f"\n{many} of the {len(waves)} timed configs whose kernel says (configs_waves) "
              "launched more CTAs than the device holds at once (more than one wave).")
    for field, what in (("configs_wrong", "the correctness check (never timed)"),
                        ("configs_linear_wrong", "the check as a full linear (never timed so)")):
        wrong = [(row["layer"], row["m"], row[field]) for row in doc["rows"] if row.get(field)]
        if wrong:
            print(f"\nConfigs that FAILED {what}:\n")
            for layer, m, configs in wrong:
                print(f"- {layer} M = {m}: " +
                      ", ".join(f"{c} (rel. error {e:.3g})" for c, e in configs.items()))


def ratio_summary(columns, ratios):
    """A table of `ratios` ({(column values...): [choice time / fastest time per shape]}): per key
    the geometric mean over the shapes and the worst."""
    print(f"\n| {' | '.join(columns)} | x fastest, geomean over the shapes | worst |")
    print("|" + "---|" * (len(columns) + 2))
    for key, values in sorted(ratios.items()):
        print(f"| {' | '.join(str(v) for v in key)} | {geomean(values):.3f} | {max(values):.2f} |")


def invariant_choices(rows):
    """Per figure and activation mode, the batch-invariant mode's kernel/config against the fastest
    timed config that keeps the K order (configs_keep_k_order), both as full linears from bf16 in
    the sweep (configs_linear): how much the mode's choice leaves on the table."""
    table, ratios = [], {}
    for row in rows:
        keep = row.get("configs_keep_k_order")
        if not keep:
            continue
        linear = row.get("configs_linear", {})
        for mode, w8a16, field in (("W8A8", False, "kernel_invariant"),
                                   ("W8A16", True, "kernel_invariant_w8a16")):
            timed = {c: linear[c] for c in keep if c in linear and is_w8a16(c) == w8a16}
            chosen = row.get(field)
            if not timed or chosen not in timed:
                continue
            fastest = min(timed, key=timed.get)
            ratio = timed[chosen] / timed[fastest]
            ratios.setdefault((mode, row["m"]), []).append(ratio)
            table.append(f"| {row['layer']} | {row['n']}x{row['k']} | {row['m']} | {mode} | "
                         f"{chosen} | {timed[chosen]:.2f} | {fastest} | {timed[fastest]:.2f} | "
                         f"{ratio:.2f} |")
    if not table:
        return
    print("\nThe batch-invariant mode's choice against the fastest config that keeps the K order, "
          "both timed as the full linear from bf16 in this sweep (x fastest: above 1, the choice "
          "is slower):\n")
    print("| layer | N x K | M | mode | chosen | us | fastest | us | x fastest |\n"
          "|---|---|---|---|---|---|---|---|---|")
    print("\n".join(table))
    ratio_summary(("mode", "M"), ratios)


def model_against_sweep(rows):
    """The cost model's estimate of each timed full linear (configs_estimated_us) against its time
    (configs_linear): per figure and activation mode, the config the model rates fastest among
    the timed ones against the fastest of them, over every timed config and (a --batch-invariant
    sweep) over those that keep the K order; then estimate / time per config, geomean over the
    figures, from the most underpriced up."""
    picks, ratios, priced = [], {}, {}
    for row in rows:
        estimated = row.get("configs_estimated_us")
        if not estimated:
            continue
        linear = row.get("configs_linear", {})
        keep = set(row.get("configs_keep_k_order", []))
        for key, us in estimated.items():
            if key in linear:
                priced.setdefault(key, []).append(us / linear[key])
        for mode, w8a16 in (("W8A8", False), ("W8A16", True)):
            for scope in ("all", "K order") if keep else ("all",):
                timed = {c: linear[c] for c in estimated if c in linear and is_w8a16(c) == w8a16
                         and (scope == "all" or c in keep)}
                if not timed:
                    continue
                pick = min(timed, key=estimated.get)
                fastest = min(timed, key=timed.get)
                ratio = timed[pick] / timed[fastest]
                ratios.setdefault((scope, mode, row["m"]), []).append(ratio)
                if pick != fastest:
                    picks.append(f"| {row['layer']} | {row['n']}x{row['k']} | {row['m']} | {mode} | "
                                 f"{scope} | {pick} | {timed[pick]:.2f} ({estimated[pick]:.2f}) | "
                                 f"{fastest} | {timed[fastest]:.2f} ({estimated[fastest]:.2f}) | "
                                 f"{ratio:.2f} |")
    if not priced:
        return
    print("\nThe cost model against the sweep: per figure, activation mode and set of timed "
          "configs (all, or those that keep the K order), the config the model rates fastest "
          "against the fastest measured, as full linears from bf16: time (estimate) in us; "
          "figures where the two are the same config are left out:\n")
    print("| layer | N x K | M | mode | configs | model's pick | us (est.) | fastest | us (est.) | "
          "x fastest |\n|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(picks))
    ratio_summary(("configs", "mode", "M"), ratios)
    print("\nEstimate / time per config, geomean over the figures that timed it (below 1: the "
          "model prices it cheaper than it runs):\n")
    print("| config | estimate / time | lowest | highest | figures |\n|---|---|---|---|---|")
    for key, values in sorted(priced.items(), key=lambda item: geomean(item[1])):
        print(f"| {key} | {geomean(values):.2f} | {min(values):.2f} | {max(values):.2f} | "
              f"{len(values)} |")


if __name__ == "__main__":
    main()
