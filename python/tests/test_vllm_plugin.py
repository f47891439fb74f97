"""The vLLM adapter without vLLM: importing it stays free of vLLM, and register() explains itself.

The checks against a real vLLM live in python/vllm_tests (run by scripts/test-vllm.sh)."""

import logging
import subprocess
import sys

import pytest

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
