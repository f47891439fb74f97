#!/usr/bin/env python3
"""Turns an `mxlinear bench --json` result into tuned-table rows (docs/TUNED_TABLES.md).

Each (N, K, M) the bench timed becomes the row of M's bucket naming the fastest kernel/config
(from the `--all-configs` sweep where present, else the one that ran), its microseconds, and its
error ratio against the bench's correctness guard (4e-3 relative Frobenius error for bf16
output). Configs are ranked by the full linear from bf16 (`configs_linear`: quantization
included, or skipped by the configs that quantize the activation themselves) where the sweep
timed it, else by the GEMM alone. Usage: tuned_rows_from_bench.py bench.json arch sms > rows.csv
"""
import json
import sys

GUARD = 4e-3


def main():
    path, arch, sms = sys.argv[1], sys.argv[2], int(sys.argv[3])
    doc = json.load(open(path))
    print("arch,sms,n,k,m,kernel,config,us,error_ratio,mxlinear_version,cuda_version")
    for row in doc["rows"]:
        if row.get("check") != "ok" or "gemm_us" not in row:
            continue
        m = row["m"]
        bucket = 1 << (m - 1).bit_length()
        by_linear = bool(row.get("configs_linear"))
        name, us = row["kernel"], row["linear_us" if by_linear else "gemm_us"]
        error = row["check_rel_error"]
        config_errors = row.get("configs_check_rel_error", {})
        candidates = row["configs_linear"] if by_linear else row.get("configs", {})
        for candidate, t in candidates.items():
            if t < us:
                name, us = candidate, t
                # older reports keep only the dispatched config's error
                error = config_errors.get(candidate, row["check_rel_error"])
        kernel, config = name.split("/")
        versions = doc.get("versions", {})
        library = ".".join(versions.get("mxlinear", "0.1.0").split(".")[:2])
        cuda = versions.get("cuda_runtime", "13.0")
        print(f"{arch},{sms},{row['n']},{row['k']},{bucket},{kernel},{config},"
              f"{us:.2f},{error / GUARD:.3f},{library},{cuda}")


if __name__ == "__main__":
    main()
