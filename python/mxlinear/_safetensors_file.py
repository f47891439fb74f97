"""Writes the safetensors format (an 8-byte little-endian header length, a JSON header of dtype,
shape and byte offsets per tensor, then the raw bytes) straight from tensor memory:
``safetensors.torch.save_file`` goes through NumPy, which mxlinear does not depend on. Reading
stays with the ``safetensors`` package."""

from __future__ import annotations

import ctypes
import json
import os
import struct
import sys

import torch

_DTYPE_NAMES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint64: "U64", torch.uint32: "U32", torch.uint16: "U16", torch.uint8: "U8",
    torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2",
    torch.float8_e8m0fnu: "F8_E8M0",
}


def write_safetensors(tensors: dict[str, torch.Tensor], path: str | os.PathLike,
                      metadata: dict[str, str] | None = None) -> None:
    """Writes ``tensors`` (moved to the CPU, made contiguous) to ``path`` in safetensors format."""
    if sys.byteorder != "little":
        raise RuntimeError(
            "write_safetensors: the format stores little-endian bytes; this machine is big-endian"
        )
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for key, tensor in tensors.items():
        if not isinstance(key, str) or key == "__metadata__":
            raise ValueError(f"write_safetensors: tensor name {key!r} is not usable")
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(
                f"write_safetensors: '{key}' is a {type(tensor).__name__}; expected a torch.Tensor"
            )
        if tensor.dtype not in _DTYPE_NAMES:
            raise TypeError(
                f"write_safetensors: '{key}' has dtype {tensor.dtype}, which safetensors cannot "
                "store"
            )
    blobs = []
    offset = 0
    # Widest elements first, then by name: every tensor starts aligned to its element size.
    for key, tensor in sorted(tensors.items(), key=lambda kv: (-kv[1].element_size(), kv[0])):
        t = tensor.detach().to("cpu").contiguous()
        size = t.numel() * t.element_size()
        header[key] = {"dtype": _DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                       "data_offsets": [offset, offset + size]}
        blobs.append((t, size))
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)  # 8-byte aligned data, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for t, size in blobs:
            if size:
                f.write(memoryview((ctypes.c_ubyte * size).from_address(t.data_ptr())))
