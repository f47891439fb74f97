#!/usr/bin/env python3
"""Compares two `mxlinear bench` JSON reports timed in one device call (a change against its
base: `scripts/device-check.sh ... ab` or `variant`): per M the geometric mean over the shapes
of change / base for the GEMM alone, the full linear and the prefill pre-pass (below 1: the
change is faster), then each figure's GEMM times. Figures in only one report, or whose check
failed, are listed, never averaged. Usage: ab_summary.py CHANGE.json BASE.json
"""
import json
import math
import sys

COLUMNS = (("gemm_us", "GEMM alone"), ("linear_us", "linear"), ("prefill_prepass_us", "pre-pass"))


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def figures(path):
    doc = json.load(open(path))
    return {(row["layer"], row["m"]): row for row in doc.get("rows", [])}


def usable(value):
    return isinstance(value, (int, float)) and value > 0 and math.isfinite(value)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    change_path, base_path = sys.argv[1], sys.argv[2]
    change, base = figures(change_path), figures(base_path)
    both = [key for key in change if key in base]
    print(f"# {change_path} against {base_path} (change / base: below 1, the change is faster)\n")
    print("| M | " + " | ".join(label for _, label in COLUMNS) + " | figures |")
    print("|---|" + "---|" * (len(COLUMNS) + 1))
    ok = [key for key in both if change[key].get("check") == "ok" and base[key].get("check") == "ok"]
    for m in sorted({key[1] for key in ok}):
        cells = []
        for column, _ in COLUMNS:
            ratios = [change[key][column] / base[key][column] for key in ok if key[1] == m
                      and usable(change[key].get(column)) and usable(base[key].get(column))]
            cells.append(f"{geomean(ratios):.3f}" if ratios else "-")
        print(f"| {m} | " + " | ".join(cells) + f" | {sum(1 for key in ok if key[1] == m)} |")
    print("\n| layer | M | GEMM change us | GEMM base us | change / base | kernel |")
    print("|---|---|---|---|---|---|")
    for key in ok:
        a, b = change[key].get("gemm_us"), base[key].get("gemm_us")
        if not (usable(a) and usable(b)):
            continue
        kernel = change[key].get("kernel", "?")
        if base[key].get("kernel") != kernel:
            kernel += f" (base: {base[key].get('kernel', '?')})"
        print(f"| {key[0]} | {key[1]} | {a:.2f} | {b:.2f} | {a / b:.3f} | {kernel} |")
    failed = [key for key in both if key not in ok]
    alone = [(key, change_path) for key in change if key not in base] + \
            [(key, base_path) for key in base if key not in change]
    if failed:
        print("\nCheck failed (not compared): " +
              ", ".join(f"{layer} M = {m}" for layer, m in failed))
    if alone:
        print("\nIn one report only: " +
              ", ".join(f"{layer} M = {m} ({path})" for (layer, m), path in alone))


if __name__ == "__main__":
    main()
