#!/usr/bin/env python3
"""Turns an `mxlinear bench --json` result into tuned-table rows (docs/TUNED_TABLES.md).

Each (N, K, M) the bench timed becomes, for each activation mode, the row of M's bucket naming
the fastest kernel/config of that mode (from the `--all-configs` sweep where present, else the
one that ran), its microseconds, and its error ratio against the bench's correctness guard
(4e-3 relative Frobenius error for bf16 output). W8A8 configs are ranked by the full linear from
bf16 (`configs_linear`: quantization included, or skipped by the configs that quantize the
activation themselves) where the sweep timed it, else by the GEMM alone; W8A16 configs (the
`*_a16` kernels) by the full linear. A row naming a W8A16 kernel serves W8A16 calls only.
Usage: tuned_rows_from_bench.py bench.json arch sms > rows.csv
"""
import json
import sys

GUARD = 4e-3


def is_w8a16(name):
    """Whether kernel/config `name` is a W8A16 kernel's (they are named *_a16)."""
    return name.split("/")[0].endswith("_a16")


def fastest(row, w8a16):
    """(kernel/config, us, error) of the mode's fastest config in a bench row, or None."""
    config_errors = row.get("configs_check_rel_error", {})
    if w8a16:
        if row.get("check_w8a16") != "ok" or "w8a16_us" not in row:
            return None
        name, us, error = row["kernel_w8a16"], row["w8a16_us"], row["check_w8a16_rel_error"]
        candidates = row.get("configs_linear", {})
    else:
        if row.get("check") != "ok" or "gemm_us" not in row:
            return None
        by_linear = bool(row.get("configs_linear"))
        name, us = row["kernel"], row["linear_us" if by_linear else "gemm_us"]
        error = row["check_rel_error"]
        candidates = row["configs_linear"] if by_linear else row.get("configs", {})
    for candidate, t in candidates.items():
        if is_w8a16(candidate) == w8a16 and t < us:
            name, us = candidate, t
            # older reports keep only the dispatched config's error
            error = config_errors.get(candidate, error)
    return name, us, error


def main():
    path, arch, sms = sys.argv[1], sys.argv[2], int(sys.argv[3])
    doc = json.load(open(path))
    versions = doc.get("versions", {})
    library = ".".join(versions.get("mxlinear", "0.1.0").split(".")[:2])
    cuda = versions.get("cuda_runtime", "13.0")
    print("arch,sms,n,k,m,kernel,config,us,error_ratio,mxlinear_version,cuda_version")
    for row in doc["rows"]:
        bucket = 1 << (row["m"] - 1).bit_length()
        for w8a16 in (False, True):
            best = fastest(row, w8a16)
            if best is None:
                continue
            name, us, error = best
            kernel, config = name.split("/")
            print(f"{arch},{sms},{row['n']},{row['k']},{bucket},{kernel},{config},"
                  f"{us:.2f},{error / GUARD:.3f},{library},{cuda}")


if __name__ == "__main__":
    main()
