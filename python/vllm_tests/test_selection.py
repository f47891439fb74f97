"""vLLM's per-layer MXFP8 kernel choice with mxlinear registered, on a faked CUDA device."""

import pytest
from conftest import EXTENSION_ERROR, adapter

from vllm.model_executor.kernels.linear import init_mxfp8_linear_kernel
from vllm.model_executor.kernels.linear.mxfp8 import Mxfp8LinearLayerConfig


@pytest.fixture
def registered(unregistered, monkeypatch):
    """mxlinear registered, its GPU kernels reported present (this machine needs no GPU for
    selection; test_is_supported_sees_the_extension checks the real probe)."""
    assert adapter.register() is True
    monkeypatch.setattr(adapter, "_cuda_kernels_loaded", lambda: True)
    return unregistered


@pytest.mark.parametrize("shape", [(1, 32), (4096, 4096), (7, 96), (151936, 5120)])
def test_hopper_selects_mxlinear(registered, platform, shape):
    platform(9, 0)
    kernel = init_mxfp8_linear_kernel(weight_shape=shape)
    assert type(kernel) is adapter.kernel_class()
    assert kernel.config.weight_shape == shape


@pytest.mark.parametrize("capability", [(8, 9), (10, 0), (12, 0)])
def test_other_gpus_fall_through(registered, platform, capability):
    platform(*capability)
    try:
        kernel = init_mxfp8_linear_kernel(weight_shape=(64, 128))
    except ValueError as e:  # no kernel of this vLLM build runs on a device-less machine
        assert f"{adapter.KERNEL_NAME}: requires compute capability 9.0" in str(e)
    else:
        assert type(kernel) is not adapter.kernel_class()


def test_vllm_disabled_kernels_skips_mxlinear(registered, platform, monkeypatch):
    platform(9, 0)
    monkeypatch.setenv("VLLM_DISABLED_KERNELS", f"SomeOtherKernel,{adapter.KERNEL_NAME}")
    try:
        kernel = init_mxfp8_linear_kernel(weight_shape=(64, 128))
    except ValueError as e:
        assert f"{adapter.KERNEL_NAME} disabled by environment variable" in str(e)
    else:
        assert type(kernel) is not adapter.kernel_class()


def test_k_not_multiple_of_32_falls_through(registered, platform):
    platform(9, 0)
    try:
        kernel = init_mxfp8_linear_kernel(weight_shape=(64, 100))
    except ValueError as e:
        assert f"{adapter.KERNEL_NAME}: requires K a positive multiple of 32" in str(e)
    else:
        assert type(kernel) is not adapter.kernel_class()


@pytest.mark.parametrize(
    "config, reason",
    [
        (Mxfp8LinearLayerConfig(weight_shape=(64, 100)), "K a positive multiple of 32"),
        (Mxfp8LinearLayerConfig(weight_shape=(64, 48)), "K a positive multiple of 32"),
        (Mxfp8LinearLayerConfig(weight_shape=(64, 0)), "K a positive multiple of 32"),
        (Mxfp8LinearLayerConfig(weight_shape=(0, 64)), "N >= 1"),
        (Mxfp8LinearLayerConfig(weight_shape=(64, 64), bmm_batch_size=8), "bmm_batch_size=8"),
    ],
)
def test_can_implement_rejects(config, reason):
    ok, why = adapter.kernel_class().can_implement(config)
    assert ok is False and reason in why and (str(config.weight_shape[1]) in why or "bmm" in why)


@pytest.mark.parametrize("shape", [(1, 32), (3, 64), (4096, 14336)])
def test_can_implement_accepts(shape):
    assert adapter.kernel_class().can_implement(Mxfp8LinearLayerConfig(weight_shape=shape)) == (
        True,
        None,
    )


def test_is_supported_reasons(platform, monkeypatch):
    cls = adapter.kernel_class()
    monkeypatch.setattr(adapter, "_cuda_kernels_loaded", lambda: True)
    platform(8, 9)
    ok, why = cls.is_supported()
    assert not ok and "9.0" in why and "8.9" in why
    ok, why = cls.is_supported(100)
    assert not ok and "10.0" in why
    assert cls.is_supported(90) == (True, None)  # vLLM's explicit capability wins
    platform(9, 0)
    assert cls.is_supported() == (True, None)
    monkeypatch.setattr(adapter, "_cuda_kernels_loaded", lambda: False)
    ok, why = cls.is_supported()
    assert not ok and "no CUDA kernel for mxlinear::linear" in why


@pytest.mark.parametrize("kind", ["ROCM", "CPU", "XPU"])
def test_is_supported_refuses_other_platforms(platform, monkeypatch, kind):
    # ROCm's gfx90a also reports capability 9.0.
    monkeypatch.setattr(adapter, "_cuda_kernels_loaded", lambda: True)
    platform(9, 0, kind)
    ok, why = adapter.kernel_class().is_supported(90)
    assert not ok and f"requires a CUDA platform; vLLM runs on {kind}" in why


def test_is_supported_sees_the_extension(platform):
    assert EXTENSION_ERROR is None, f"mxlinear._C did not load: {EXTENSION_ERROR}"
    platform(9, 0)
    assert adapter.kernel_class().is_supported() == (True, None)


def test_linear_backend_map(registered):
    selection, cuda = registered
    assert selection._filter_kernels_by_backend(adapter.BACKEND_NAME, cuda) == [
        adapter.kernel_class()
    ]
    others = selection._filter_kernels_by_backend("marlin", cuda)
    assert others and adapter.kernel_class() not in others


def test_vllm_config_rejects_the_backend_name():
    # vLLM 0.34 checks --linear-backend against a fixed list, so the map entry is reachable
    # only through code; the docs say so. A vLLM that accepts the name fails this check.
    from vllm.config.kernel import KernelConfig

    with pytest.raises(Exception, match=adapter.BACKEND_NAME):
        KernelConfig(linear_backend=adapter.BACKEND_NAME)
