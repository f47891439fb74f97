"""``quantize_model``: swaps a model's ``nn.Linear`` layers for ``MXFP8Linear`` in place."""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable, Iterable

import torch

from .nn import (
    _FLOAT_DTYPES,
    BLOCK,
    MXFP8Linear,
    _check_activation,
    _check_batch_invariant,
    _check_out_dtype,
    _check_rule,
    _dtype_names,
)

Selector = Iterable[str] | Callable[[str, torch.nn.Module], bool] | None

_WILDCARDS = frozenset("*?[")


@dataclasses.dataclass(frozen=True)
class QuantizedModules:
    """What ``quantize_model`` did, in ``model.named_modules()`` order.

    ``converted``: qualified names of the layers now ``MXFP8Linear``. ``skipped``: name -> reason
    for selected layers that MXFP8 cannot serve (``in_features`` not a positive multiple of 32,
    no output features, a weight dtype other than bfloat16, float16 or float32, or a subclass of
    ``nn.Linear`` whose forward the swap would lose); they stay as they were.
    """

    converted: list[str]
    skipped: dict[str, str]


def _matcher(argument: str, selector: Selector) -> Callable[[str, torch.nn.Module], bool] | None:
    if selector is None:
        return None
    if callable(selector):
        return selector
    if isinstance(selector, str):
        raise TypeError(
            f"quantize_model: argument '{argument}' is the string {selector!r}; expected an "
            "iterable "
            "of patterns (e.g. [" + repr(selector) + "]) or a callable(name, module) -> bool"
        )
    patterns = list(selector)
    for p in patterns:
        if not isinstance(p, str):
            raise TypeError(
                f"quantize_model: argument '{argument}' holds {p!r}; expected pattern strings"
            )
    return lambda name, module: any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _exact_names(selector: Selector) -> list[str]:
    """The patterns of an iterable selector that name one module (no wildcard)."""
    if selector is None or callable(selector):
        return []
    return [p for p in selector if not (_WILDCARDS & set(p))]


def _linear_subclass(module: torch.nn.Module) -> str | None:
    """Why an ``nn.Linear`` subclass keeps its class: an MXFP8Linear in its place would lose the
    subclass's own forward, and code that reads its ``weight`` directly (MultiheadAttention reads
    ``out_proj.weight``) would get E4M3 bytes. ``load_mxfp8`` applies the same rule."""
    if type(module) is not torch.nn.Linear:
        name = type(module).__name__
        return f"{name} is a subclass of nn.Linear; only nn.Linear itself is converted"
    return None


def _unsupported(module: torch.nn.Module) -> str | None:
    reason = _linear_subclass(module)
    if reason is not None:
        return reason
    if module.in_features % BLOCK != 0:
        return f"in_features = {module.in_features} is not a multiple of {BLOCK}"
    if module.in_features == 0:
        return f"in_features = 0 is not a positive multiple of {BLOCK}"
    if module.out_features == 0:
        return "out_features = 0; an MXFP8 layer needs at least one output"
    dtype = module.weight.dtype
    if dtype not in _FLOAT_DTYPES:
        return (
            f"weight dtype {str(dtype).removeprefix('torch.')} is not one of "
            f"{_dtype_names(_FLOAT_DTYPES)}"
        )
    return None


def quantize_model(
    model: torch.nn.Module,
    include: Selector = None,
    exclude: Selector = None,
    rule: str = "rceil",
    out_dtype: torch.dtype | None = None,
    activation: str | None = None,
    batch_invariant: bool | None = None,
) -> QuantizedModules:
    """Replaces the selected ``nn.Linear`` submodules of ``model`` with ``MXFP8Linear.from_linear``
    (weights quantized with ``rule`` on their own device) and returns what it did.

    ``include`` / ``exclude``: None, an iterable of fnmatch patterns over qualified module names
    (``"layers.*.mlp.*"``), or a callable ``(name, module) -> bool``. A layer is converted when it
    is an ``nn.Linear``, ``include`` is None or matches it, and ``exclude`` does not match it
    (``exclude`` wins). Selected layers that cannot be converted are left alone and listed in
    ``skipped``, except that a layer named exactly (no wildcard) in ``include`` must be
    convertible: otherwise ValueError, as for an exact name that names no ``nn.Linear``. A layer
    registered under several names is converted once, under its first name, and replaced
    everywhere. The model itself must not be an ``nn.Linear`` (use ``MXFP8Linear.from_linear``).
    ``activation`` is the new layers' mode: None (``MXLINEAR_ACTIVATION``), ``"mx"`` (W8A8) or
    ``"bf16"`` (W8A16, activations multiplied as they are); see ``MXFP8Linear``.
    ``batch_invariant`` is the new layers' batch-invariant switch: None
    (``MXLINEAR_BATCH_INVARIANT``), True or False; see ``MXFP8Linear``. The options are checked
    before anything is converted, whether or not any layer is selected: a ``rule`` other than
    ``"rceil"`` or ``"floor"`` or an ``activation`` outside its three values raises ValueError, an
    ``out_dtype`` other than None, bfloat16, float16 or float32 or a ``batch_invariant`` other
    than None or a bool TypeError.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"quantize_model: argument 'model' is a {type(model).__name__}; expected "
            "torch.nn.Module"
        )
    if isinstance(model, torch.nn.Linear):
        raise TypeError(
            "quantize_model: argument 'model' is itself an nn.Linear, which cannot be swapped in "
            "place; "
            "use MXFP8Linear.from_linear"
        )
    _check_rule("quantize_model", rule)
    _check_out_dtype("quantize_model", out_dtype)
    _check_activation("quantize_model", activation)
    _check_batch_invariant("quantize_model", batch_invariant)
    if include is not None and not callable(include) and not isinstance(include, str):
        include = tuple(include)  # read twice below; a generator would be spent after once
    included = _matcher("include", include)
    excluded = _matcher("exclude", exclude)
    modules = dict(model.named_modules())

    for name in _exact_names(include):
        module = modules.get(name)
        if not isinstance(module, torch.nn.Linear):
            found = "no module" if module is None else f"a {type(module).__name__}"
            raise ValueError(
                f"quantize_model: argument 'include' names {name!r}, which is {found}; expected "
                "an nn.Linear"
            )
        if excluded is not None and excluded(name, module):
            continue
        reason = _unsupported(module)
        if reason is not None:
            raise ValueError(
                f"quantize_model: argument 'include' names layer {name!r}, which cannot be "
                f"converted: {reason}"
            )

    replacements: dict[int, MXFP8Linear] = {}
    converted: list[str] = []
    skipped: dict[str, str] = {}
    for name, module in modules.items():
        if not isinstance(module, torch.nn.Linear):
            continue
        if included is not None and not included(name, module):
            continue
        if excluded is not None and excluded(name, module):
            continue
        reason = _unsupported(module)
        if reason is not None:
            skipped[name] = reason
            continue
        replacements[id(module)] = MXFP8Linear.from_linear(
            module,
            rule=rule,
            out_dtype=out_dtype,
            activation=activation,
            batch_invariant=batch_invariant,
        )
        converted.append(name)

    # Every parent that holds a converted layer gets the replacement, shared layers included.
    for parent in list(model.modules()):
        for child_name, child in list(parent._modules.items()):  # named_children() hides repeats
            if id(child) in replacements:
                setattr(parent, child_name, replacements[id(child)])
    return QuantizedModules(converted=converted, skipped=skipped)
