#!/usr/bin/env python3
"""Turns an `mxlinear bench --json` result into tuned-table rows (docs/TUNED_TABLES.md).

Each (N, K, M) the bench timed becomes the row of M's bucket naming the kernel/config that ran,
its GEMM microseconds, and its error ratio against the bench's correctness guard (4e-3 relative
Frobenius error for bf16 output). Usage: tuned_rows_from_bench.py bench.json arch sms > rows.csv
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
        kernel, config = row["kernel"].split("/")
        print(f"{arch},{sms},{row['n']},{row['k']},{bucket},{kernel},{config},"
              f"{row['gemm_us']:.2f},{row['check_rel_error'] / GUARD:.3f},"
              f"{doc.get('mxlinear_version', '0.1')},{doc.get('cuda_version', '13.0')}")


if __name__ == "__main__":
    main()
