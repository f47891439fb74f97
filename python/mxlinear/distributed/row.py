"""``RowParallelMXFP8Linear``: K split over the ranks at multiples of 32."""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
import torch.distributed as dist

import mxlinear  # the package's ops; looked up at call time

from ..nn import BLOCK
from ._base import _ShardedMXFP8Linear
from ._shards import _bounds, _resolve_splits


class RowParallelMXFP8Linear(_ShardedMXFP8Linear):
    """Reduction-dimension (K) parallel ``mxlinear.linear``: rank r holds weight columns
    ``[k_start, k_end)`` (whole MX blocks: both multiples of 32) and scale columns
    ``[k_start/32, k_end/32)``; every rank holds the full bias.

    Buffers: ``weight`` float8_e4m3fn [N, k_local], ``weight_scale`` uint8 [N, k_local/32],
    ``bias`` [N] or None. The default split gives each rank K/32/world blocks, the first
    ``(K/32) % world`` ranks one more; ``k_splits`` (per-rank sizes, each a multiple of 32,
    summing to K) overrides it, and a size that is not a multiple of 32 raises ValueError naming
    the rank and its shard.

    ``forward(x)``: with ``input_is_parallel=False`` (the default) x is the full [..., K] input
    and the layer takes its K slice; with True x is the rank's slice [..., k_local]. Each rank
    computes its partial product without bias as float32 (``mxlinear.linear(...,
    out_dtype=torch.float32)``), the partials are all-reduced (SUM) in float32 over the group,
    then the bias is added once (in float32) and the sum cast to ``out_dtype`` (default: x's
    dtype, bfloat16 for a pre-quantized input). Every rank returns the full [..., N] output.

    W8A8: each rank MX-quantizes its own K slice of the activation. This is the same as
    quantizing the whole activation and slicing it: an MX block is 32 consecutive K elements with
    one scale computed from those 32 only, and a cut at a multiple of 32 never splits a block, so
    every block, its scale and its elements, is the same either way.

    The result differs from the unsharded layer's only by fp32 rounding: the per-rank rounding of
    each partial, the all-reduce's additions and the bias add (docs/MXFP8.md, "Tensor
    parallelism", derives the bound). ``batch_invariant`` applies to each rank's partial; the
    all-reduce sums each element's R partials in an order the backend chooses, which may depend
    on the tensor's size.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        group=None,
        k_splits: Sequence[int] | None = None,
        input_is_parallel: bool = False,
        bias_dtype: torch.dtype = torch.float32,
        out_dtype: torch.dtype | None = None,
        activation: str | None = None,
        batch_invariant: bool | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        where = "RowParallelMXFP8Linear"
        self._init_common(where, in_features, out_features, group, out_dtype, activation,
                          batch_invariant, bias_dtype)
        self.k_splits = _resolve_splits(where, "k_splits", k_splits, in_features,
                                        self.world_size, BLOCK, "K")
        self.k_start, self.k_end = _bounds(self.k_splits)[self.rank]
        self.input_is_parallel = bool(input_is_parallel)
        # Every rank holds all N rows of its K slice, and the whole bias (added once, after the
        # reduction).
        self._register_weight_buffers(out_features, self.k_end - self.k_start, bias, bias_dtype,
                                      device)

    @classmethod
    def from_quantized(
        cls,
        weight: torch.Tensor,
        weight_scale: torch.Tensor,
        bias: torch.Tensor | None = None,
        *,
        group=None,
        k_splits: Sequence[int] | None = None,
        input_is_parallel: bool = False,
        out_dtype: torch.dtype | None = None,
        rule: str | None = None,
        activation: str | None = None,
        batch_invariant: bool | None = None,
    ) -> "RowParallelMXFP8Linear":
        """The rank's K slice of the full tensors ``weight`` float8_e4m3fn [N, K] and
        ``weight_scale`` [N, K/32] (copied), and a copy of the full ``bias`` [N]."""
        layout = dict(group=group, k_splits=k_splits, input_is_parallel=input_is_parallel,
                      out_dtype=out_dtype, activation=activation, batch_invariant=batch_invariant)
        return cls._from_quantized("RowParallelMXFP8Linear.from_quantized",
                                   weight, weight_scale, bias, rule, layout)

    @classmethod
    def from_linear(
        cls,
        linear: torch.nn.Linear,
        rule: str = "rceil",
        *,
        group=None,
        k_splits: Sequence[int] | None = None,
        input_is_parallel: bool = False,
        out_dtype: torch.dtype | None = None,
        activation: str | None = None,
        batch_invariant: bool | None = None,
    ) -> "RowParallelMXFP8Linear":
        """Quantizes the rank's K slice of ``linear.weight`` with ``mxlinear.quantize(slice,
        rule)``: the same bytes as the slice of ``MXFP8Linear.from_linear``'s weight, since the
        cut never splits an MX block. Copies the full bias."""
        layout = dict(group=group, k_splits=k_splits, input_is_parallel=input_is_parallel,
                      out_dtype=out_dtype, activation=activation, batch_invariant=batch_invariant)
        return cls._from_linear("RowParallelMXFP8Linear.from_linear", linear, rule, layout)

    @classmethod
    def from_safetensors(
        cls,
        path: str | os.PathLike,
        prefix: str,
        *,
        group=None,
        k_splits: Sequence[int] | None = None,
        input_is_parallel: bool = False,
        bias: bool = True,
        device: torch.device | str | None = None,
        out_dtype: torch.dtype | None = None,
        activation: str | None = None,
        batch_invariant: bool | None = None,
    ) -> "RowParallelMXFP8Linear":
        """Reads only the rank's K columns of ``<prefix>.weight`` and its K/32 scale columns of
        ``<prefix>.weight_scale`` from ``path`` (one ``.safetensors`` file or a checkpoint
        directory, each tensor from the file ``load_mxfp8`` reads it from), and the full
        ``<prefix>.bias`` where stored (and ``bias`` is True). Tensors go to ``device`` (default
        CPU). Missing tensors, wrong dtypes or shapes, a file that is not valid safetensors and a
        tensor whose data cannot be read raise CheckpointError naming the tensor or the file."""
        layout = dict(group=group, k_splits=k_splits, input_is_parallel=input_is_parallel,
                      out_dtype=out_dtype, activation=activation, batch_invariant=batch_invariant)
        return cls._from_safetensors("RowParallelMXFP8Linear.from_safetensors",
                                     path, prefix, bias, device, layout)

    def _weight_part(self) -> tuple[slice, slice]:
        return slice(None), slice(self.k_start, self.k_end)

    def _scale_part(self) -> tuple[slice, slice]:
        return slice(None), slice(self.k_start // BLOCK, self.k_end // BLOCK)

    def _bias_part(self) -> slice:
        return slice(None)

    def _local_input(self, x):
        k0, k1 = self.k_start, self.k_end
        if isinstance(x, tuple):
            if len(x) != 2:
                raise TypeError(
                    f"RowParallelMXFP8Linear: argument 'x' is a tuple of {len(x)} items; "
                    "expected a tensor or a (data, scales) pair"
                )
            data, scales = x
            if self.input_is_parallel:
                return x, data.shape[:-1], data.shape[-1]
            return ((data[..., k0:k1].contiguous(),
                     scales[..., k0 // BLOCK:k1 // BLOCK].contiguous()),
                    data.shape[:-1], data.shape[-1])
        if self.input_is_parallel:
            return x, x.shape[:-1], x.shape[-1]
        return x[..., k0:k1].contiguous(), x.shape[:-1], x.shape[-1]

    def partial_sum(self, x: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """The rank's float32 partial [..., N] of the output: its K slice of ``x`` (as
        ``forward`` takes it) times its weight shard, before the all-reduce and without the
        bias."""
        quantized = isinstance(x, tuple)
        local, lead, width = self._local_input(x)
        want = (self.k_end - self.k_start) if self.input_is_parallel else self.in_features
        if width != want:
            what = "the rank's K slice" if self.input_is_parallel else "K"
            raise ValueError(
                f"RowParallelMXFP8Linear: argument 'x' has {width} columns; expected {want} "
                f"({what}, input_is_parallel={self.input_is_parallel}, rank {self.rank})"
            )
        if quantized:
            # Every rank checks the whole pair: a rank that sliced too few scale columns would
            # raise alone, and the others would wait in the all-reduce.
            data, scales = x
            expected = [*data.shape[:-1], width // BLOCK]
            if isinstance(scales, torch.Tensor) and list(scales.shape) != expected:
                raise ValueError(
                    f"RowParallelMXFP8Linear: argument 'x' is a (data, scales) pair whose scales "
                    f"have shape {list(scales.shape)}; expected {expected} (data's shape with "
                    f"{width}/32 last; data is {list(data.shape)}, rank {self.rank})"
                )
        if self.k_end > self.k_start:
            partial = mxlinear.linear(local, self.weight, self.weight_scale, None, torch.float32,
                                      None if quantized else self.activation,
                                      batch_invariant=self.batch_invariant)
        else:  # an empty K shard (more ranks than blocks) contributes zeros, once x passes the
            # checks the other ranks' calls make of their one-block-or-more slices
            self._check_as_the_shards_do(x, BLOCK, BLOCK, self.out_features, None, torch.float32)
            partial = torch.zeros(*lead, self.out_features, dtype=torch.float32,
                                  device=self.weight.device)
        return partial.contiguous()

    def forward(self, x: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """``x``: the full input [..., K] (``input_is_parallel=False``) or the rank's slice
        [..., k_local], or a pre-quantized ``(data, scales)`` pair of either. Returns the full
        [..., N] output on every rank."""
        self._refuse_gradients(x)
        partial = self.partial_sum(x)
        dtype = self.out_dtype or (torch.bfloat16 if isinstance(x, tuple) else x.dtype)
        if self.world_size > 1:
            dist.all_reduce(partial, op=dist.ReduceOp.SUM, group=self.group)
        if self.bias is not None:
            partial = partial + self.bias.to(torch.float32)
        return partial.to(dtype)

    def extra_repr(self) -> str:
        return (self._extra() + f", k_shard=[{self.k_start}, {self.k_end})"
                + f", input_is_parallel={self.input_is_parallel}")
