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


    def test_each_mode_gets_its_own_row_from_its_own_configs(self):
        # The W8A16 config is the fastest overall, but W8A8 calls cannot use it: each mode
        # gets the fastest of its own kernels.
        doc = {"rows": [figure(64, kernel_w8a16="generic_a16/t64", check_w8a16="ok",
                               check_w8a16_rel_error=1e-3, w8a16_us=40.0,
                               configs_linear={"prefill/w128": 30.0, "prefill_a16/w64": 20.0,
                                               "generic_a16/t64": 41.0},
                               configs_check_rel_error={"prefill/w128": 2e-3,
                                                        "prefill_a16/w64": 1e-3})]}
        rows = rows_for(doc)
        self.assertEqual([(r["kernel"], r["config"], r["us"]) for r in rows],
                         [("prefill", "w128", "30.00"), ("prefill_a16", "w64", "20.00")])
        self.assertEqual(rows[1]["error_ratio"], "0.250")

    def test_a_failed_w8a16_check_gives_no_w8a16_row(self):
        doc = {"rows": [figure(8, kernel_w8a16="gemv_a16/t8", check_w8a16="WRONG",
                               check_w8a16_rel_error=0.5)]}
        self.assertEqual([r["kernel"] for r in rows_for(doc)], ["generic"])


if __name__ == "__main__":
    unittest.main()
