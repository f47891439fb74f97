"""scripts/sweep_summary.py on a small bench document: per-kernel bests, geomeans, failures."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "sweep_summary.py")


def summary(doc, *kernels):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(doc, f)
    try:
        return subprocess.run([sys.executable, SCRIPT, f.name, *kernels], check=True,
                              capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)


def figure(n, m, configs, linear=None, **extra):
    row = {"layer": f"l{n}", "n": n, "k": 1024, "m": m, "cublas_bf16_us": 12.0,
           "cublaslt_fp8_tensor_us": 8.0, "tri_mx_us": 48.0, "configs": configs}
    if linear is not None:
        row["configs_linear"] = linear
    row.update(extra)
    return row


class SweepSummary(unittest.TestCase):
    def test_geomeans_over_shapes_of_the_fastest_config(self):
        doc = {"gpu": "H200", "sms": 132, "rows": [
            figure(256, 1, {"decode/a": 6.0, "gemv/b": 8.0}),
            figure(512, 1, {"decode/a": 24.0, "gemv/b": 12.0})]}
        out = summary(doc, "decode", "gemv")
        # bf16 12 us against 6 and 12 us: geomean sqrt(2 * 1) = 1.41; tri_mx 48: sqrt(8 * 4).
        self.assertIn("| 1 | 1.41 | 0.94 | 5.66 |", out)
        self.assertNotIn("full linear", out)

    def test_a_row_without_anchor_times_is_shown_and_left_out_of_the_geomeans(self):
        row = figure(64, 1, {"prefill/a": 6.0})
        del row["cublas_bf16_us"], row["cublaslt_fp8_tensor_us"]
        row["anchor_error"] = "cuBLAS refused the shape"
        out = summary({"rows": [figure(128, 1, {"prefill/a": 4.0}), row]}, "prefill")
        self.assertIn("| l64 | 64x1024 | 1 | nan | nan |", out)
        self.assertIn("| 1 | 3.00 | 2.00 | 9.80 |", out)  # cuBLAS: the other row alone

    def test_a_row_without_anchor_times_is_left_out_of_the_full_linear_geomeans(self):
        row = figure(64, 8, {"decode/a": 6.0}, linear={"decode/a": 8.0})
        del row["cublas_bf16_us"], row["cublaslt_fp8_tensor_us"]
        row["anchor_error"] = "cuBLAS refused the shape"
        out = summary({"rows": [figure(128, 8, {"decode/a": 4.0}, linear={"decode/a": 6.0}), row]},
                      "decode")
        self.assertIn("full linear", out)
        self.assertIn("| 8 | 2.00 | 1.33 |", out)  # the other row alone: 12 / 6, 8 / 6

    def test_full_linear_table_and_both_kinds_of_failure(self):
        doc = {"rows": [figure(256, 8, {"decode/a": 6.0}, linear={"decode/a": 8.0, "gemv/b": 6.0},
                               configs_wrong={"prefill/c": 0.5},
                               configs_linear_wrong={"decode/z": 0.25})]}
        out = summary(doc, "decode")
        self.assertIn("full linear", out)
        self.assertIn("| 8 | 2.00 | 1.33 |", out)  # the fastest linear: 6 us
        self.assertIn("FAILED the correctness check", out)
        self.assertIn("prefill/c (rel. error 0.5)", out)
        self.assertIn("FAILED the check as a full linear", out)
        self.assertIn("decode/z (rel. error 0.25)", out)

    def test_small_m_against_only_reading_the_weights(self):
        doc = {"rows": [figure(256, 1, {"decode/a": 6.0, "gemv/b": 9.0}, weight_stream_us=4.0),
                        figure(256, 32, {"decode/a": 7.0}, weight_stream_us=4.0)]}
        out = summary(doc, "decode")
        self.assertIn("| l256 | 1 | 6.00 | 4.00 | 1.50 | nan |", out)
        self.assertNotIn("| l256 | 32 |", out)  # only M <= 8

    def test_prefill_prepass_against_the_fastest_prefill_config(self):
        doc = {"rows": [figure(256, 512, {"prefill/a": 40.0, "prefill/b": 20.0, "decode/c": 10.0},
                               prefill_prepass_us=2.0),
                        figure(256, 1, {"gemv/d": 5.0}, prefill_prepass_us=1.0)]}
        out = summary(doc, "prefill")
        # 512 x 1024 x (1 + 1/32 + 2) bytes in 2 us: 0.79 TB/s; 2 of the fastest prefill's 20 us.
        self.assertIn("| l256 | 512 | 2.00 | 20.00 | 0.10 | 0.79 |", out)
        self.assertNotIn("| l256 | 1 | 1.00", out)  # no prefill config ran there

    def test_configs_that_take_more_than_one_wave_are_marked(self):
        doc = {"rows": [figure(256, 128, {"prefill/a_split2": 9.0, "prefill/b": 10.0},
                               configs_waves={"prefill/a_split2": 2, "prefill/b": 1}),
                        figure(512, 128, {"prefill/b": 7.0})]}
        out = summary(doc, "prefill")
        self.assertIn("| 9.00 | a_split2 (2 waves) |", out)
        self.assertIn("| 7.00 | b |", out)  # no footprint: nothing marked
        self.assertIn("1 of the 2 timed configs", out)
        self.assertNotIn("waves)", summary({"rows": [figure(256, 1, {"gemv/c": 3.0})]}, "gemv"))

    def test_invariant_choice_against_the_fastest_config_that_keeps_the_k_order(self):
        # W8A8: the mode chose b (12 us); c keeps the order too and runs 8; a is faster still
        # but does not keep it. W8A16: the choice is the fastest. The second shape's W8A8
        # choice is 1.5x its fastest: geomean sqrt(1.5 * 1.5) = 1.5, worst 1.5.
        linear = {"prefill/a": 4.0, "prefill/b": 12.0, "gemv/c_kparts": 8.0,
                  "prefill_a16/b": 10.0, "prefill_a16/d": 11.0}
        keep = ["prefill/b", "gemv/c_kparts", "prefill_a16/b", "prefill_a16/d"]
        doc = {"rows": [
            figure(256, 16, {"prefill/a": 4.0}, linear=linear, configs_keep_k_order=keep,
                   kernel_invariant="prefill/b", kernel_invariant_w8a16="prefill_a16/b"),
            figure(512, 16, {"prefill/a": 4.0}, linear=linear, configs_keep_k_order=keep,
                   kernel_invariant="prefill/b", kernel_invariant_w8a16="prefill_a16/b"),
            # No sweep with --batch-invariant: nothing to compare.
            figure(768, 16, {"prefill/a": 4.0}, linear=linear, kernel_invariant="prefill/b")]}
        out = summary(doc, "prefill")
        self.assertIn("| l256 | 256x1024 | 16 | W8A8 | prefill/b | 12.00 | gemv/c_kparts | 8.00 "
                      "| 1.50 |", out)
        self.assertIn("| l256 | 256x1024 | 16 | W8A16 | prefill_a16/b | 10.00 | prefill_a16/b "
                      "| 10.00 | 1.00 |", out)
        self.assertIn("| W8A8 | 16 | 1.500 | 1.50 |", out)
        self.assertIn("| W8A16 | 16 | 1.000 | 1.00 |", out)
        self.assertNotIn("| l768 |", out.split("keeps the K order")[1])
        self.assertNotIn("keeps the K order", summary({"rows": [figure(256, 1, {"gemv/c": 3.0})]}))

    def test_cost_model_pick_and_prices_against_the_sweep(self):
        # W8A8: the model rates b fastest (5 us estimated) but a runs faster (4 against 8 us):
        # 2.00 x fastest over all configs; among those keeping the K order (b and c) it picks b,
        # the fastest of them. W8A16: one timed config, nothing to rank. prefill/b is priced at
        # 5 / 8 in both figures; a at 6 / 4; the second figure does not estimate c.
        linear = {"prefill/a": 4.0, "prefill/b": 8.0, "prefill/c": 10.0, "prefill_a16/a": 5.0}
        est = {"prefill/a": 6.0, "prefill/b": 5.0, "prefill/c": 7.0, "prefill_a16/a": 5.0}
        doc = {"rows": [
            figure(256, 64, {"prefill/a": 3.0}, linear=linear, configs_estimated_us=est,
                   configs_keep_k_order=["prefill/b", "prefill/c"]),
            figure(512, 64, {"prefill/a": 3.0}, linear=linear,
                   configs_estimated_us={k: v for k, v in est.items() if k != "prefill/c"}),
            # No estimates (a bench before they were recorded): left out.
            figure(768, 64, {"prefill/a": 3.0}, linear=linear)]}
        out = summary(doc, "prefill")
        section = out.split("The cost model against the sweep")[1]
        self.assertIn("| l256 | 256x1024 | 64 | W8A8 | all | prefill/b | 8.00 (5.00) | prefill/a "
                      "| 4.00 (6.00) | 2.00 |", section)
        self.assertNotIn("| K order | prefill/", section)  # its pick is the fastest: not listed
        self.assertIn("| all | W8A8 | 64 | 2.000 | 2.00 |", section)
        self.assertIn("| K order | W8A8 | 64 | 1.000 | 1.00 |", section)
        self.assertIn("| all | W8A16 | 64 | 1.000 | 1.00 |", section)
        self.assertIn("| prefill/b | 0.62 | 0.62 | 0.62 | 2 |", section)
        self.assertIn("| prefill/a | 1.50 | 1.50 | 1.50 | 2 |", section)
        self.assertIn("| prefill/c | 0.70 | 0.70 | 0.70 | 1 |", section)
        self.assertNotIn("| l768 |", section)
        self.assertNotIn("The cost model against", summary({"rows": [figure(256, 1, {"g/c": 3.0})]}))


if __name__ == "__main__":
    unittest.main()
