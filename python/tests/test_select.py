"""mxlinear.select: the selection report from Python."""

import pytest
import torch
from python_process import run_python

import mxlinear


def test_cpu_selects_the_reference():
    sel = mxlinear.select(4096, 4096, device="cpu")
    assert sel["device"].startswith("cpu") and sel["n"] == 4096 and sel["k"] == 4096
    assert sel["kernel"] == "reference"
    ms = list(sel["dispatch"])
    assert ms[0] == 1 and ms[-1] == 8192 and ms == sorted(ms)
    assert all(d["kernel"] == "reference" for d in sel["dispatch"].values())
    assert "reference" in sel["report"]


def test_described_hopper_picks_a_gpu_kernel_and_explains_rejections():
    sel = mxlinear.select(4096, 4096, device="sm_90a:132")
    assert sel["kernel"] not in (None, "reference")
    assert sel["kernels_run"] and all(isinstance(k, str) for k in sel["kernels_run"])
    for d in sel["dispatch"].values():
        assert d["kernel"] and d["why"]
    # 4096 x 4096 has no tuned rows: every M takes the cost model's tensor-core choice.
    assert all(d["kernel"] != "generic" and d["why"].startswith("cost model")
               for d in sel["dispatch"].values()), sel["dispatch"]
    other = mxlinear.select(4096, 4096, device="sm_80:108")
    assert other["kernel"] == "reference"
    assert all(isinstance(kernel, str) and reason for kernel, reason in other["rejected"])


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="'out_dtype'"):
        mxlinear.select(64, 64, out_dtype=torch.int8)
    with pytest.raises(ValueError, match="'n' and 'k'"):
        mxlinear.select(0, 64)
    with pytest.raises((ValueError, RuntimeError), match="sm_90a:-3"):
        mxlinear.select(64, 64, device="sm_90a:-3")


def test_token_counts_are_reported_in_order_each_once():
    sel = mxlinear.select(2560, 6144, device="sm_90a:132", ms=[4096, 3, 17, 3])
    assert list(sel["dispatch"]) == [3, 17, 4096]
    assert "at M = 3, 17, 4096 (" in sel["report"]
    assert "M=1 " not in sel["report"] and "M=8192 " not in sel["report"]
    for m, d in sel["dispatch"].items():
        assert d["kernel"] and d["config"] and d["why"], (m, d)


@pytest.mark.parametrize("ms", [[], [0], [4, -1], [2**63], [2.0], [True], "64", 64, (x for x in [1])])
def test_bad_token_counts_are_named(ms):
    with pytest.raises(ValueError, match="argument 'ms'"):
        mxlinear.select(64, 64, ms=ms)


# Configs that would sum K in an order that depends on M or on the tile: decode kernels,
# alternating warpgroups, stream-K.
ORDER_BREAKING = ("decode", "_alt", "_streamk")


@pytest.mark.parametrize("activation, kernel_suffix", [("mx", ""), ("bf16", "_a16")])
def test_batch_invariant_report_runs_one_k_order(activation, kernel_suffix):
    ms = [1, 7, 16, 64, 128, 300, 512, 1024, 4096]
    sel = mxlinear.select(2560, 6144, device="sm_90a:132", activation=activation,
                          batch_invariant=True, ms=ms)
    assert sel["batch_invariant"] is True and sel["activation"] == activation
    assert "batch-invariant mode" in sel["report"]
    # 6144 = 3 parts of 2048: any K split is the 3 parts, at every M.
    for m, d in sel["dispatch"].items():
        where = (m, d)
        assert "batch-invariant" in d["why"], where
        assert d["kernel"].endswith(kernel_suffix) or d["kernel"].startswith("gemv"), where
        assert not any(cut in d["kernel"] + "/" + d["config"] for cut in ORDER_BREAKING), where
        assert "_split" not in d["config"] or d["config"].endswith("_split3"), where
    default = mxlinear.select(2560, 6144, device="sm_90a:132", activation=activation,
                              batch_invariant=False, ms=ms)
    assert default["batch_invariant"] is False
    assert "batch-invariant" not in default["report"]
    assert not any("batch-invariant" in d["why"] for d in default["dispatch"].values())


def test_w8a16_reports_the_16_bit_kernels_and_refuses_fp32_x():
    sel = mxlinear.select(4096, 4096, device="sm_90a:132", activation="bf16")
    assert sel["activation"] == "bf16" and "W8A16 (bf16 x as it is)" in sel["report"]
    assert all(d["kernel"].endswith("_a16") for d in sel["dispatch"].values()), sel["dispatch"]
    f16 = mxlinear.select(4096, 4096, device="sm_90a:132", activation="bf16",
                          x_dtype=torch.float16)
    assert "W8A16 (fp16 x as it is)" in f16["report"]
    with pytest.raises(ValueError, match="'x_dtype' is 'float32' with activation 'bf16'"):
        mxlinear.select(64, 64, activation="bf16", x_dtype=torch.float32)
    with pytest.raises(ValueError, match="'x_dtype'"):
        mxlinear.select(64, 64, x_dtype=torch.int8)
    with pytest.raises(ValueError, match="'activation'"):
        mxlinear.select(64, 64, activation="fp8")
    with pytest.raises(TypeError, match="'batch_invariant'"):
        mxlinear.select(64, 64, batch_invariant=1)


SELECT_DEFAULTS = """
import mxlinear
sel = mxlinear.select(2560, 6144, device="sm_90a:132", ms=[16])
print(sel["activation"], sel["batch_invariant"], "batch-invariant mode" in sel["report"])
"""


@pytest.mark.parametrize("activation, invariant", [(None, None), ("bf16", "1"), ("mx", "1"),
                                                   ("bf16", "0")])
def test_defaults_follow_the_environment_as_linear_does(activation, invariant):
    r = run_python(SELECT_DEFAULTS, MXLINEAR_ACTIVATION=activation,
                   MXLINEAR_BATCH_INVARIANT=invariant)
    assert r.returncode == 0, r.stderr
    on = invariant == "1"
    assert r.stdout.split() == [activation or "mx", str(on), str(on)]
