"""Loading and saving MXFP8 safetensors checkpoints (docs/CHECKPOINTS.md in the source tree).

Two layouts are read, both storing each quantized linear layer ``<prefix>`` as ``<prefix>.weight``
float8_e4m3fn [N, K] and ``<prefix>.weight_scale`` uint8 [N, K/32] (E8M0 bytes, 32 elements of K
per scale), with an optional ``<prefix>.bias``; they differ in the configuration that says which
layers are quantized:

- ModelOpt: ``hf_quant_config.json`` ``{"quantization": {"quant_algo": "MXFP8",
  "exclude_modules": [...]}}``, or ``config.json`` ``"quantization_config"`` with
  ``"quant_method": "modelopt"``; every linear layer not excluded is quantized.
- compressed-tensors: ``config.json`` ``"quantization_config"`` with ``"quant_method":
  "compressed-tensors"`` and ``config_groups`` whose weights are 8-bit float, group strategy,
  group size 32, symmetric, ``scale_dtype`` uint8; layers matched by a group's ``targets`` and
  not by ``ignore`` are quantized.

The configuration is parsed in ``_checkpoint_config`` and the files are read in
``_safetensors_files``; the public names of both are imported from here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import torch

import mxlinear  # the package's version, looked up at call time

from ._checkpoint_config import (
    _CT_MX_ARGS,
    COMPRESSED_TENSORS,
    FORMATS,
    MODELOPT,
    _parse_config,
    _Scheme,
    detect_format,
)
from ._checkpoint_error import CheckpointError
from ._safetensors_files import (
    _INDEX,
    _read_json,
    _read_tensors,
    _wrong_dtype,
    read_safetensors,
)
from .convert import _linear_subclass, _swap, _unmovable
from .nn import _SCALE_DTYPES, BLOCK, MXFP8Linear

# The public names of the checkpoint modules, which users import from here.
__all__ = [
    "COMPRESSED_TENSORS",
    "FORMATS",
    "MODELOPT",
    "CheckpointError",
    "detect_format",
    "load_mxfp8",
    "read_safetensors",
    "save_mxfp8",
]

_LIST_LIMIT = 20


# ---------------------------------------------------------------------------- loading


def _config_in(directory: str):
    """(config mapping, its file) of a checkpoint directory: config.json where it holds a
    ``quantization_config`` (the layout both formats share), else hf_quant_config.json (ModelOpt's
    own file); neither is a CheckpointError naming the directory."""
    config_json = os.path.join(directory, "config.json")
    if os.path.isfile(config_json):
        config = _read_json(config_json, "load_mxfp8")
        if "quantization_config" in config:
            return config, config_json
    hf_quant = os.path.join(directory, "hf_quant_config.json")
    if os.path.isfile(hf_quant):
        return _read_json(hf_quant, "load_mxfp8"), hf_quant
    raise CheckpointError(
        f"load_mxfp8: no quantization config in '{directory}': expected hf_quant_config.json or a "
        "config.json with 'quantization_config' (or pass config=)"
    )


def _resolve(source, config):
    """(tensors, config mapping, where the config came from) of load_mxfp8's ``source`` and
    ``config``."""
    if isinstance(source, Mapping):
        tensors = dict(source)
        for key, value in tensors.items():
            if not isinstance(key, str) or not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"load_mxfp8: argument 'source' maps {key!r} to a {type(value).__name__}; "
                    "expected str -> Tensor"
                )
        directory = None
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        tensors = _read_tensors(path, "load_mxfp8")
        directory = path if os.path.isdir(path) else os.path.dirname(path) or "."
    else:
        raise TypeError(
            f"load_mxfp8: argument 'source' is a {type(source).__name__}; expected a directory, "
            "a .safetensors path or a state dict"
        )
    if isinstance(config, (str, os.PathLike)):
        return tensors, _read_json(os.fspath(config), "load_mxfp8"), f"'{os.fspath(config)}'"
    if config is not None:
        return tensors, config, "argument 'config'"
    if directory is None:
        raise TypeError("load_mxfp8: argument 'config' is required when 'source' is a state dict")
    loaded, origin = _config_in(directory)
    return tensors, loaded, f"'{origin}'"


def _describe(shape) -> str:
    return str(list(shape))


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _is_float8(t: torch.Tensor) -> bool:
    return t.is_floating_point() and t.element_size() == 1


def _quantized_tensors(tensors: Mapping[str, torch.Tensor], name: str, module, fmt: str):
    """The checked weight and scale of quantized layer ``name``, for load_mxfp8."""
    k, n = module.in_features, module.out_features
    if k % BLOCK != 0:
        raise CheckpointError(
            f"load_mxfp8: layer '{name}' has in_features = {k}, but the {fmt} config quantizes "
            f"it; MXFP8 needs a multiple of {BLOCK}"
        )
    found = []
    for suffix, dtypes, shape in (("weight", (torch.float8_e4m3fn,), (n, k)),
                                  ("weight_scale", _SCALE_DTYPES, (n, k // BLOCK))):
        key = f"{name}.{suffix}"
        t = tensors.get(key)
        if t is None:
            raise CheckpointError(
                f"load_mxfp8: missing tensor '{key}': the {fmt} config quantizes layer '{name}'"
            )
        if t.dtype not in dtypes:
            raise _wrong_dtype("load_mxfp8", key, t.dtype, dtypes)
        if tuple(t.shape) != shape:
            raise CheckpointError(
                f"load_mxfp8: tensor '{key}' has shape {_describe(t.shape)}; expected "
                f"{_describe(shape)} for layer '{name}' (in_features {k}, out_features {n})"
            )
        found.append(t)
    return found


def _quantized_key(tensors: Mapping[str, torch.Tensor], name: str) -> str | None:
    """The key of an MXFP8 tensor (scales, or an E4M3 weight) that the checkpoint holds for layer
    ``name``; None when it holds the layer unquantized."""
    scale_key, weight_key = f"{name}.weight_scale", f"{name}.weight"
    if scale_key in tensors:
        return scale_key
    weight = tensors.get(weight_key)
    if weight is not None and weight.dtype == torch.float8_e4m3fn:
        return weight_key
    return None


def _check_unquantized(tensors: Mapping[str, torch.Tensor], name: str, module, fmt: str) -> None:
    key = _quantized_key(tensors, name)
    if key is not None:
        raise CheckpointError(
            f"load_mxfp8: tensor '{key}' is quantized, but the {fmt} config leaves layer "
            f"'{name}' unquantized"
        )
    if isinstance(module, MXFP8Linear):
        raise CheckpointError(
            f"load_mxfp8: layer '{name}' is an MXFP8Linear, but the {fmt} config leaves it "
            "unquantized; load into a model whose layer is an nn.Linear"
        )


def _name_list(keys: list[str]) -> str:
    shown = ", ".join(repr(k) for k in keys[:_LIST_LIMIT])
    return shown + (f" and {len(keys) - _LIST_LIMIT} more" if len(keys) > _LIST_LIMIT else "")


def load_mxfp8(
    model: torch.nn.Module,
    source,
    config=None,
    *,
    strict: bool = True,
    device: torch.device | str | None = None,
    out_dtype: torch.dtype | None = None,
    assign: bool = False,
) -> list[str]:
    """Loads an MXFP8 checkpoint into ``model``, replacing each linear layer that the checkpoint
    quantizes with ``MXFP8Linear.from_quantized``, and returns their names in module order.

    ``source``: a checkpoint directory (each tensor from the shard that
    ``model.safetensors.index.json`` names for it, else from every ``*.safetensors`` in it, where
    a tensor stored twice is an error), one ``.safetensors`` file, or a state dict of tensors.
    ``config``: the quantization config as a mapping or a JSON file path; by default ``config.json``
    (``quantization_config``) or ``hf_quant_config.json`` next to the tensors. The layers to
    replace are the model's ``nn.Linear`` (and ``MXFP8Linear``) modules that the config
    quantizes; their tensors must be present with the stored dtypes and shapes. Subclasses of
    ``nn.Linear`` (``MultiheadAttention.out_proj``) stay as they are, as ``quantize_model``
    leaves them: the checkpoint must hold them unquantized. Quantized tensors go to ``device``
    (default: the layer's device, the CPU for a meta layer); a bias is cast to the layer's bias
    dtype; ``out_dtype`` is given to every new layer. A layer that is already an
    ``MXFP8Linear`` keeps its ``activation``, ``batch_invariant`` and, unless ``out_dtype`` is
    given, its ``out_dtype``; its ``rule`` becomes None, since checkpoints do not record the rule
    their weights were quantized with. A subclass of ``MXFP8Linear`` keeps its class too: its
    replacement is built by the subclass's own ``from_quantized``, and one that cannot be built
    so (a constructor taking other arguments) raises CheckpointError naming the layer, its class
    and why, rather than lose the subclass's forward to a plain ``MXFP8Linear``. A replaced
    layer's hooks and attached attributes move to its replacement as ``quantize_model`` moves
    them; a quantized layer whose hooks or state cannot move raises CheckpointError naming it and
    why. Every other tensor is loaded with
    ``load_state_dict(assign=)``, into wherever the model holds it. A state dict ``source`` is
    copied, never shared with the model, unless ``assign``, which puts its tensors in the model
    as they are (moved or cast only where ``device`` or the bias dtype says). A model holding
    meta tensors (built on the meta device) needs ``assign=True``, as ``load_state_dict`` cannot
    copy into them; with ``assign=False`` it raises CheckpointError naming them.
    With ``strict``, model tensors the checkpoint lacks and checkpoint tensors the model lacks
    are errors; without it such a model tensor stays as it is, and so does a quantized layer's
    bias, except on the meta device, where it has no values to keep (CheckpointError naming it).
    Everything is checked before the model changes; problems raise CheckpointError (a
    ValueError) naming the tensor key, the expected and the actual dtype or shape. The load is
    all or nothing: should ``load_state_dict`` still fail (a module's own loading code or a load
    hook refusing), or anything else after the layers are swapped in, the model is put back as it
    was, with its own modules, hooks and tensor objects and the tensors' values, before the error
    propagates (from ``load_state_dict``: a CheckpointError saying so, the error as its cause). To
    put values back, the call holds a copy of the tensors ``load_state_dict`` copies into, beside
    them on their device, until it returns.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"load_mxfp8: argument 'model' is a {type(model).__name__}; expected torch.nn.Module"
        )
    tensors, config, origin = _resolve(source, config)
    scheme = _parse_config(config, f"load_mxfp8: {origin}")
    layers, consumed, missing = _layers_to_replace(model, tensors, scheme, strict)
    names = [name for name, *_ in layers]
    expected, loadable, aliases = _rest_to_load(
        model, tensors, names, consumed, missing, strict, assign
    )
    # The caller's tensors are copied unless assign, as load_state_dict copies them; tensors read
    # from files belong to this call alone.
    copy = not assign and isinstance(source, Mapping)
    replacements = _replacements(layers, device, out_dtype, assign, copy)
    _swap_and_load(model, replacements, expected, loadable, aliases, assign)
    return names


def _layers_to_replace(
    model: torch.nn.Module, tensors: Mapping[str, torch.Tensor], scheme: _Scheme, strict: bool
):
    """The linear layers of ``model`` that ``scheme`` quantizes, which load_mxfp8 replaces, in
    module order, each as (name, module, weight, scale, bias) with its tensors in ``tensors``
    checked (bias None where the layer has none or the checkpoint lacks it); the keys of those
    tensors; and the keys of the biases the checkpoint lacks. A linear layer that stays (left
    unquantized, or an nn.Linear subclass) must not be stored quantized."""
    layers = []  # (name, module, weight, scale, bias) of each layer to replace
    consumed: set[str] = set()
    missing: list[str] = []
    for name, module in model.named_modules():
        if not isinstance(module, (torch.nn.Linear, MXFP8Linear)) or not name:
            continue
        if not scheme.quantizes(name, module):
            _check_unquantized(tensors, name, module, scheme.format)
            continue
        kept = _linear_subclass(module) if isinstance(module, torch.nn.Linear) else None
        if kept is not None:  # left alone, as quantize_model leaves it; loaded with the rest
            key = _quantized_key(tensors, name)
            if key is not None:
                raise CheckpointError(
                    f"load_mxfp8: tensor '{key}' is quantized, but layer '{name}' cannot become an "
                    f"MXFP8Linear: {kept}"
                )
            continue
        reason = _unmovable(module)
        if reason is not None:
            cls = _replacement_class(module)
            becomes = "an MXFP8Linear" if cls is MXFP8Linear else f"a new {cls.__name__}"
            raise CheckpointError(
                f"load_mxfp8: the {scheme.format} config quantizes layer '{name}', but it cannot "
                f"become {becomes}: {reason}"
            )
        weight, scale = _quantized_tensors(tensors, name, module, scheme.format)
        consumed.update((f"{name}.weight", f"{name}.weight_scale"))
        bias = None
        if module.bias is not None:
            bias = _checked_bias(tensors, name, module, strict)
            if bias is None:  # strict: an error in _rest_to_load; else the layer keeps its own
                missing.append(f"{name}.bias")
            else:
                consumed.add(f"{name}.bias")
        layers.append((name, module, weight, scale, bias))
    return layers, consumed, missing


def _checked_bias(tensors: Mapping[str, torch.Tensor], name: str, module, strict: bool):
    """The checkpoint's bias of quantized layer ``name``, whose module has one, checked; None
    when the checkpoint lacks it."""
    bias_key = f"{name}.bias"
    bias = tensors.get(bias_key)
    if bias is None:
        if not strict and module.bias.is_meta:
            raise CheckpointError(
                f"load_mxfp8: the checkpoint lacks '{bias_key}', and layer '{name}' has no bias "
                "values of its own to keep (a meta tensor)"
            )
        return None
    # The dtype first: a packed dtype's shape counts bytes, not values (F4's [N/2]).
    if not bias.is_floating_point() or bias.element_size() == 1:
        raise CheckpointError(
            f"load_mxfp8: tensor '{bias_key}' has dtype {_dtype(bias)}; expected a float dtype"
        )
    if tuple(bias.shape) != (module.out_features,):
        raise CheckpointError(
            f"load_mxfp8: tensor '{bias_key}' has shape {_describe(bias.shape)}; expected "
            f"[{module.out_features}]"
        )
    return bias


def _rest_to_load(
    model: torch.nn.Module,
    tensors: Mapping[str, torch.Tensor],
    names: list[str],
    consumed: set[str],
    missing: list[str],
    strict: bool,
    assign: bool,
):
    """Checks the checkpoint's tensors outside the replaced layers ``names`` against the model:
    with ``strict``, model tensors the checkpoint lacks (added to ``missing``) and checkpoint
    tensors the model has no place for are errors; another shape, an 8-bit float's other dtype
    and, without ``assign``, a meta tensor to copy into always are. Returns the model's state dict
    (``keep_vars``), the tensors for load_state_dict, and each other name of a tied tensor -> the
    name the checkpoint holds it under."""
    # A tensor counts as supplied when the checkpoint holds it under any of its names (tied
    # weights appear once).
    rest = {k: v for k, v in tensors.items() if k not in consumed}
    expected = model.state_dict(keep_vars=True)
    replaced = set(names)
    supplied = {id(expected[k]): k for k in rest if k in expected}
    aliases: dict[str, str] = {}  # tied tensor's other name -> the name the checkpoint uses
    for key, value in expected.items():
        if key.rpartition(".")[0] in replaced or key in tensors:
            continue  # the replacement's own tensors are checked by _layers_to_replace
        if id(value) in supplied:
            aliases[key] = supplied[id(value)]
        else:
            missing.append(key)
    unexpected = [k for k in rest if k not in expected]
    if strict and (missing or unexpected):
        parts = []
        if missing:
            parts.append(f"the checkpoint lacks {_name_list(sorted(missing))}")
        if unexpected:
            parts.append(f"the model has no place for {_name_list(sorted(unexpected))}")
        raise CheckpointError("load_mxfp8: " + "; ".join(parts))
    for key, value in rest.items():
        if key not in expected:
            continue
        want = expected[key]
        if tuple(value.shape) != tuple(want.shape):
            raise CheckpointError(
                f"load_mxfp8: tensor '{key}' has shape {_describe(value.shape)}; expected "
                f"{_describe(want.shape)}"
            )
        # load_state_dict would convert an 8-bit float to the model's dtype without its scales.
        if value.dtype != want.dtype and (_is_float8(value) or _is_float8(want)):
            raise CheckpointError(
                f"load_mxfp8: tensor '{key}' has dtype {_dtype(value)}; the model holds it as "
                f"{_dtype(want)}"
            )
    loadable = {k: v for k, v in rest.items() if k in expected}
    # load_state_dict(assign=False) copies into the model's tensors, which on the meta device it
    # skips with a warning: the model would keep tensors without values.
    on_meta = sorted(k for k in loadable if expected[k].is_meta)
    if on_meta and not assign:
        raise CheckpointError(
            f"load_mxfp8: argument 'assign' is False, but the model holds {_name_list(on_meta)} "
            "on the meta device, where load_state_dict cannot copy values; expected assign=True "
            "for a model built on the meta device"
        )
    return expected, loadable, aliases


def _replacements(layers, device, out_dtype, assign: bool, copy: bool):
    """The replacement of each of ``layers`` (``_layers_to_replace``'s), as ``_swap`` takes them:
    the id of the layer -> (the layer, its replacement). The quantized tensors go to ``device``,
    else to the layer's device (the CPU for a meta layer), copied where ``copy`` says; the bias is
    cast to the layer's bias dtype, and the layer's own kept where the checkpoint lacks it."""
    replacements: dict[int, tuple[torch.nn.Module, MXFP8Linear]] = {}
    for name, module, weight, scale, bias in layers:
        target = device if device is not None else module.weight.device
        if torch.device(target).type == "meta":
            target = "cpu"
        if module.bias is not None:
            if bias is None:  # not strict, and the checkpoint lacks it: the layer keeps its own
                bias = module.bias.detach()
            bias = bias.to(device=target, dtype=module.bias.dtype, copy=not assign)
        options = {"out_dtype": out_dtype}
        if isinstance(module, MXFP8Linear):  # a reload keeps the layer's options
            options = {
                "out_dtype": module.out_dtype if out_dtype is None else out_dtype,
                "activation": module.activation,
                "batch_invariant": module.batch_invariant,
            }
        replacements[id(module)] = module, _rebuilt(
            name, module, weight.to(target, copy=copy), scale.to(target, copy=copy), bias, options
        )
    return replacements


def _swap_and_load(
    model: torch.nn.Module, replacements, expected, loadable, aliases, assign: bool
) -> None:
    """Swaps the replacements into ``model`` and loads the ``loadable`` tensors into it (checked
    by ``_rest_to_load``), all or nothing: a failure puts the model back as it was."""
    # The phases before this one leave the model as it was; each step below changes it.
    # load_state_dict can still fail where no check can see (a module's own _load_from_state_dict
    # or load hooks), after copying some tensors: what the model holds is saved first, so that a
    # failed load puts it all back.
    saved = _Saved(model, [expected[k] for k in loadable] if not assign else [])
    undo = _swap(model, replacements)
    try:
        try:
            model.load_state_dict(loadable, strict=False, assign=assign)
        except Exception as e:
            raise CheckpointError(
                f"load_mxfp8: model.load_state_dict failed on the checkpoint's tensors outside the "
                f"quantized layers, so the model is left as it was: {e}"
            ) from e
        # assign puts new tensor objects in place, which unties tied ones: tie them again.
        if assign:
            for alias, source in aliases.items():
                _set_tensor(model, alias, _get_tensor(model, source))
    except BaseException:
        undo()
        saved.restore()
        raise


def _replacement_class(module: torch.nn.Module) -> type[MXFP8Linear]:
    """The class of a quantized layer's replacement: MXFP8Linear for an nn.Linear, the layer's
    own class for an MXFP8Linear or a subclass of it. ``_rebuilt`` builds it, and load_mxfp8's
    error for a layer that cannot be replaced names it."""
    return type(module) if isinstance(module, MXFP8Linear) else MXFP8Linear


def _rebuilt(name: str, module: torch.nn.Module, weight, scale, bias, options) -> MXFP8Linear:
    """The replacement of quantized layer ``name``: an MXFP8Linear, or for a subclass of
    MXFP8Linear a layer of the same class, built by its own ``from_quantized``, so that the
    subclass's forward and behaviour stay. A subclass that cannot be built so (its constructor
    takes other arguments, say) raises CheckpointError naming the layer, its class and why; an
    MXFP8Linear in its place would silently drop what the subclass adds."""
    cls = _replacement_class(module)
    if cls is MXFP8Linear:
        return MXFP8Linear.from_quantized(weight, scale, bias, **options)
    what = f"layer '{name}' is a {cls.__name__}, a subclass of MXFP8Linear"
    try:
        layer = cls.from_quantized(weight, scale, bias, **options)
    except Exception as e:
        raise CheckpointError(
            f"load_mxfp8: {what}, and {cls.__name__}.from_quantized(weight, weight_scale, bias, "
            f"{', '.join(f'{k}=...' for k in options)}) raised {type(e).__name__}: {e}; expected "
            f"it to build a {cls.__name__} as MXFP8Linear.from_quantized does (its constructor "
            "taking MXFP8Linear's arguments), so that the layer keeps its class"
        ) from e
    if type(layer) is not cls:
        raise CheckpointError(
            f"load_mxfp8: {what}, and {cls.__name__}.from_quantized returned a "
            f"{type(layer).__name__}; expected a {cls.__name__}, so that the layer keeps its class"
        )
    return layer


class _Saved:
    """Which tensors each module of ``model`` holds, and the values of ``overwritten`` (the
    tensors that load_state_dict copies into), to put back after a failed load: assign replaces
    tensor objects, a copy changes their values."""

    def __init__(self, model: torch.nn.Module, overwritten: list[torch.Tensor]):
        self.slots = [(m, dict(m._parameters), dict(m._buffers)) for m in model.modules()]
        unique = {id(t): t for t in overwritten if not t.is_meta}  # tied tensors once
        with torch.no_grad():
            self.values = [(t, t.detach().clone()) for t in unique.values()]

    def restore(self) -> None:
        for module, parameters, buffers in self.slots:
            module._parameters.clear()
            module._parameters.update(parameters)
            module._buffers.clear()
            module._buffers.update(buffers)
        with torch.no_grad():
            for tensor, value in self.values:
                tensor.copy_(value)


def _slots(model: torch.nn.Module, key: str):
    prefix, _, attr = key.rpartition(".")
    module = model.get_submodule(prefix)
    return (module._parameters if attr in module._parameters else module._buffers), attr


def _get_tensor(model: torch.nn.Module, key: str) -> torch.Tensor:
    slots, attr = _slots(model, key)
    return slots[attr]


def _set_tensor(model: torch.nn.Module, key: str, value: torch.Tensor) -> None:
    slots, attr = _slots(model, key)
    slots[attr] = value


# ---------------------------------------------------------------------------- saving


def _unique_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for key, value in model.state_dict(keep_vars=True).items():
        if id(value) in seen:
            continue  # a tied tensor is stored once; loading finds it under its first name
        seen.add(id(value))
        out[key] = value
    return out


def _ct_config(ignore: list[str]) -> dict:
    weights = {**_CT_MX_ARGS, "dynamic": False, "scale_dtype": "torch.uint8",
               "zp_dtype": "torch.uint8"}
    activations = {**weights, "dynamic": True}
    return {
        "quant_method": COMPRESSED_TENSORS,
        "format": "mxfp8-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {"targets": ["Linear"], "weights": weights, "input_activations": activations,
                        "output_activations": None, "format": "mxfp8-quantized"}
        },
        "ignore": ignore,
        "kv_cache_scheme": None,
    }


def _check_save_directory(directory: str, format: str) -> None:
    """Refuses a directory holding another checkpoint's files, which load_mxfp8 would read beside
    or instead of the ones save_mxfp8 writes: other shards, a shard index (preferred to the
    files themselves) or the other layout's config (``config.json``'s ``quantization_config`` is
    preferred to ``hf_quant_config.json``; beside a new one, ``hf_quant_config.json`` would
    contradict it)."""
    if not os.path.isdir(directory):
        return
    names = os.listdir(directory)
    clashing = [n for n in names if n.endswith(".safetensors") and n != "model.safetensors"]
    if _INDEX in names:
        clashing.append(_INDEX)
    if format == MODELOPT:
        own = "hf_quant_config.json"
        config_json = os.path.join(directory, "config.json")
        if os.path.isfile(config_json):
            if "quantization_config" in _read_json(config_json, "save_mxfp8"):
                clashing.append("config.json")
    else:
        own = "config.json"
        if "hf_quant_config.json" in names:
            clashing.append("hf_quant_config.json")
    if clashing:
        raise FileExistsError(
            f"save_mxfp8: argument 'directory' is '{directory}', which holds "
            f"{_name_list(sorted(clashing))} from another checkpoint: load_mxfp8 would read them "
            "with or instead of the new files; expected a new or empty directory, or one whose "
            f"only checkpoint files are model.safetensors and {own} (replaced by this call)"
        )


def save_mxfp8(
    model: torch.nn.Module, directory: str | os.PathLike, format: str = MODELOPT
) -> None:
    """Writes ``model`` as an MXFP8 checkpoint that ``load_mxfp8`` reads back into the same
    architecture built with ``nn.Linear`` layers: ``model.safetensors`` (every state-dict tensor,
    tied tensors once) plus the config, which lists the model's remaining ``nn.Linear`` layers as
    unquantized. ``format="modelopt"`` writes ``hf_quant_config.json``; ``"compressed-tensors"``
    writes ``quantization_config`` into ``config.json``, keeping that file's other keys.

    ``directory`` may be new, or hold an earlier checkpoint of the same format (its
    ``model.safetensors`` and config are replaced) and any files that are not checkpoint files
    (a tokenizer, a ``config.json`` without ``quantization_config``). Files that ``load_mxfp8``
    would read with or instead of the new ones raise FileExistsError before anything is
    written: other ``*.safetensors`` shards, ``model.safetensors.index.json``, and the other
    format's config (a ``config.json`` with ``quantization_config`` for ``"modelopt"``, an
    ``hf_quant_config.json`` for ``"compressed-tensors"``)."""
    if format not in FORMATS:
        raise ValueError(
            f"save_mxfp8: argument 'format' is {format!r}; expected one of {list(FORMATS)}"
        )
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"save_mxfp8: argument 'model' is a {type(model).__name__}; expected torch.nn.Module"
        )
    directory = os.fspath(directory)
    _check_save_directory(directory, format)
    os.makedirs(directory, exist_ok=True)
    unquantized = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    tensors_path = os.path.join(directory, "model.safetensors")
    from safetensors.torch import save_file

    save_file(_unique_tensors(model), str(tensors_path), {"format": "pt"})
    if format == MODELOPT:
        config = {
            "producer": {"name": "mxlinear", "version": mxlinear.__version__},
            "quantization": {
                "quant_algo": "MXFP8",
                "kv_cache_quant_algo": None,
                "exclude_modules": unquantized,
            },
        }
        path = os.path.join(directory, "hf_quant_config.json")
    else:
        path = os.path.join(directory, "config.json")
        config = _read_json(path, "save_mxfp8") if os.path.isfile(path) else {}
        config["quantization_config"] = _ct_config(unquantized)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
