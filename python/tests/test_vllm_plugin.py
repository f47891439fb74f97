"""The vLLM adapter without vLLM: importing it stays free of vLLM, and register() explains itself.

The checks against a real vLLM live in python/vllm_tests (run by scripts/test-vllm.sh)."""

import logging
import subprocess
import sys
import types

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import mxlinear
import mxlinear.integrations.vllm as adapter


@pytest.fixture
def no_vllm(monkeypatch):
    """Makes `import vllm` fail in this process, whether or not vLLM is installed."""
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "vllm", None)


def test_import_does_not_import_vllm():
    code = (
        "import sys, mxlinear.integrations.vllm as a; "
        "loaded = sorted(m for m in sys.modules if m == 'vllm' or m.startswith('vllm.')); "
        "assert not loaded, loaded; "
        "assert callable(a.register)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_register_without_vllm_raises_import_error(no_vllm, monkeypatch):
    monkeypatch.delenv(adapter.DISABLE_ENV, raising=False)
    with pytest.raises(ImportError, match=r"register: vLLM is not importable .*install vllm"):
        adapter.register()


def test_kernel_class_without_vllm_raises_import_error(no_vllm, monkeypatch):
    monkeypatch.setattr(adapter, "_kernel_class", None)
    with pytest.raises(ImportError):
        adapter.kernel_class()
    with pytest.raises(ImportError):
        adapter.MxlinearMxfp8LinearKernel  # noqa: B018  (the lazy attribute builds the class)


def test_unknown_attribute_is_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchKernel'"):
        adapter.NoSuchKernel  # noqa: B018


@pytest.mark.parametrize("value", ["1", "true", "YES", " on "])
def test_disable_switch_skips_registration_before_importing_vllm(
    no_vllm, monkeypatch, caplog, value
):
    # With vLLM unimportable, returning False (not raising) shows vLLM was never imported.
    monkeypatch.setenv(adapter.DISABLE_ENV, value)
    with caplog.at_level(logging.INFO, logger=adapter.__name__):
        assert adapter.register() is False
    assert any(adapter.DISABLE_ENV in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("value", ["", "0", "false", "No", "off"])
def test_disable_switch_off_values_still_register(no_vllm, monkeypatch, value):
    monkeypatch.setenv(adapter.DISABLE_ENV, value)
    assert adapter.disabled() is False
    with pytest.raises(ImportError):  # got past the switch to the vLLM import
        adapter.register()


@pytest.mark.parametrize("value", ["2", "maybe", "disable"])
def test_disable_switch_rejects_other_values(monkeypatch, value):
    monkeypatch.setenv(adapter.DISABLE_ENV, value)
    with pytest.raises(ValueError, match=rf"{adapter.DISABLE_ENV} is '{value}'; expected 1"):
        adapter.register()


# --------------------------------------------------------------------------- batch invariance


@pytest.mark.parametrize(
    "value, index",
    [(None, -1), ("", -1), ("0", -1), (" 0 ", -1), ("1", 1), (" 1\n", 1), ("2", 1), ("-1", 1)],
)
def test_vllm_batch_invariant_switch_maps_to_the_op_index(monkeypatch, value, index):
    # On: the op's batch_invariant=True (1). Off: -1, mxlinear's own default
    # (MXLINEAR_BATCH_INVARIANT), so that variable still works under vLLM.
    if value is None:
        monkeypatch.delenv(adapter.BATCH_INVARIANT_ENV, raising=False)
    else:
        monkeypatch.setenv(adapter.BATCH_INVARIANT_ENV, value)
    assert adapter.vllm_batch_invariant() is (index == 1)
    assert adapter.batch_invariant_index() == index


@pytest.mark.parametrize("value", ["yes", "on", "1.0", "true"])
def test_vllm_batch_invariant_switch_rejects_non_integers(monkeypatch, value):
    monkeypatch.setenv(adapter.BATCH_INVARIANT_ENV, value)
    with pytest.raises(ValueError, match=rf"VLLM_BATCH_INVARIANT is '{value}'; expected an "
                                         "integer"):
        adapter.batch_invariant_index()


@pytest.fixture
def fake_vllm(monkeypatch):
    """Just enough of vLLM for the kernel class to build: the MXFP8 kernel base class (whose
    constructor takes the layer configuration) and its configuration, whatever vLLM is installed.
    The class is rebuilt over them and forgotten afterwards."""
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    leaf = "vllm.model_executor.kernels.linear.mxfp8.Mxfp8LinearKernel"
    parts = leaf.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        module = types.ModuleType(name)
        module.__path__ = []  # a package, so that the next part imports from it
        monkeypatch.setitem(sys.modules, name, module)

    class Mxfp8LinearLayerConfig:
        def __init__(self, weight_shape=(16, 64), bmm_batch_size=None):
            self.weight_shape = weight_shape
            self.bmm_batch_size = bmm_batch_size

    class Mxfp8LinearKernel:
        def __init__(self, c):
            self.config = c

    sys.modules[leaf].Mxfp8LinearKernel = Mxfp8LinearKernel
    sys.modules[leaf].Mxfp8LinearLayerConfig = Mxfp8LinearLayerConfig
    monkeypatch.setattr(adapter, "_kernel_class", None)
    return Mxfp8LinearLayerConfig


class RecordLinearCalls(TorchDispatchMode):
    """The batch_invariant and activation arguments of each mxlinear::linear call (by position
    or name; the schema's default -1 where left out)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.mxlinear.linear.default:
            names = [a.name for a in func._schema.arguments]
            bound = {"activation": -1, "batch_invariant": -1, **dict(zip(names, args)), **kwargs}
            self.calls.append((bound["activation"], bound["batch_invariant"]))
        return func(*args, **kwargs)


@pytest.mark.parametrize("value, index", [(None, -1), ("0", -1), ("1", 1)])
def test_kernel_passes_vllms_switch_to_the_op(fake_vllm, monkeypatch, value, index):
    if value is None:
        monkeypatch.delenv(adapter.BATCH_INVARIANT_ENV, raising=False)
    else:
        monkeypatch.setenv(adapter.BATCH_INVARIANT_ENV, value)
    kernel = adapter.kernel_class()(fake_vllm())
    assert kernel.batch_invariant_index == index and kernel.config.weight_shape == (16, 64)
    # The switch is read when the kernel is built, not on every call.
    monkeypatch.setenv(adapter.BATCH_INVARIANT_ENV, "0" if index == 1 else "1")
    g = torch.Generator().manual_seed(11)
    weight, weight_scale = mxlinear.quantize(torch.randn(16, 64, generator=g))
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(weight, requires_grad=False)
    layer.weight_scale = torch.nn.Parameter(weight_scale, requires_grad=False)
    layer.params_dtype = torch.bfloat16
    x = torch.randn(3, 64, generator=g, dtype=torch.bfloat16)
    with RecordLinearCalls() as record:
        out = kernel.apply_weights(layer, x)
    assert record.calls == [(-1, index)]
    assert torch.equal(out, mxlinear.linear(x, weight, weight_scale))
