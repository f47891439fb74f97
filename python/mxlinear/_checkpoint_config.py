"""The quantization config of an MXFP8 checkpoint, in either layout that ``mxlinear.checkpoints``
reads (ModelOpt's or compressed-tensors'): ``detect_format``, and the scheme that says which
linear layers a config quantizes. A config that MXFP8 does not fit raises CheckpointError naming
the key and its value."""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Callable, Mapping

import torch

from ._checkpoint_error import CheckpointError
from .nn import BLOCK, MXFP8Linear

MODELOPT = "modelopt"
COMPRESSED_TENSORS = "compressed-tensors"
FORMATS = (MODELOPT, COMPRESSED_TENSORS)

# compressed-tensors formats whose quantized weights are stored as E4M3 plus uint8 scales.
_CT_FORMATS = ("mxfp8-quantized", "float-quantized", "naive-quantized")

# compressed-tensors' QuantizationArgs defaults for the keys checked below.
_CT_DEFAULTS = {"num_bits": 8, "type": "int", "symmetric": True, "group_size": None,
                "strategy": None, "dynamic": False, "scale_dtype": None, "block_structure": None}
_CT_MX_ARGS = {"num_bits": 8, "type": "float", "strategy": "group", "group_size": BLOCK,
               "symmetric": True}
_CT_WEIGHT_ARGS = {**_CT_MX_ARGS, "dynamic": False, "scale_dtype": "uint8", "block_structure": None}


@dataclasses.dataclass(frozen=True)
class _Scheme:
    format: str
    quantizes: Callable[[str, torch.nn.Module], bool]  # (qualified name, linear module) -> bool


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
