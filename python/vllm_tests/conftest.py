"""Shared set-up for the checks against a real vLLM (scripts/test-vllm.sh runs them).

mxlinear's Python files do not need its compiled extension, only the ops do. So that a wheel
whose extension does not load under vLLM's torch still gets its registration, selection and
weight-processing checks, a failed `import mxlinear` is replaced by a bare package object over
the same directory; test_extension_loads then fails with the import error, as does every check
that calls an op.
"""

import importlib.util
import os
import sys
import types

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))  # emulation.py

try:
    import mxlinear  # noqa: F401

    EXTENSION_ERROR: BaseException | None = None
except ImportError as e:
    EXTENSION_ERROR = e
    spec = importlib.util.find_spec("mxlinear")
    package = types.ModuleType("mxlinear", "mxlinear without its extension")
    package.__path__ = list(spec.submodule_search_locations)
    package.__file__ = spec.origin
    sys.modules["mxlinear"] = package

import mxlinear.integrations.vllm as adapter  # noqa: E402


def require_extension() -> None:
    if EXTENSION_ERROR is not None:
        pytest.fail(
            f"mxlinear._C does not load under torch {torch.__version__}: {EXTENSION_ERROR}",
            pytrace=False,
        )


@pytest.fixture
def kernel_lists():
    """vLLM's MXFP8 kernel list for CUDA and its --linear-backend map, restored afterwards."""
    from vllm.model_executor.kernels import linear as selection
    from vllm.platforms import PlatformEnum

    cuda = selection._POSSIBLE_MXFP8_KERNELS[PlatformEnum.CUDA]
    saved_cuda = list(cuda)
    backends = selection._LINEAR_BACKEND_KERNEL_MAP
    saved_backends = {name: set(kernels) for name, kernels in backends.items()}
    yield selection, cuda
    cuda[:] = saved_cuda
    backends.clear()
    backends.update(saved_backends)


@pytest.fixture
def unregistered(kernel_lists, monkeypatch):
    """The lists as vLLM ships them, without mxlinear, and no disable switch."""
    selection, cuda = kernel_lists
    cuda[:] = [k for k in cuda if k.__name__ != adapter.KERNEL_NAME]
    selection._LINEAR_BACKEND_KERNEL_MAP.pop(adapter.BACKEND_NAME, None)
    monkeypatch.delenv(adapter.DISABLE_ENV, raising=False)
    monkeypatch.delenv("VLLM_DISABLED_KERNELS", raising=False)
    return selection, cuda


def fake_platform(kind: str, major: int, minor: int):
    """A vLLM platform of the given kind ("CUDA", "ROCM", ...) reporting the given compute
    capability, with no device behind it."""
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

    class FakePlatform(Platform):
        _enum = PlatformEnum[kind]
        device_name = kind.lower()
        device_type = kind.lower()

        @classmethod
        def get_device_capability(cls, device_id: int = 0):
            return DeviceCapability(major, minor)

    return FakePlatform()


def install_platform(monkeypatch, major: int, minor: int, kind: str = "CUDA"):
    """Puts a fake platform where vLLM's kernel selection and the adapter look it up. Only for
    selection: the rest of vLLM would then load CUDA-only modules this machine lacks."""
    import vllm.platforms as platforms
    from vllm.model_executor.kernels import linear as selection

    fake = fake_platform(kind, major, minor)
    monkeypatch.setattr(platforms, "_current_platform", fake)
    monkeypatch.setattr(selection, "current_platform", fake)
    return fake


@pytest.fixture
def platform(monkeypatch):
    """platform(9, 0) pretends to be a Hopper GPU, platform(9, 0, "ROCM") an AMD MI200, until
    the test ends."""
    return lambda major, minor, kind="CUDA": install_platform(monkeypatch, major, minor, kind)
