"""MXFP8 linear layers for NVIDIA Hopper as PyTorch custom ops.

``quantize`` and ``linear`` call the ops ``torch.ops.mxlinear.quantize``, ``.linear`` and
``.linear_quantized``: on CPU tensors the library's exact reference, on CUDA tensors its GPU
kernels on the current stream. The numeric contract is docs/MXFP8.md in the source tree. A bad
argument raises RuntimeError with a message that names it ("mxlinear.linear: argument 'x' ...").

``linear`` runs in one of two activation modes. ``"mx"`` (W8A8, the default) MX-quantizes the
activation first, the checkpoint's own semantics. ``"bf16"`` (W8A16) multiplies a bfloat16 or
float16 activation as it is by the dequantized weights: more accurate, and no activation
quantization. The environment variable ``MXLINEAR_ACTIVATION=mx|bf16`` sets the process default
(read once); ``default_activation()`` tells which it is.

Each call gives the same bits every time it runs with the same shapes. ``batch_invariant=True``
(or ``MXLINEAR_BATCH_INVARIANT=1`` for calls that leave it None) asks for more: each output row's
bits depend only on that row of x, the weights and the activation mode, never on the number of
rows or the row's place in the batch, because only kernels and configs that sum each output's K
products in one fixed order serve the call. ``default_batch_invariant()`` tells whether the
environment made it the default. The CPU reference is batch-invariant in either case.
"""

from collections.abc import Sequence

import torch

from . import _C  # registers the C++ ops torch.ops.mxlinear.*
from . import _fake  # noqa: F401  (fake implementations for torch.compile and meta tensors)
from . import _library  # noqa: F401  (the op mxlinear::quantize)
from . import _autograd  # noqa: F401  (backward formulas of the linear ops)

__version__: str = _C.__version__

__all__ = [
    "quantize",
    "linear",
    "ACTIVATIONS",
    "default_activation",
    "default_batch_invariant",
    "select",
    "__version__",
    "nn",
    "distributed",
    "MXFP8Linear",
    "QuantizedModules",
    "quantize_model",
    "CheckpointError",
    "detect_format",
    "load_mxfp8",
    "save_mxfp8",
]

_DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}

# The activation modes by name; the op mxlinear::linear takes a mode's index here, or -1 for the
# default (a str argument does not cross torch's stable ABI safely: see _library.py).
ACTIVATIONS = ("mx", "bf16")
_DEFAULT_ACTIVATION_INDEX = -1


def _activation_index(where: str, activation: str | None) -> int:
    if activation is None:
        return _DEFAULT_ACTIVATION_INDEX
    if isinstance(activation, str) and activation in ACTIVATIONS:
        return ACTIVATIONS.index(activation)
    raise ValueError(
        f"{where}: argument 'activation' is {activation!r}; expected None (the default, "
        "MXLINEAR_ACTIVATION), 'mx' (W8A8) or 'bf16' (W8A16)"
    )


# The batch-invariant switch as the ops take it: -1 leaves it to MXLINEAR_BATCH_INVARIANT, 0 off,
# 1 on (an index, like the activation mode, rather than an optional bool).
_DEFAULT_BATCH_INVARIANT_INDEX = -1


def _batch_invariant_index(where: str, batch_invariant: bool | None) -> int:
    if batch_invariant is None:
        return _DEFAULT_BATCH_INVARIANT_INDEX
    # A bool only: an int reads like the op's index (where -1 is the default, not "on"), and
    # any other object's truth says nothing about what the caller meant.
    if isinstance(batch_invariant, bool):
        return int(batch_invariant)
    raise TypeError(
        f"{where}: argument 'batch_invariant' is {batch_invariant!r} (a "
        f"{type(batch_invariant).__name__}); expected None (the default, "
        "MXLINEAR_BATCH_INVARIANT), True or False"
    )


def default_activation() -> str:
    """The activation mode of calls that choose none: ``"bf16"`` (W8A16) where the environment
    variable ``MXLINEAR_ACTIVATION`` is ``bf16``, else ``"mx"`` (W8A8). The library reads the
    variable once per process, on first use."""
    return _C._default_activation()


def default_batch_invariant() -> bool:
    """Whether calls that leave ``batch_invariant`` None run in the batch-invariant mode: True
    where the environment variable ``MXLINEAR_BATCH_INVARIANT`` is ``1``, else False. The library
    reads the variable once per process, on first use."""
    return _C._default_batch_invariant()


def quantize(x: torch.Tensor, rule: str = "rceil") -> tuple[torch.Tensor, torch.Tensor]:
    """MX-quantizes ``x`` ([..., K], K a multiple of 32; bfloat16, float16 or float32).

    Returns ``(data, scales)``: ``data`` float8_e4m3fn [..., K] and ``scales`` uint8 [..., K/32]
    (E8M0 exponents, bias 127). ``rule`` is ``"rceil"`` (the default) or ``"floor"``.
    """
    return torch.ops.mxlinear.quantize(x, rule)


def linear(
    x: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    activation: str | None = None,
    batch_invariant: bool | None = None,
) -> torch.Tensor:
    """``deq(quantize(x)) @ deq(weight, weight_scale).T (+ bias)`` (W8A8), or
    ``x @ deq(weight, weight_scale).T (+ bias)`` (W8A16).

    ``x`` is [..., K] bfloat16, float16 or float32, or an already quantized ``(data, scales)``
    pair as ``quantize`` returns it (float8_e4m3fn [..., K], uint8 or float8_e8m0fnu
    [..., K/32]). ``weight`` float8_e4m3fn [N, K]; ``weight_scale`` uint8 or float8_e8m0fnu
    [N, K/32]; ``bias`` [N]. The result is [..., N] in ``out_dtype`` (default: ``x.dtype``, or
    bfloat16 for a quantized ``x``).

    ``activation`` is ``"mx"`` (W8A8: x is MX-quantized with the RCEIL rule first), ``"bf16"``
    (W8A16: a bfloat16 or float16 x is multiplied as it is; a float32 x raises RuntimeError) or
    None for the process default (``default_activation()``, from ``MXLINEAR_ACTIVATION``). Any
    other value raises ValueError. A quantized ``x`` is W8A8 by nature: with it, ``activation``
    may only be None or ``"mx"``.

    ``batch_invariant``: True runs the call in the batch-invariant mode, where each output row's
    bits depend only on that row of ``x``, the weights and the activation mode, never on how many
    rows ``x`` has or where the row sits among them (only kernels and configs that sum each
    output's K products in one fixed order serve the call). False runs the default mode, which
    gives the same bits every run for a given call shape only. None (the default) takes the
    process default (``default_batch_invariant()``, from ``MXLINEAR_BATCH_INVARIANT``). Anything
    but a bool or None raises TypeError. On CPU tensors the reference (one float64 sum per output,
    rounded once) is batch-invariant in every mode.
    """
    where = "mxlinear.linear"
    index = _activation_index(where, activation)
    invariant = _batch_invariant_index(where, batch_invariant)
    if isinstance(x, tuple):
        if len(x) != 2:
            raise TypeError(
                f"mxlinear.linear: argument 'x' is a tuple of {len(x)} items; "
                "expected a tensor or a (data, scales) pair"
            )
        if activation == "bf16":
            raise ValueError(
                "mxlinear.linear: argument 'activation' is 'bf16' (W8A16) with an already "
                "quantized x; expected None or 'mx': a (data, scales) pair is MXFP8 (W8A8)"
            )
        data, scales = x
        return torch.ops.mxlinear.linear_quantized(
            data, scales, weight, weight_scale, bias, out_dtype, invariant
        )
    return torch.ops.mxlinear.linear(x, weight, weight_scale, bias, out_dtype, index, invariant)


def select(
    n: int,
    k: int,
    *,
    out_dtype: torch.dtype = torch.bfloat16,
    device: str | None = None,
    activation: str | None = None,
    x_dtype: torch.dtype = torch.bfloat16,
    batch_invariant: bool | None = None,
    ms: Sequence[int] | None = None,
) -> dict:
    """Which kernel serves an [N, K] layer, and which kernel and config each M dispatches to.

    ``device`` is None for the current CUDA device (the CPU when there is none), ``"cpu"``, or
    ``"sm_90a:132"`` (an arch and SM count) to ask about a GPU that is not here. ``activation``,
    ``x_dtype`` (the activation's dtype) and ``batch_invariant`` are those of the calls asked
    about, as ``linear`` takes them (None: the process default, from ``MXLINEAR_ACTIVATION`` and
    ``MXLINEAR_BATCH_INVARIANT``). ``ms``: the token counts to report, in any order (default
    1, 32, 128, 512, 2048, 8192). Returns a dict with ``device``, ``activation``,
    ``batch_invariant``, ``n``, ``k``, ``kernel`` (None if every kernel refused), ``rejected``
    ((kernel, reason) pairs), ``warnings``, ``dispatch`` ({M: {kernel, config, why}}, M
    ascending), ``kernels_run`` and ``report`` (the text ``mxlinear select`` prints).
    """
    where = "mxlinear.select"
    for name, dtype in (("out_dtype", out_dtype), ("x_dtype", x_dtype)):
        if dtype not in _DTYPE_NAMES:
            raise ValueError(
                f"{where}: argument '{name}' is {dtype}; "
                "expected torch.bfloat16, torch.float16 or torch.float32"
            )
    index = _activation_index(where, activation)
    mode = default_activation() if index == _DEFAULT_ACTIVATION_INDEX else ACTIVATIONS[index]
    invariant = _batch_invariant_index(where, batch_invariant)
    if invariant == _DEFAULT_BATCH_INVARIANT_INDEX:
        invariant = int(default_batch_invariant())
    counts = _token_counts(where, ms)
    return _C._select(
        int(n), int(k), device, _DTYPE_NAMES[out_dtype], mode, _DTYPE_NAMES[x_dtype],
        bool(invariant), counts,
    )


def _token_counts(where: str, ms: Sequence[int] | None) -> tuple[int, ...] | None:
    """``ms`` checked and passed as a tuple (the module puts it in order, each count once); None
    leaves the report's default."""
    if ms is None:
        return None
    # A sequence of ints >= 1 (a bool is an int to Python, but not a token count; a str is a
    # sequence, but not of counts).
    if (
        isinstance(ms, (str, bytes))
        or not isinstance(ms, Sequence)
        or not ms
        or not all(isinstance(m, int) and not isinstance(m, bool) and 1 <= m < 2**63 for m in ms)
    ):
        raise ValueError(
            f"{where}: argument 'ms' is {ms!r}; expected a non-empty sequence of token counts "
            "(ints from 1 to 2**63 - 1)"
        )
    return tuple(ms)


# The module layer, model conversion and checkpoint loading, over the functions above.
from . import checkpoints, convert, distributed, nn  # noqa: E402
from .checkpoints import CheckpointError, detect_format, load_mxfp8, save_mxfp8  # noqa: E402
from .convert import QuantizedModules, quantize_model  # noqa: E402
from .nn import MXFP8Linear  # noqa: E402
