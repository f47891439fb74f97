"""Reading one rank's part of a layer from a safetensors checkpoint: only its rows or K columns
are copied out."""

from __future__ import annotations

import os

import torch

from .._checkpoint_error import CheckpointError
from .._safetensors_files import _tensor_files, _unreadable, _wrong_dtype
from ..nn import (
    BLOCK,
    _FLOAT_DTYPES,
    _SCALE_DTYPES,
    _is_block_multiple,
)
from ._shards import _own


class _SafetensorsLayer:
    """Lazy per-tensor access to ``<prefix>.weight``, ``.weight_scale`` and ``.bias`` in one
    safetensors file, or in the files of a checkpoint directory that ``load_mxfp8`` would read
    them from."""

    def __init__(self, where: str, path, prefix: str):
        self.where, self.prefix = where, prefix
        self.path = os.fspath(path)
        # Resolved as load_mxfp8 resolves it: by the directory's index when it has one, and a
        # tensor stored twice without one is an error, never the copy in whichever file comes last.
        self.handles = _tensor_files(self.path, where, lambda key: key.startswith(prefix + "."))

    def has(self, suffix: str) -> bool:
        return f"{self.prefix}.{suffix}" in self.handles

    def shape(self, suffix: str) -> tuple[int, ...]:
        key = f"{self.prefix}.{suffix}"
        if key not in self.handles:
            raise CheckpointError(f"{self.where}: missing tensor '{key}' in '{self.path}'")
        return tuple(self._reading(key, lambda reader: reader.get_slice(key).get_shape()))

    def dtype(self, suffix: str) -> torch.dtype:
        """The tensor's dtype as load_mxfp8 reads it: safetensors' get_tensor, which maps the file
        rather than copying the tensor's bytes, so no data is read. A slice cannot give it for
        every dtype get_tensor reads: get_slice fails on a packed dtype (F4, two values a byte,
        whose header counts values). A header dtype that torch has no type for raises
        CheckpointError naming the file and the tensor."""
        key = f"{self.prefix}.{suffix}"
        return self._reading(key, lambda reader: reader.get_tensor(key).dtype)

    def read(self, suffix: str, rows=slice(None), cols=None) -> torch.Tensor:
        """Only ``[rows]`` or ``[rows, cols]`` of the tensor is read from the file."""
        key = f"{self.prefix}.{suffix}"
        index = rows if cols is None else (rows, cols)
        part = self._reading(key, lambda reader: reader.get_slice(key)[index])
        # safetensors may hand back a view into its memory map of the file: copy the slice out,
        # so the shard owns exactly its own bytes and never pins the whole stored tensor.
        return _own(part)

    def _reading(self, key: str, read):
        """``read(reader)`` of the open reader of tensor ``key``'s file. The header parsed when
        the file was opened, but the data can still fail to read (a dtype torch has no type for,
        data that does not fit the header's dtype and shape): CheckpointError naming the file and
        the tensor."""
        handle, file = self.handles[key]
        try:
            return read(handle)
        except Exception as e:
            raise _unreadable(self.where, file, key, e) from e


def _read_checked(where: str, layer: _SafetensorsLayer, bias: bool):
    """(N, K, has bias) of the stored layer, checking the stored shapes and dtypes from the
    files' headers, before any tensor's data is read."""
    wshape, sshape = layer.shape("weight"), layer.shape("weight_scale")
    key = f"{layer.prefix}"
    if len(wshape) != 2 or wshape[0] < 1 or not _is_block_multiple(wshape[1]):
        raise CheckpointError(
            f"{where}: tensor '{key}.weight' has shape {list(wshape)}; expected [N, K] with K a "
            f"positive multiple of {BLOCK}"
        )
    n, k = wshape
    if tuple(sshape) != (n, k // BLOCK):
        raise CheckpointError(
            f"{where}: tensor '{key}.weight_scale' has shape {list(sshape)}; expected "
            f"[{n}, {k // BLOCK}] (N, K/32)"
        )
    has_bias = bias and layer.has("bias")
    if has_bias and layer.shape("bias") != (n,):
        raise CheckpointError(
            f"{where}: tensor '{key}.bias' has shape {list(layer.shape('bias'))}; expected [{n}]"
        )
    _check_dtype(where, layer, "weight", (torch.float8_e4m3fn,))
    _check_dtype(where, layer, "weight_scale", _SCALE_DTYPES)
    if has_bias:
        dtype = layer.dtype("bias")
        if not dtype.is_floating_point or dtype.itemsize == 1:  # a float of 16 bits or more
            raise _wrong_dtype(where, f"{key}.bias", dtype, _FLOAT_DTYPES)
    return n, k, has_bias


def _check_dtype(where: str, layer: _SafetensorsLayer, suffix: str, dtypes) -> None:
    dtype = layer.dtype(suffix)
    if dtype not in dtypes:
        raise _wrong_dtype(where, f"{layer.prefix}.{suffix}", dtype, dtypes)
