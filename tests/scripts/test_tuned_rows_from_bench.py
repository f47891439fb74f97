"""scripts/tuned_rows_from_bench.py on small bench documents: which config each row names."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "tuned_rows_from_bench.py")


def rows_for(doc):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(doc, f)
    try:
        out = subprocess.run([sys.executable, SCRIPT, f.name, "sm_90a", "132"], check=True,
                             capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    lines = out.strip().splitlines()
    header = lines[0].split(",")
    return [dict(zip(header, line.split(","))) for line in lines[1:]]


def figure(m, **extra):
    row = {"n": 2560, "k": 6144, "m": m, "kernel": "generic/t64", "check": "ok",
           "check_rel_error": 1e-3, "gemm_us": 50.0, "linear_us": 53.0}
    row.update(extra)
    return row


class TunedRowsFromBench(unittest.TestCase):
    def test_ranks_by_the_full_linear_where_the_sweep_timed_it(self):
        # gemv is slower GEMM-only but quantizes the activation itself, so faster as a linear.
        doc = {"rows": [figure(1, configs={"decode/t8": 9.0, "gemv/w16_t8_kwarps8": 9.5},
                               configs_linear={"decode/t8": 11.3, "gemv/w16_t8_kwarps8": 10.0},
                               configs_check_rel_error={"decode/t8": 1e-3, "gemv/w16_t8_kwarps8": 2e-3})]}
        (row,) = rows_for(doc)
        self.assertEqual((row["kernel"], row["config"], row["us"]), ("gemv", "w16_t8_kwarps8", "10.00"))
        self.assertEqual(row["error_ratio"], "0.500")

    def test_ranks_by_the_gemm_alone_in_older_sweeps(self):
        doc = {"rows": [figure(2, configs={"decode/t8": 9.0, "gemv/w16_t8_kwarps8": 9.5})]}
        (row,) = rows_for(doc)
        self.assertEqual((row["kernel"], row["config"], row["us"]), ("decode", "t8", "9.00"))

    def test_buckets_wrong_figures_and_the_dispatched_kernel(self):
        doc = {"rows": [figure(700), figure(32, check="WRONG"),
                        figure(5, configs={"decode/t8": 70.0})]}
        rows = rows_for(doc)
        self.assertEqual([(r["m"], r["kernel"], r["config"]) for r in rows],
                         [("1024", "generic", "t64"), ("8", "generic", "t64")])


if __name__ == "__main__":
    unittest.main()
