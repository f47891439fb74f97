"""The plug-in's registration: discovered through its entry point, run by vLLM's loader, first in
the CUDA list, a single entry however often it runs, and off under MXLINEAR_VLLM_DISABLE."""

import importlib
from importlib.metadata import entry_points

import pytest
import torch
from conftest import EXTENSION_ERROR, adapter

ENTRY_POINT = "mxlinear.integrations.vllm:register"


def mxlinear_entries(kernels) -> list:
    return [k for k in kernels if k.__name__ == adapter.KERNEL_NAME]


def test_extension_loads():
    assert EXTENSION_ERROR is None, (
        f"mxlinear._C does not load under torch {torch.__version__}: {EXTENSION_ERROR}"
    )


def test_entry_point_is_discoverable():
    found = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == "mxlinear"]
    assert [ep.value for ep in found] == [ENTRY_POINT]
    assert found[0].load() is adapter.register


@pytest.fixture
def fresh_loader(monkeypatch):
    """vLLM's general plug-in loader as a new process sees it: nothing loaded, no allow-list."""
    import vllm.plugins

    monkeypatch.setattr(vllm.plugins, "plugins_loaded", False)
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    return vllm.plugins.load_general_plugins


def test_vllm_plugin_loader_registers_first(unregistered, fresh_loader):
    selection, cuda = unregistered
    shipped = list(cuda)
    fresh_loader()
    assert cuda[0] is adapter.kernel_class()
    assert cuda[1:] == shipped
    assert selection._LINEAR_BACKEND_KERNEL_MAP[adapter.BACKEND_NAME] == {adapter.kernel_class()}


def test_register_twice_keeps_one_entry(unregistered):
    selection, cuda = unregistered
    shipped = list(cuda)
    assert adapter.register() is True
    assert adapter.register() is True
    assert mxlinear_entries(cuda) == [adapter.kernel_class()] and cuda[0] is adapter.kernel_class()
    assert cuda[1:] == shipped


def test_register_after_module_reload_replaces_the_stale_class(unregistered):
    selection, cuda = unregistered
    adapter.register()
    stale = adapter.kernel_class()
    importlib.reload(adapter)  # builds a new class object of the same name
    assert adapter.register() is True
    fresh = adapter.kernel_class()
    assert fresh is not stale
    assert mxlinear_entries(cuda) == [fresh] and cuda[0] is fresh
    assert selection._LINEAR_BACKEND_KERNEL_MAP[adapter.BACKEND_NAME] == {fresh}


def test_register_moves_mxlinear_ahead_of_kernels_added_later(unregistered):
    selection, cuda = unregistered
    adapter.register()
    other = cuda.pop()  # another plug-in putting a shipped kernel first
    cuda.insert(0, other)
    adapter.register()
    assert cuda[0] is adapter.kernel_class() and cuda[1] is other
    assert len(mxlinear_entries(cuda)) == 1


def test_disable_switch_keeps_lists_untouched(unregistered, fresh_loader, monkeypatch):
    selection, cuda = unregistered
    shipped = list(cuda)
    monkeypatch.setenv(adapter.DISABLE_ENV, "1")
    assert adapter.register() is False
    fresh_loader()
    assert cuda == shipped
    assert adapter.BACKEND_NAME not in selection._LINEAR_BACKEND_KERNEL_MAP


def test_kernel_class_is_a_vllm_mxfp8_kernel():
    from vllm.model_executor.kernels.linear.mxfp8 import Mxfp8LinearKernel

    cls = adapter.MxlinearMxfp8LinearKernel
    assert cls is adapter.kernel_class()
    assert issubclass(cls, Mxfp8LinearKernel) and not cls.__abstractmethods__
    assert cls.__name__ == adapter.KERNEL_NAME and cls.supports_pre_processed_weights
