"""Reading safetensors checkpoints: one file, or a directory's files (each tensor from the shard
its ``model.safetensors.index.json`` names, else from every ``*.safetensors`` file), and the
checkpoint's JSON files. A file that cannot be read as what it should be raises CheckpointError
naming it, a missing one FileNotFoundError."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import torch

from ._checkpoint_error import CheckpointError


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
