"""mxlinear.select: the selection report from Python."""

import pytest
import torch

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
