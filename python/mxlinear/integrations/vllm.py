"""mxlinear as vLLM's MXFP8 linear kernel on Hopper.

vLLM picks one MXFP8 linear kernel per layer: the first class in its CUDA priority list
(``_POSSIBLE_MXFP8_KERNELS``) whose ``is_supported()`` and ``can_implement()`` both agree.
``register()`` puts ``MxlinearMxfp8LinearKernel`` at the head of that list, so on an sm_90a GPU
every MXFP8 linear layer whose K is a multiple of 32 runs ``torch.ops.mxlinear.linear``; on any
other device the kernel declines and vLLM falls through to its own kernels. Installing mxlinear
registers ``register`` under the ``vllm.general_plugins`` entry point, which vLLM calls in each of
its processes, possibly more than once: registering again keeps a single entry.

Importing this module never imports vLLM: the kernel class is built on first use
(``kernel_class()`` or the module attribute ``MxlinearMxfp8LinearKernel``).

Failure behaviour of ``register()``:
  * vLLM not importable: ``ImportError`` naming the cause (only a direct call can hit this; vLLM's
    plug-in loader runs inside vLLM).
  * a vLLM without the MXFP8 kernel list this adapter joins: a logged warning and ``False``, so
    vLLM still starts with its own kernels.
  * ``MXLINEAR_VLLM_DISABLE`` set to something other than a yes/no word: ``ValueError``.

Switches:
  * ``MXLINEAR_VLLM_DISABLE=1`` (also true/yes/on): ``register()`` adds nothing, returns False.
  * ``VLLM_DISABLED_KERNELS=MxlinearMxfp8LinearKernel``: vLLM's own switch; the kernel stays
    registered but is skipped at selection.
  * ``--linear-backend=<another backend>`` leaves the kernel out as for any other backend.
    ``register()`` also files it under the name ``mxlinear`` in vLLM's backend map, which takes
    effect only where vLLM's configuration accepts that name.
  * ``MXLINEAR_ACTIVATION=bf16`` (in vLLM's environment, so in every worker): the layers run in
    W8A16, multiplying the bf16 or fp16 activation as it is by the dequantized weights, instead of
    MX-quantizing it first (W8A8, ``mx``, the default). The kernel calls the op in the process
    default mode; vLLM's MXFP8 layer configuration has no field for it.
  * ``VLLM_BATCH_INVARIANT=1``: vLLM's own batch-invariant switch. Each kernel, when vLLM builds
    it, reads the variable as vLLM does (an integer, nonzero meaning on) and then calls the op with
    ``batch_invariant=True``, so that an output row's bits depend only on that row of the
    activation, never on how many requests share the batch or where the row sits in it. Where it
    is unset or 0 the op takes mxlinear's own default (``MXLINEAR_BATCH_INVARIANT``, off where
    unset). A value that is not an integer makes building the kernel raise ``ValueError`` naming
    the variable (vLLM's own reading of it refuses such a value too).

Messages go to the ``mxlinear.integrations.vllm`` logger.
"""

import logging
import os

import torch

logger = logging.getLogger(__name__)

KERNEL_NAME = "MxlinearMxfp8LinearKernel"
BACKEND_NAME = "mxlinear"
DISABLE_ENV = "MXLINEAR_VLLM_DISABLE"
BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"

_BLOCK = 32
_HOPPER = 90  # vLLM's integer capability <major><minor>
_YES = frozenset({"1", "true", "yes", "on"})
_NO = frozenset({"", "0", "false", "no", "off"})

_kernel_class: type | None = None


def disabled() -> bool:
    """Whether ``MXLINEAR_VLLM_DISABLE`` asks to keep mxlinear out of vLLM."""
    value = os.environ.get(DISABLE_ENV, "")
    word = value.strip().lower()
    if word in _YES:
        return True
    if word in _NO:
        return False
    raise ValueError(
        f"environment variable {DISABLE_ENV} is {value!r}; expected 1, true, yes or on to keep "
        "mxlinear out of vLLM, or 0, false, no, off or unset to register it"
    )


def vllm_batch_invariant() -> bool:
    """Whether vLLM's batch-invariant switch ``VLLM_BATCH_INVARIANT`` is on: an integer, nonzero
    meaning on, unset meaning off, as vLLM itself reads it."""
    value = os.environ.get(BATCH_INVARIANT_ENV, "0")
    try:
        return int(value.strip() or "0") != 0
    except ValueError:
        raise ValueError(
            f"environment variable {BATCH_INVARIANT_ENV} is {value!r}; expected an integer: 1 "
            "for vLLM's batch-invariant mode, 0 or unset for the default"
        ) from None


def batch_invariant_index() -> int:
    """The op's ``batch_invariant`` argument for vLLM's switch: 1 (on) where
    ``VLLM_BATCH_INVARIANT`` is on, else -1 (mxlinear's default, ``MXLINEAR_BATCH_INVARIANT``)."""
    return 1 if vllm_batch_invariant() else -1


def _cuda_kernels_loaded() -> bool:
    """Whether this process has mxlinear's GPU implementation of mxlinear::linear."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key("mxlinear::linear", "CUDA")
    except RuntimeError:  # the op was never registered: the extension did not load
        return False


def _is_mxlinear_kernel(cls: object) -> bool:
    # By name as well as identity: a reloaded module builds a new class object, and the list
    # must still hold one mxlinear entry.
    return getattr(cls, "__name__", None) == KERNEL_NAME and cls.__module__ == __name__


def _build_kernel_class() -> type:
    from vllm.model_executor.kernels.linear.mxfp8.Mxfp8LinearKernel import (
        Mxfp8LinearKernel,
        Mxfp8LinearLayerConfig,
    )

    class MxlinearMxfp8LinearKernel(Mxfp8LinearKernel):
        """MXFP8 GEMM by mxlinear on sm_90a: W8A8 (activations quantized inside the op), or W8A16
        (activations as they are) where MXLINEAR_ACTIVATION=bf16; batch-invariant where
        VLLM_BATCH_INVARIANT=1."""

        # process_weights_after_loading only trims and re-lays parameters in place, so weights
        # that were already processed pass through it unchanged.
        supports_pre_processed_weights = True

        # The op's batch_invariant index: -1, mxlinear's default, until __init__ reads vLLM's
        # switch.
        batch_invariant_index = -1

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            # Read once per layer, when vLLM builds the kernel: apply_weights runs in captured
            # CUDA graphs and compiled code, where an environment read has no place.
            self.batch_invariant_index = batch_invariant_index()

        @classmethod
        def is_supported(cls, compute_capability: int | None = None) -> tuple[bool, str | None]:
            from vllm.platforms import current_platform

            if not current_platform.is_cuda():
                platform_name = current_platform._enum.name
                return False, f"requires a CUDA platform; vLLM runs on {platform_name}"
            if compute_capability is None:
                capability = current_platform.get_device_capability()
                if capability is None:
                    return False, "vLLM reports no compute capability for the CUDA device"
                compute_capability = capability.to_int()
            if compute_capability != _HOPPER:
                return False, (
                    "requires compute capability 9.0 (sm_90a, Hopper); the device has "
                    f"{compute_capability // 10}.{compute_capability % 10}"
                )
            if not _cuda_kernels_loaded():
                return False, (
                    "mxlinear's extension has no CUDA kernel for mxlinear::linear in this process "
                    "(mxlinear._C failed to load or was built without CUDA)"
                )
            return True, None

        @classmethod
        def can_implement(cls, c: Mxfp8LinearLayerConfig) -> tuple[bool, str | None]:
            if c.bmm_batch_size is not None:
                return False, (
                    f"implements plain linear layers; got a batched GEMM (bmm_batch_size="
                    f"{c.bmm_batch_size})"
                )
            n, k = c.weight_shape
            if n < 1:
                return False, f"requires N >= 1; got weight_shape (N, K) = ({n}, {k})"
            if k < 1 or k % _BLOCK != 0:
                return False, (
                    f"requires K a positive multiple of {_BLOCK}; got weight_shape (N, K) = "
                    f"({n}, {k})"
                )
            return True, None

        def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
            from vllm.model_executor.utils import replace_parameter

            weight = layer.weight.data
            if weight.dtype != torch.float8_e4m3fn or weight.dim() != 2:
                raise ValueError(
                    f"{KERNEL_NAME}: layer.weight has dtype {weight.dtype} and shape "
                    f"{list(weight.shape)}; expected float8_e4m3fn [N, K]"
                )
            n, k = weight.shape
            scale = layer.weight_scale.data
            if scale.dtype == torch.float8_e8m0fnu:
                scale = scale.view(torch.uint8)
            if (
                scale.dtype != torch.uint8
                or scale.dim() != 2
                or scale.shape[0] < n
                or scale.shape[1] < k // _BLOCK
            ):
                raise ValueError(
                    f"{KERNEL_NAME}: layer.weight_scale has dtype {layer.weight_scale.dtype} and "
                    f"shape {list(layer.weight_scale.shape)}; expected uint8 or float8_e8m0fnu "
                    f"[{n}, {k // _BLOCK}] (N, K/32), padding allowed"
                )
            # A loader may pad the scales; the op takes exactly [N, K/32], row-major.
            replace_parameter(layer, "weight", weight.contiguous())
            replace_parameter(layer, "weight_scale", scale[:n, : k // _BLOCK].contiguous())

        def apply_weights(
            self,
            layer: torch.nn.Module,
            x: torch.Tensor,
            bias: torch.Tensor | None = None,
        ) -> torch.Tensor:
            out_dtype = getattr(layer, "params_dtype", None) or x.dtype
            # Activation mode -1, the process default (MXLINEAR_ACTIVATION): vLLM's layer
            # configuration has no field for the mode.
            return torch.ops.mxlinear.linear(
                x,
                layer.weight,
                layer.weight_scale,
                bias,
                out_dtype,
                -1,
                self.batch_invariant_index,
            )

    # Pickle and reprs find the class through this module's __getattr__.
    MxlinearMxfp8LinearKernel.__module__ = __name__
    MxlinearMxfp8LinearKernel.__qualname__ = KERNEL_NAME
    return MxlinearMxfp8LinearKernel


def kernel_class() -> type:
    """The vLLM kernel class, built (importing vLLM) on the first call."""
    global _kernel_class
    if _kernel_class is None:
        _kernel_class = _build_kernel_class()
    return _kernel_class


def __getattr__(name: str):
    if name == KERNEL_NAME:
        return kernel_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register() -> bool:
    """Makes mxlinear vLLM's first-choice MXFP8 linear kernel on CUDA; returns whether it did.

    Safe to call any number of times: the CUDA list and the backend map keep one entry each.
    """
    if disabled():
        logger.info(
            "%s=%s: mxlinear not registered as a vLLM MXFP8 kernel",
            DISABLE_ENV,
            os.environ[DISABLE_ENV],
        )
        return False
    try:
        import vllm
    except ImportError as e:
        raise ImportError(
            "mxlinear.integrations.vllm.register: vLLM is not importable "
            f"({type(e).__name__}: {e}); install vllm to use mxlinear as its MXFP8 linear kernel"
        ) from e
    try:
        from vllm.model_executor.kernels import linear as selection
        from vllm.platforms import PlatformEnum

        candidates = selection._POSSIBLE_MXFP8_KERNELS.setdefault(PlatformEnum.CUDA, [])
        cls = kernel_class()
    except (ImportError, AttributeError) as e:
        logger.warning(
            "vLLM %s has no MXFP8 linear kernel list mxlinear can join (%s: %s); vLLM keeps its "
            "own kernels",
            getattr(vllm, "__version__", "(unknown version)"),
            type(e).__name__,
            e,
        )
        return False

    candidates[:] = [cls] + [k for k in candidates if not _is_mxlinear_kernel(k)]
    backends = getattr(selection, "_LINEAR_BACKEND_KERNEL_MAP", None)
    if isinstance(backends, dict):
        members = backends.setdefault(BACKEND_NAME, set())
        members.difference_update([k for k in members if _is_mxlinear_kernel(k)])
        members.add(cls)
    logger.info(
        "mxlinear registered as vLLM's first MXFP8 linear kernel on CUDA (%s; used on sm_90a)",
        KERNEL_NAME,
    )
    return True
