"""scripts/ab_summary.py on two small bench documents: geomeans per M, figures listed apart."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "ab_summary.py")


def summary(change, base):
    paths = []
    try:
        for doc in (change, base):
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump({"rows": doc}, f)
                paths.append(f.name)
        return subprocess.run([sys.executable, SCRIPT, *paths], check=True, capture_output=True,
                              text=True).stdout
    finally:
        for path in paths:
            os.unlink(path)


def figure(layer, m, gemm, linear=None, prepass=None, check="ok", kernel="prefill/a"):
    row = {"layer": layer, "m": m, "gemm_us": gemm, "check": check, "kernel": kernel}
    if linear is not None:
        row["linear_us"] = linear
    if prepass is not None:
        row["prefill_prepass_us"] = prepass
    return row


class AbSummaryTest(unittest.TestCase):
    def test_geomean_per_m_of_each_column(self):
        out = summary([figure("a", 128, 9.0, 10.0, 2.0), figure("b", 128, 16.0, 20.0, 2.0)],
                      [figure("a", 128, 10.0, 10.0, 1.0), figure("b", 128, 10.0, 20.0, 2.0)])
        # GEMM: sqrt(0.9 * 1.6) = 1.2; linear 1.0; pre-pass sqrt(2 * 1) = 1.414.
        self.assertIn("| 128 | 1.200 | 1.000 | 1.414 | 2 |", out)
        self.assertIn("| a | 128 | 9.00 | 10.00 | 0.900 | prefill/a |", out)

    def test_missing_columns_print_a_dash(self):
        out = summary([figure("a", 1, 5.0)], [figure("a", 1, 10.0)])
        self.assertIn("| 1 | 0.500 | - | - | 1 |", out)

    def test_failed_checks_and_one_sided_figures_are_listed_not_averaged(self):
        out = summary([figure("a", 32, 1.0, check="WRONG"), figure("b", 32, 4.0),
                       figure("c", 32, 4.0)],
                      [figure("a", 32, 10.0), figure("b", 32, 8.0, kernel="decode/x")])
        self.assertIn("| 32 | 0.500 | - | - | 1 |", out)
        self.assertIn("prefill/a (base: decode/x)", out)
        self.assertIn("Check failed (not compared): a M = 32", out)
        self.assertIn("In one report only: c M = 32", out)

    def test_wrong_arguments_print_the_usage(self):
        result = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("Usage: ab_summary.py CHANGE.json BASE.json", result.stderr)


if __name__ == "__main__":
    unittest.main()
