"""``quantize_model``: swaps a model's ``nn.Linear`` layers for ``MXFP8Linear`` in place."""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import weakref
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
    no output features, a weight dtype other than bfloat16, float16 or float32, a subclass of
    ``nn.Linear`` whose forward the swap would lose, or a layer carrying hooks or state that an
    ``MXFP8Linear`` cannot take over, see ``_unmovable``); they stay as they were.
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


# Hook tables whose hooks see the layer's call (its input, output and the gradient of its input),
# which the swap keeps: they move to the replacement as they are.
_CALL_HOOKS = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_backward_pre_hooks",
    "_backward_hooks",
)
# Hook tables whose hooks see the layer's state dict, whose layout the swap changes for an
# nn.Linear (a float weight becomes E4M3 bytes plus weight_scale).
_STATE_DICT_HOOKS = (
    "_state_dict_pre_hooks",
    "_state_dict_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)
_HOOK_TABLES = _CALL_HOOKS + _STATE_DICT_HOOKS


def _rebind_load_hooks(hooks, old: torch.nn.Module, new: torch.nn.Module) -> None:
    """Points the load-state-dict pre-hooks in ``hooks`` that register_load_state_dict_pre_hook
    bound to ``old`` (it wraps each with a weak reference to its module) at ``new``."""
    for hook in hooks.values():
        if getattr(hook, "with_module", False) and hook.module() is old:
            hook.module = weakref.ref(new)


@functools.cache
def _fresh(cls: type) -> torch.nn.Module:
    """An untouched layer of ``cls`` (``nn.Linear`` or ``MXFP8Linear``), the reference for what a
    user or a library attached to one in a model."""
    if cls is torch.nn.Linear:
        return torch.nn.Linear(BLOCK, 1, device="meta")
    return MXFP8Linear(BLOCK, 1, device="meta")


def _kind(module: torch.nn.Module) -> type:
    return MXFP8Linear if isinstance(module, MXFP8Linear) else torch.nn.Linear


def _names(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names)


def _attached(module: torch.nn.Module) -> list[str]:
    """The instance attributes of ``module`` that a fresh layer of its kind does not have."""
    fresh = _fresh(_kind(module)).__dict__
    return [n for n in module.__dict__ if n not in fresh]


def _unmovable(module: torch.nn.Module) -> str | None:
    """Why what is attached to ``module`` (an ``nn.Linear``, or an ``MXFP8Linear`` reloaded by
    ``load_mxfp8``) cannot move to an ``MXFP8Linear`` in its place, or None when it can.
    ``_move_attached`` moves the rest: forward (pre-)hooks and full backward (pre-)hooks keep
    their order, flags and handles, because they see only the layer's call, and other instance
    attributes are copied. Refused here is what would silently change meaning or get lost: a
    forward replaced on the instance or by ``Module.compile()``, ``register_backward_hook``
    hooks (whose gradients depend on the layer's last operation), state-dict hooks on an
    ``nn.Linear`` (its state dict changes layout), tensors or submodules of its own, and
    attributes whose names the replacement uses."""
    attached = module.__dict__
    if "forward" in attached:
        return (
            "its forward is replaced on the instance (module.forward = ..., as accelerate's hooks "
            "do), which an MXFP8Linear in its place would not run"
        )
    if attached.get("_compiled_call_impl") is not None:
        return (
            "it was compiled with Module.compile(), which compiled the nn.Linear's own call; "
            "compile after converting"
        )
    if module._backward_hooks and module._is_full_backward_hook is False:
        return (
            "it has a hook from register_backward_hook, whose gradients depend on the layer's "
            "last operation; expected register_full_backward_hook, whose hooks are carried over"
        )
    if not isinstance(module, MXFP8Linear):
        tables = [t for t in _STATE_DICT_HOOKS if getattr(module, t)]
        if tables:
            return (
                f"it has state-dict hooks ({', '.join(tables)}), written for nn.Linear's float "
                "weight; an MXFP8Linear's state dict holds E4M3 bytes and weight_scale"
            )
    fresh = _fresh(_kind(module))  # built with a bias: its tensors are every own one
    own = fresh._parameters.keys() | fresh._buffers.keys()
    for kind, table in (
        ("parameter", module._parameters),
        ("buffer", module._buffers),
        ("submodule", module._modules),
    ):
        extra = [n for n in table if n not in own]
        if extra:
            return (
                f"it holds the {kind}(s) {_names(extra)} of its own, which its replacement "
                "would not carry over"
            )
    replacement = _fresh(MXFP8Linear)
    clashing = [
        n
        for n in _attached(module)
        if n in replacement.__dict__ or n in replacement._buffers or hasattr(MXFP8Linear, n)
    ]
    if clashing:
        return f"its attribute(s) {_names(clashing)} would clash with MXFP8Linear's own"
    return None


def _move_attached(old: torch.nn.Module, new: MXFP8Linear) -> None:
    """Moves ``old``'s hooks and attached attributes to its replacement ``new``, which
    ``_unmovable`` accepted. The hook tables themselves move, not copies: torch keys them by
    handle id and a RemovableHandle holds the table, so the handles a user keeps still remove
    their hook from ``new``; ``old``, out of the model now, is left with empty tables so that the
    two never share hooks. ``_move_back`` undoes it."""
    new.training = old.training
    for table in _HOOK_TABLES:
        hooks = getattr(old, table)
        setattr(new, table, hooks)
        setattr(old, table, type(hooks)())
    new._is_full_backward_hook = old._is_full_backward_hook
    _rebind_load_hooks(new._load_state_dict_pre_hooks, old, new)
    for name in _attached(old):
        new.__dict__[name] = old.__dict__[name]


def _move_back(old: torch.nn.Module, new: MXFP8Linear, tables: dict) -> None:
    """Gives ``old`` back the hook ``tables`` it held before ``_move_attached`` (whole or part
    done), so the handles a user keeps remove their hooks from it again. Only the hooks moved:
    ``old``'s flags and attributes were read, never changed."""
    for table, hooks in tables.items():
        setattr(old, table, hooks)
        if getattr(new, table) is hooks:
            setattr(new, table, type(hooks)())
    _rebind_load_hooks(tables["_load_state_dict_pre_hooks"], new, old)


def _swap(
    model: torch.nn.Module, replacements: dict[int, tuple[torch.nn.Module, MXFP8Linear]]
) -> Callable[[], None]:
    """Puts each replacement, keyed by ``id(old)``, wherever ``model`` holds its old layer, and
    returns a function that undoes it: the old layers back in their places with their own hooks,
    for a caller whose later steps fail (load_mxfp8 loads the rest of the model after the swap).
    A swap that fails part way is undone before its error propagates."""
    moved: list[tuple[torch.nn.Module, MXFP8Linear, dict]] = []
    placed: list[tuple[torch.nn.Module, str, torch.nn.Module]] = []

    def undo() -> None:
        for parent, child_name, old in reversed(placed):
            # Straight into the table: a parent's own __setattr__ may refuse, as it may have
            # refused the swap.
            parent._modules[child_name] = old
        for old, new, tables in reversed(moved):
            _move_back(old, new, tables)

    try:
        for old, new in replacements.values():
            moved.append((old, new, {t: getattr(old, t) for t in _HOOK_TABLES}))
            _move_attached(old, new)
        # Every parent that holds a replaced layer gets the replacement, shared layers included.
        for parent in list(model.modules()):
            # named_children() hides repeats.
            for child_name, child in list(parent._modules.items()):
                if id(child) in replacements:
                    setattr(parent, child_name, replacements[id(child)][1])
                    placed.append((parent, child_name, child))
    except BaseException:
        undo()
        raise
    return undo


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
    return _unmovable(module)


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
    A converted layer's forward pre-hooks, forward hooks and full backward (pre-)hooks move to
    its replacement in their order, with their flags, and the handles that registered them
    remove them from it; its ``training`` flag and other attributes attached to it are copied. A
    layer with hooks or state that would change meaning or get lost (a forward replaced on the
    instance, ``register_backward_hook`` or state-dict hooks, tensors or submodules of its own)
    is skipped with the reason.
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

    replacements: dict[int, tuple[torch.nn.Module, MXFP8Linear]] = {}
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
        replacements[id(module)] = module, MXFP8Linear.from_linear(
            module,
            rule=rule,
            out_dtype=out_dtype,
            activation=activation,
            batch_invariant=batch_invariant,
        )
        converted.append(name)
    _swap(model, replacements)
    return QuantizedModules(converted=converted, skipped=skipped)
