"""What the column- and row-parallel layers share: their options, their shard buffers and how
they load and print."""

from __future__ import annotations

import torch


from ..nn import (
    BLOCK,
    _FLOAT_DTYPES,
    _SCALE_DTYPES,
    _check_activation,
    _check_batch_invariant,
    _check_out_dtype,
    _dtype_names,
)
from ._shards import _group_info


class _ShardedMXFP8Linear(torch.nn.Module):
    """Buffers and module hooks shared by both layers (the local shard, as in MXFP8Linear)."""

    weight: torch.Tensor
    weight_scale: torch.Tensor
    bias: torch.Tensor | None

    def _init_common(self, where, in_features, out_features, group, out_dtype, activation,
                     batch_invariant, bias_dtype):
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(
                    f"{where}: argument '{name}' is a {type(value).__name__}; expected an int"
                )
        if in_features <= 0 or in_features % BLOCK != 0:
            raise ValueError(
                f"{where}: argument 'in_features' is {in_features}; expected a positive multiple "
                f"of {BLOCK} (the MX block size)"
            )
        if out_features <= 0:
            raise ValueError(f"{where}: argument 'out_features' is {out_features}; expected >= 1")
        if bias_dtype not in _FLOAT_DTYPES:
            raise TypeError(
                f"{where}: argument 'bias_dtype' is {bias_dtype}; expected one of "
                f"{_dtype_names(_FLOAT_DTYPES)}"
            )
        _check_out_dtype(where, out_dtype)
        _check_activation(where, activation)
        _check_batch_invariant(where, batch_invariant)
        self.group, self.rank, self.world_size = _group_info(where, group)
        self.in_features = in_features
        self.out_features = out_features
        self.out_dtype = out_dtype
        self.activation = activation
        self.batch_invariant = batch_invariant
        self.rule: str | None = None

    def _set_shard(self, weight, weight_scale, bias) -> None:
        self.weight = weight
        self.weight_scale = weight_scale.view(torch.uint8)
        self.bias = bias

    def _apply(self, fn, recurse=True):
        # As in MXFP8Linear: .to(dtype) must never convert the float8 weight.
        self._buffers["weight"] = self._buffers["weight"].view(torch.uint8)
        try:
            return super()._apply(fn, recurse)
        finally:
            self._buffers["weight"] = self._buffers["weight"].view(torch.float8_e4m3fn)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        weight_key, scale_key = prefix + "weight", prefix + "weight_scale"
        weight = state_dict.get(weight_key)
        if isinstance(weight, torch.Tensor) and weight.dtype != torch.float8_e4m3fn:
            error_msgs.append(f"'{weight_key}' has dtype {weight.dtype}; expected float8_e4m3fn")
            return
        scale = state_dict.get(scale_key)
        if isinstance(scale, torch.Tensor):
            if scale.dtype not in _SCALE_DTYPES:
                error_msgs.append(
                    f"'{scale_key}' has dtype {scale.dtype}; expected uint8 or float8_e8m0fnu"
                )
                return
            state_dict[scale_key] = scale.view(torch.uint8)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def _extra(self) -> str:
        out = "input" if self.out_dtype is None else str(self.out_dtype).removeprefix("torch.")
        bias = "None" if self.bias is None else str(self.bias.dtype).removeprefix("torch.")
        text = (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={bias}, "
            f"rank={self.rank}/{self.world_size}, out_dtype={out}"
        )
        if self.activation is not None:
            text += f", activation={self.activation}"
        if self.batch_invariant is not None:
            text += f", batch_invariant={self.batch_invariant}"
        return text
