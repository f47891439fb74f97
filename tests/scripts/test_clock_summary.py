"""scripts/clock_summary.py on small sample files: busy samples only, spreads, reasons, bad lines."""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "clock_summary.py")


def summary(text):
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(text)
    try:
        return subprocess.run([sys.executable, SCRIPT, f.name], check=True, capture_output=True,
                              text=True).stdout
    finally:
        os.unlink(f.name)


def sample(sm, power, util, reasons):
    return f"2026/12/01 05:00:00.000, {sm}, 3201, {power}, 45, {util}, {reasons}\n"


class ClockSummary(unittest.TestCase):
    def test_only_busy_samples_count_and_reasons_are_decoded(self):
        text = (sample(1980, 600, 100, "0x0000000000000000") +
                sample(1755, 700, 100, "0x0000000000000004") +
                sample(1980, 100, 0, "0x0000000000000001") +  # idle: left out
                "Unable to determine the device handle\n" +
                sample(1800, 690, 99, "0x0000000000000004"))
        out = summary(text)
        self.assertIn("3 of 4 samples (1 unparsable lines)", out)
        self.assertIn("SM clock MHz: min 1755, p10 1755, median 1800, max 1980", out)
        self.assertIn("SW power cap: active in 2 of 3 busy samples (67%)", out)
        self.assertNotIn("HW slowdown", out)

    def test_no_busy_sample_says_so(self):
        out = summary(sample(1980, 100, 0, "0x1") + "garbage,,\n")
        self.assertIn("clocks while busy: 0 of 1 samples (1 unparsable lines)", out)

    def test_arbitrary_bytes_do_not_crash_it(self):
        out = summary("\x00\xff,,,\n" * 3 + sample(1900, 650, 80, "zz"))
        self.assertIn("0 of 0 samples (4 unparsable lines)", out)


if __name__ == "__main__":
    unittest.main()
