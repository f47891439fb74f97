"""What the column- and row-parallel layers share: their options, their shard buffers, how they
are built from full tensors, an nn.Linear or a checkpoint, and how they load and print."""

from __future__ import annotations

import torch

import mxlinear  # the package's ops; looked up at call time

from ..nn import (
    BLOCK,
    _check_layer_options,
    _check_linear,
    _check_quantized,
    _MXFP8Buffers,
)
from ._safetensors import _read_checked, _SafetensorsLayer
from ._shards import _group_info, _own


class _ShardedMXFP8Linear(_MXFP8Buffers):
    """Buffers and module hooks shared by both layers (the local shard, as in MXFP8Linear)."""

    weight: torch.Tensor
    weight_scale: torch.Tensor
    bias: torch.Tensor | None

    def _init_common(self, where, in_features, out_features, group, out_dtype, activation,
                     batch_invariant, bias_dtype):
        _check_layer_options(where, in_features, out_features, bias_dtype, out_dtype, activation,
                             batch_invariant)
        self.group, self.rank, self.world_size = _group_info(where, group)
        self.in_features = in_features
        self.out_features = out_features
        self.out_dtype = out_dtype
        self.activation = activation
        self.batch_invariant = batch_invariant
        self.rule: str | None = None

    # The rank's part of the full tensors, as (rows, columns) slices of the weight [N, K] and of
    # the scales [N, K/32], and a slice of the bias [N]: rows for the column-parallel layer, K
    # columns (whole blocks) for the row-parallel one.
    def _weight_part(self) -> tuple[slice, slice]:
        raise NotImplementedError

    def _scale_part(self) -> tuple[slice, slice]:
        raise NotImplementedError

    def _bias_part(self) -> slice:
        raise NotImplementedError

    @classmethod
    def _from_quantized(cls, where, weight, weight_scale, bias, rule, layout: dict):
        n, k = _check_quantized(where, weight, weight_scale, bias)
        layer = cls(k, n, bias=bias is not None,
                    bias_dtype=bias.dtype if bias is not None else torch.float32, device="meta",
                    **layout)
        layer._set_shard(_own(weight[layer._weight_part()]),
                         _own(weight_scale[layer._scale_part()]),
                         None if bias is None else _own(bias[layer._bias_part()]))
        layer.rule = rule
        return layer

    @classmethod
    def _from_linear(cls, where, linear, rule, layout: dict):
        _check_linear(where, linear, rule)
        bias = linear.bias
        layer = cls(linear.in_features, linear.out_features, bias=bias is not None,
                    bias_dtype=bias.dtype if bias is not None else torch.float32, device="meta",
                    **layout)
        with torch.no_grad():
            w = linear.weight.detach()[layer._weight_part()]
            if w.numel() > 0:
                data, scales = mxlinear.quantize(w.contiguous(), rule)
            else:  # an empty shard (more ranks than rows or blocks)
                data = torch.empty(w.shape, dtype=torch.float8_e4m3fn, device=w.device)
                scales = torch.empty(w.shape[0], w.shape[1] // BLOCK, dtype=torch.uint8,
                                     device=w.device)
            layer._set_shard(data, scales,
                             None if bias is None else _own(bias.detach()[layer._bias_part()]))
        layer.rule = rule
        return layer

    @classmethod
    def _from_safetensors(cls, where, path, prefix, bias, device, layout: dict):
        stored = _SafetensorsLayer(where, path, prefix)
        n, k, has_bias = _read_checked(where, stored, bias)
        layer = cls(k, n, bias=has_bias, device="meta", **layout)
        w = stored.read("weight", *layer._weight_part())
        s = stored.read("weight_scale", *layer._scale_part())
        b = stored.read("bias", layer._bias_part()) if has_bias else None
        target = device if device is not None else "cpu"
        layer._set_shard(w.to(target), s.to(target), None if b is None else b.to(target))
        return layer

    def _refuse_gradients(self, x) -> None:
        """The layers are inference-only: their collectives are not differentiable, so an input
        that requires grad would get a gradient of this rank's part alone (or none), silently.
        Refused where autograd would record the call."""
        tensors = x if isinstance(x, tuple) else (x,)
        if torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in tensors
        ):
            raise RuntimeError(
                f"{type(self).__name__}: argument 'x' requires grad; expected an inference call "
                "(torch.no_grad() or torch.inference_mode()): the tensor-parallel layers' "
                "collectives pass no gradients"
            )

    def _check_as_the_shards_do(self, x, width: int | None, k: int, n: int, bias, out_dtype):
        """On a rank whose shard is empty (more ranks than rows or blocks), which computes
        nothing, the checks that ``mxlinear.linear`` makes of ``x`` on the ranks with a shard:
        without them a bad x raises there while this rank waits in the collective. The op checks
        stand-ins: x (a tensor or a (data, scales) pair) with its last dimension ``width`` (None:
        x's own) and an [n, k] weight, its scales and ``bias``'s [n]. First on the meta device,
        where its fake kernel checks x's shape and dtypes with its eager messages; then, since
        meta tensors have no device to compare, on the real devices with no rows, for which the
        op returns once its checks pass. Neither reads a stand-in: the weights are one element
        each, expanded."""
        quantized = isinstance(x, tuple)
        for device in ("meta", None):  # None: each tensor's own device

            def like(t, last):
                if not isinstance(t, torch.Tensor):
                    return t  # the op refuses it as it is
                if t.dim() == 0:
                    shape = ()
                else:
                    last = t.shape[-1] if last is None else last
                    shape = (*t.shape[:-1], last) if device == "meta" else (0, last)
                return torch.empty(shape, dtype=t.dtype, device=device or t.device)

            def expanded(t, *shape):
                return torch.empty((1,) * len(shape), dtype=t.dtype,
                                   device=device or t.device).expand(*shape)

            if quantized and len(x) == 2:
                scale_width = None if width is None else width // BLOCK
                stand_in = (like(x[0], width), like(x[1], scale_width))
            else:
                stand_in = like(x, width)
            mxlinear.linear(stand_in, expanded(self.weight, n, k),
                            expanded(self.weight_scale, n, k // BLOCK),
                            None if bias is None else expanded(bias, n),
                            out_dtype, None if quantized else self.activation,
                            batch_invariant=self.batch_invariant)

    def _set_shard(self, weight, weight_scale, bias) -> None:
        self.weight = weight
        self.weight_scale = weight_scale.view(torch.uint8)
        self.bias = bias

    def _extra(self) -> str:
        return self._options_repr(f"rank={self.rank}/{self.world_size}")
