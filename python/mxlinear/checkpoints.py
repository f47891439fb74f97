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
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
from collections.abc import Callable, Mapping

import torch

import mxlinear  # the package's version, looked up at call time

from .convert import _linear_subclass, _swap, _unmovable
from .nn import BLOCK, MXFP8Linear

MODELOPT = "modelopt"
COMPRESSED_TENSORS = "compressed-tensors"
FORMATS = (MODELOPT, COMPRESSED_TENSORS)

# compressed-tensors formats whose quantized weights are stored as E4M3 plus uint8 scales.
_CT_FORMATS = ("mxfp8-quantized", "float-quantized", "naive-quantized")
_SCALE_DTYPES = (torch.uint8, torch.float8_e8m0fnu)
_LIST_LIMIT = 20

# compressed-tensors' QuantizationArgs defaults for the keys checked below.
_CT_DEFAULTS = {"num_bits": 8, "type": "int", "symmetric": True, "group_size": None,
                "strategy": None, "dynamic": False, "scale_dtype": None, "block_structure": None}
_CT_MX_ARGS = {"num_bits": 8, "type": "float", "strategy": "group", "group_size": BLOCK,
               "symmetric": True}
_CT_WEIGHT_ARGS = {**_CT_MX_ARGS, "dynamic": False, "scale_dtype": "uint8", "block_structure": None}


class CheckpointError(ValueError):
    """A checkpoint or its configuration is not a valid MXFP8 checkpoint for the model."""


@dataclasses.dataclass(frozen=True)
class _Scheme:
    format: str
    quantizes: Callable[[str, torch.nn.Module], bool]  # (qualified name, linear module) -> bool


# ---------------------------------------------------------------------------- configuration


def _is_string_list(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _modelopt_scheme(algo, exclude, group_size, where: str) -> _Scheme:
    if str(algo).upper() != "MXFP8":
        raise CheckpointError(
            f"{where}: quant_algo is {algo!r}; mxlinear loads 'MXFP8' checkpoints only"
        )
    if group_size is not None and group_size != BLOCK:
        raise CheckpointError(f"{where}: group_size is {group_size!r}; MXFP8 needs {BLOCK}")
    if not _is_string_list(exclude):
        raise CheckpointError(
            f"{where}: the excluded modules are {exclude!r}; expected a list of strings"
        )
    patterns = tuple(exclude)

    def quantizes(name: str, module: torch.nn.Module) -> bool:
        return not any(fnmatch.fnmatchcase(name, p) for p in patterns)

    return _Scheme(MODELOPT, quantizes)


def _ct_pattern(target: str, where: str):
    """A compiled regular expression for a "re:" target, else the target itself."""
    if not target.startswith("re:"):
        return target
    try:
        return re.compile(target[3:])
    except re.error as e:
        raise CheckpointError(f"{where}: {target!r} is not a valid regular expression: {e}") from e


def _ct_matches(name: str, module: torch.nn.Module, target) -> bool:
    """compressed-tensors matching: a "re:" regular expression (re.match) or the exact name on
    the module's name, or a class name in the module's MRO; MXFP8Linear counts as a "Linear"."""
    if isinstance(target, re.Pattern):
        return target.match(name) is not None
    if target == name:
        return True
    if target == "Linear" and isinstance(module, MXFP8Linear):
        return True
    return any(cls.__name__ == target for cls in type(module).__mro__)


def _check_ct_args(where: str, args, expected: dict) -> None:
    if not isinstance(args, Mapping):
        raise CheckpointError(f"{where} is {args!r}; expected a mapping of quantization arguments")
    for key, want in expected.items():
        got = args.get(key, _CT_DEFAULTS.get(key))
        if key == "scale_dtype" and isinstance(got, str):
            got = got.removeprefix("torch.")
        if got != want:
            raise CheckpointError(f"{where}.{key} is {got!r}; MXFP8 needs {want!r}")



def _ct_scheme(q: Mapping, where: str) -> _Scheme:
    groups = q.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise CheckpointError(f"{where}: config_groups is {groups!r}; expected a non-empty mapping")
    top_format = q.get("format")
    targets: list[str] = []
    for group_name, group in groups.items():
        gwhere = f"{where}: config_groups[{group_name!r}]"
        if not isinstance(group, Mapping):
            raise CheckpointError(f"{gwhere} is {group!r}; expected a mapping")
        fmt = group.get("format") or top_format
        if fmt not in _CT_FORMATS:
            raise CheckpointError(
                f"{gwhere} has format {fmt!r}; expected one of {list(_CT_FORMATS)}"
            )
        _check_ct_args(f"{gwhere}.weights", group.get("weights"), _CT_WEIGHT_ARGS)
        # mxlinear always MX-quantizes the activation at run time; a checkpoint calibrated for
        # another activation scheme (static scales, per-token FP8) would run other numerics.
        if group.get("input_activations") is not None:
            _check_ct_args(f"{gwhere}.input_activations", group["input_activations"],
                           {**_CT_MX_ARGS, "dynamic": True})
        group_targets = group.get("targets")
        if not _is_string_list(group_targets):
            raise CheckpointError(
                f"{gwhere}.targets is {group_targets!r}; expected a list of strings"
            )
        targets.extend(group_targets)
    ignore = q.get("ignore") or []
    if not _is_string_list(ignore):
        raise CheckpointError(f"{where}: ignore is {ignore!r}; expected a list of strings")
    targets_t = tuple(_ct_pattern(t, f"{where}: targets") for t in targets)
    ignore_t = tuple(_ct_pattern(t, f"{where}: ignore") for t in ignore)

    def quantizes(name: str, module: torch.nn.Module) -> bool:
        return any(_ct_matches(name, module, t) for t in targets_t) and not any(
            _ct_matches(name, module, t) for t in ignore_t
        )

    return _Scheme(COMPRESSED_TENSORS, quantizes)


def _parse_config(config, where: str) -> _Scheme:
    """The scheme of an MXFP8 quantization config; errors are prefixed with ``where``, the public
    function's name and the config's origin."""
    if not isinstance(config, Mapping):
        raise TypeError(f"{where} is a {type(config).__name__}; expected a mapping (parsed JSON)")
    q = config.get("quantization_config", config)  # config.json holds it under this key
    if not isinstance(q, Mapping):
        raise CheckpointError(f"{where}: quantization_config is {q!r}; expected a mapping")
    method = str(q.get("quant_method", "")).lower()
    section = q.get("quantization")
    if isinstance(section, Mapping) and method in ("", MODELOPT):  # hf_quant_config.json
        return _modelopt_scheme(section.get("quant_algo"), section.get("exclude_modules") or [],
                                section.get("group_size"), where)
    if method == MODELOPT:  # config.json written by ModelOpt
        exclude = q.get("ignore", q.get("exclude_modules")) or []  # either, by export version
        return _modelopt_scheme(q.get("quant_algo"), exclude, q.get("group_size"), where)
    if method == "mxfp8":  # the ModelOpt layout under a plain "mxfp8" tag
        return _modelopt_scheme("MXFP8", q.get("ignored_layers") or [], q.get("group_size"), where)
    if method == COMPRESSED_TENSORS:
        return _ct_scheme(q, where)
    raise CheckpointError(
        f"{where}: quant_method is {q.get('quant_method')!r}; expected 'modelopt' (or a "
        "hf_quant_config.json 'quantization' section), 'mxfp8' or 'compressed-tensors'"
    )


def detect_format(config: Mapping) -> str:
    """``"modelopt"`` or ``"compressed-tensors"`` for an MXFP8 quantization config: the contents
    of ``hf_quant_config.json``, of ``config.json`` (its ``quantization_config``), or that
    section itself. Anything else, including quantized formats other than MXFP8, raises
    CheckpointError saying which key holds what, after "detect_format: argument 'config'"."""
    return _parse_config(config, "detect_format: argument 'config'").format


# ---------------------------------------------------------------------------- files


def _read_json(path: str, where: str, expected: str = "a JSON object") -> dict:
    """The JSON object in file ``path``; anything else raises CheckpointError prefixed with
    ``where``, naming the file and saying ``expected``. Any bytes end in a CheckpointError: bytes
    that are not UTF-8, text that is not JSON and an integer past Python's digit limit raise
    ValueError, nesting deeper than the interpreter's stack RecursionError."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (ValueError, RecursionError) as e:
        raise CheckpointError(
            f"{where}: '{path}' cannot be parsed as JSON ({type(e).__name__}: {_shortened(e)}); "
            f"expected {expected}"
        ) from e
    if not isinstance(value, dict):
        raise CheckpointError(
            f"{where}: '{path}' holds a {type(value).__name__}; expected {expected}"
        )
    return value


def _shortened(value, limit: int = 120) -> str:
    """``value`` for a message: its repr (an exception's text) cut to ``limit`` characters, as a
    file's contents can be any size."""
    text = str(value) if isinstance(value, BaseException) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_safetensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """All tensors of one safetensors file, on the CPU, read as load_mxfp8 reads a file. A file
    that is not a valid safetensors file raises CheckpointError naming it, and so does a tensor
    whose data cannot be read, naming the tensor too, in load_mxfp8's words after this function's
    name; a missing file raises FileNotFoundError."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"read_safetensors: no safetensors file at '{path}'")
    return _read_tensors(path, "read_safetensors")


_INDEX = "model.safetensors.index.json"


def _open_safetensors(path: str, where: str):
    """A reader of one safetensors file: its header is parsed here, its tensors when asked for."""
    from safetensors import safe_open

    try:
        return safe_open(path, "pt", device="cpu")
    except Exception as e:  # the parser's own error type, or whatever a bad header leads to
        raise CheckpointError(f"{where}: '{path}' is not a readable safetensors file: {e}") from e


def _unreadable(where: str, file: str, key: str, error: Exception) -> CheckpointError:
    """The error for a tensor whose data cannot be read although its file's header parsed: a
    dtype torch has no type for, data that does not fit the header's dtype and shape."""
    return CheckpointError(
        f"{where}: '{file}' is not a readable safetensors file: its tensor '{key}' cannot be read "
        f"({type(error).__name__}: {error}); expected data that torch reads as the dtype and "
        "shape the header gives"
    )


def _wrong_dtype(where: str, key: str, dtype: torch.dtype, expected) -> CheckpointError:
    """The error for tensor ``key`` stored as ``dtype`` where one of the dtypes ``expected`` is
    needed, as load_mxfp8 and the tensor-parallel layers' from_safetensors both raise it."""
    wanted = " or ".join(str(d).removeprefix("torch.") for d in expected)
    return CheckpointError(
        f"{where}: tensor '{key}' has dtype {str(dtype).removeprefix('torch.')}; expected {wanted}"
    )


_INDEX_EXPECTED = "a JSON object whose 'weight_map' maps each tensor name to its shard's file name"


def _index_files(path: str, index: str, where: str) -> tuple[dict[str, str], list[str]]:
    """The weight_map (tensor name -> shard file name) of the index ``index`` of directory
    ``path``, checked, and the names of the shards it lists, sorted: any contents of the file that
    are not such a mapping raise CheckpointError naming the index and what it holds, and a shard
    that is not a file in ``path`` FileNotFoundError (once every name is checked)."""
    weight_map = _read_json(index, where, _INDEX_EXPECTED).get("weight_map")
    if not isinstance(weight_map, dict):
        raise CheckpointError(
            f"{where}: '{index}': weight_map is {_shortened(weight_map)}; expected "
            f"{_INDEX_EXPECTED}"
        )
    if not weight_map:
        raise CheckpointError(
            f"{where}: '{index}': weight_map is empty; expected {_INDEX_EXPECTED}"
        )
    for key, name in weight_map.items():  # JSON object keys are always strings
        if not isinstance(name, str):
            raise CheckpointError(
                f"{where}: '{index}': weight_map maps '{key}' to {_shortened(name)}; expected "
                "its shard's file name (a string)"
            )
    names = sorted(set(weight_map.values()))
    absent = None  # the first shard that is not a file
    for name in names:
        if name in ("", ".", "..") or os.path.basename(name) != name:
            raise CheckpointError(
                f"{where}: '{index}' names the shard {_shortened(name)}; expected a file name in "
                "the directory"
            )
        if absent is None and not os.path.isfile(os.path.join(path, name)):
            absent = name
    if absent is not None:
        raise FileNotFoundError(
            f"{where}: '{index}' names the shard {absent!r}, which is not a file in '{path}'"
        )
    return weight_map, names


def _tensor_files(
    path: str, where: str, wanted: Callable[[str], bool] = lambda key: True
) -> dict[str, tuple[object, str]]:
    """Which file holds each tensor of a checkpoint, for the tensor names ``wanted`` accepts:
    name -> (the file's open reader, its path), in file order. ``path`` is one safetensors file
    or a checkpoint directory. load_mxfp8 and the tensor-parallel layers' from_safetensors both
    read through this, so they take every tensor from the same file.

    In a directory with ``model.safetensors.index.json``, the index decides: each tensor comes
    from the shard its weight_map names, and copies of it in other files (stale shards of an
    earlier save, a file the index does not list) are never read. A tensor the index places in a
    file that lacks it, or one that a listed shard holds but the index does not place, raises
    CheckpointError naming the tensor, the file and the index. Without an index every
    ``*.safetensors`` file is read, and a tensor stored in two of them raises CheckpointError
    naming the tensor and both files, since nothing says which one to take."""
    if not os.path.isdir(path):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{where}: no safetensors file at '{path}'")
        reader = _open_safetensors(path, where)
        return {key: (reader, path) for key in reader.keys() if wanted(key)}
    index = os.path.join(path, _INDEX)
    if os.path.isfile(index):
        weight_map, names = _index_files(path, index, where)
    else:
        weight_map = None
        names = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
    if not names:
        raise FileNotFoundError(f"{where}: no .safetensors files in '{path}'")
    placed: dict[str, list[str]] = {name: [] for name in names}
    for key, name in (weight_map or {}).items():
        if wanted(key):
            placed[name].append(key)
    found: dict[str, tuple[object, str]] = {}
    for name in names:
        file = os.path.join(path, name)
        reader = _open_safetensors(file, where)
        stored = [key for key in reader.keys() if wanted(key)]
        if weight_map is not None:
            for key in stored:
                if key not in weight_map:
                    raise CheckpointError(
                        f"{where}: '{file}' holds tensor '{key}', which '{index}' does not "
                        "place; expected the index to name the file of every tensor in its shards"
                    )
            held = set(stored)
            for key in placed[name]:
                if key not in held:
                    raise CheckpointError(
                        f"{where}: '{index}' places tensor '{key}' in '{file}', which does not "
                        "hold it"
                    )
            stored = [key for key in stored if weight_map[key] == name]
        for key in stored:
            if key in found:
                raise CheckpointError(
                    f"{where}: tensor '{key}' is stored twice, in '{found[key][1]}' and '{file}', "
                    f"and '{path}' has no {_INDEX} to say which file holds it"
                )
            found[key] = reader, file
    return found


def _read_tensors(path: str, where: str) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint file or directory, each from the file ``_tensor_files``
    resolves it to, on the CPU; errors are prefixed with ``where``, the caller's name."""
    tensors: dict[str, torch.Tensor] = {}
    for key, (reader, file) in _tensor_files(path, where).items():
        try:
            tensors[key] = reader.get_tensor(key)
        except Exception as e:  # a header that passed but data that does not fit it
            raise _unreadable(where, file, key, e) from e
    return tensors


def _config_in(directory: str):
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


# ---------------------------------------------------------------------------- loading


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
    # The caller's tensors are copied unless assign, as load_state_dict copies them; tensors read
    # from files belong to this call alone.
    copy = not assign and isinstance(source, Mapping)

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
            bias_key = f"{name}.bias"
            bias = tensors.get(bias_key)
            if bias is None:
                missing.append(bias_key)  # strict: an error below; else the layer keeps its own
                if not strict and module.bias.is_meta:
                    raise CheckpointError(
                        f"load_mxfp8: the checkpoint lacks '{bias_key}', and layer '{name}' has "
                        "no bias values of its own to keep (a meta tensor)"
                    )
            else:
                consumed.add(bias_key)
                # The dtype first: a packed dtype's shape counts bytes, not values (F4's [N/2]).
                if not bias.is_floating_point() or bias.element_size() == 1:
                    raise CheckpointError(
                        f"load_mxfp8: tensor '{bias_key}' has dtype {_dtype(bias)}; expected a "
                        "float dtype"
                    )
                if tuple(bias.shape) != (module.out_features,):
                    raise CheckpointError(
                        f"load_mxfp8: tensor '{bias_key}' has shape {_describe(bias.shape)}; "
                        f"expected [{module.out_features}]"
                    )
        layers.append((name, module, weight, scale, bias))
    names = [name for name, *_ in layers]

    # The rest of the model: a tensor counts as supplied when the checkpoint holds it under any
    # of its names (tied weights appear once).
    rest = {k: v for k, v in tensors.items() if k not in consumed}
    expected = model.state_dict(keep_vars=True)
    replaced = set(names)
    supplied = {id(expected[k]): k for k in rest if k in expected}
    aliases: dict[str, str] = {}  # tied tensor's other name -> the name the checkpoint uses
    for key, value in expected.items():
        if key.rpartition(".")[0] in replaced or key in tensors:
            continue  # the replacement's own tensors are checked above
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

    # Nothing above changed the model; each step below does. load_state_dict can still fail where
    # no check above can see (a module's own _load_from_state_dict or load hooks), after copying
    # some tensors: what the model holds is saved first, so that a failed load puts it all back.
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
    return names


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
