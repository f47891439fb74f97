"""``ColumnParallelMXFP8Linear``: N split over the ranks."""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
import torch.distributed as dist

import mxlinear  # the package's ops; looked up at call time

from ._base import _ShardedMXFP8Linear
from ._shards import _bounds, _resolve_splits


class ColumnParallelMXFP8Linear(_ShardedMXFP8Linear):
    """Output-feature (N) parallel ``mxlinear.linear``: rank r holds weight rows
    ``[n_start, n_end)``, the same scale rows and bias entries, and computes those output columns.

    Buffers: ``weight`` float8_e4m3fn [n_local, K], ``weight_scale`` uint8 [n_local, K/32],
    ``bias`` [n_local] or None. ``n_splits`` (per-rank sizes, summing to N) overrides the even
    split (sizes differ by at most one row, the first ``N % world`` ranks holding the extra row).

    ``forward(x)`` takes the full input x [..., K] (or a pre-quantized ``(data, scales)`` pair)
    on every rank and returns the rank's columns [..., n_local], or with ``gather_output=True``
    the full [..., N] output, all-gathered over the group (every rank gets it). Each output
    column is computed exactly as the unsharded layer computes it, so the gathered output equals
    the unsharded one bit for bit (same kernel numerics per column; on CPU always).

    ``activation``, ``batch_invariant`` and ``out_dtype`` are per-layer attributes as in
    ``MXFP8Linear``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        group=None,
        n_splits: Sequence[int] | None = None,
        gather_output: bool = False,
        bias_dtype: torch.dtype = torch.float32,
        out_dtype: torch.dtype | None = None,
        activation: str | None = None,
        batch_invariant: bool | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        where = "ColumnParallelMXFP8Linear"
        self._init_common(where, in_features, out_features, group, out_dtype, activation,
                          batch_invariant, bias_dtype)
        self.n_splits = _resolve_splits(where, "n_splits", n_splits, out_features,
                                        self.world_size, 1, "N")
        self.n_start, self.n_end = _bounds(self.n_splits)[self.rank]
        self.gather_output = bool(gather_output)
        self._register_weight_buffers(self.n_end - self.n_start, in_features, bias, bias_dtype,
                                      device)

    @classmethod
    def from_quantized(
        cls,
        weight: torch.Tensor,
        weight_scale: torch.Tensor,
        bias: torch.Tensor | None = None,
        *,
        group=None,
        n_splits: Sequence[int] | None = None,
        gather_output: bool = False,
        out_dtype: torch.dtype | None = None,
        rule: str | None = None,
        activation: str | None = None,
        batch_invariant: bool | None = None,
    ) -> "ColumnParallelMXFP8Linear":
        """The rank's shard of the full tensors ``weight`` float8_e4m3fn [N, K], ``weight_scale``
        uint8 or float8_e8m0fnu [N, K/32] and ``bias`` [N] (copied: the shard does not keep the
        full tensors alive)."""
        layout = dict(group=group, n_splits=n_splits, gather_output=gather_output,
                      out_dtype=out_dtype, activation=activation, batch_invariant=batch_invariant)
        return cls._from_quantized("ColumnParallelMXFP8Linear.from_quantized",
                                   weight, weight_scale, bias, rule, layout)

    @classmethod
    def from_linear(
        cls,
        linear: torch.nn.Linear,
        rule: str = "rceil",
        *,
        group=None,
        n_splits: Sequence[int] | None = None,
        gather_output: bool = False,
        out_dtype: torch.dtype | None = None,
        activation: str | None = None,
        batch_invariant: bool | None = None,
    ) -> "ColumnParallelMXFP8Linear":
        """Quantizes the rank's rows of ``linear.weight`` with ``mxlinear.quantize(rows, rule)``
        (as ``MXFP8Linear.from_linear`` does the whole weight: quantization works row by row, so
        the rows are the same bytes) and copies its bias entries."""
        layout = dict(group=group, n_splits=n_splits, gather_output=gather_output,
                      out_dtype=out_dtype, activation=activation, batch_invariant=batch_invariant)
        return cls._from_linear("ColumnParallelMXFP8Linear.from_linear", linear, rule, layout)

    @classmethod
    def from_safetensors(
        cls,
        path: str | os.PathLike,
        prefix: str,
        *,
        group=None,
        n_splits: Sequence[int] | None = None,
        gather_output: bool = False,
        bias: bool = True,
        device: torch.device | str | None = None,
        out_dtype: torch.dtype | None = None,
        activation: str | None = None,
        batch_invariant: bool | None = None,
    ) -> "ColumnParallelMXFP8Linear":
        """Reads only the rank's rows of ``<prefix>.weight`` (float8_e4m3fn [N, K]) and
        ``<prefix>.weight_scale`` (uint8 or float8_e8m0fnu [N, K/32]), and of ``<prefix>.bias``
        where stored (and ``bias`` is True), from ``path``: one ``.safetensors`` file or a
        checkpoint directory (the names the ModelOpt and compressed-tensors layouts use, see
        ``mxlinear.checkpoints``; each tensor from the file ``load_mxfp8`` reads it from). The
        full weight is never materialised. Tensors go to ``device`` (default CPU). Missing
        tensors, wrong dtypes or shapes, a file that is not valid safetensors and a tensor whose
        data cannot be read raise CheckpointError naming the tensor or the file.
        """
        layout = dict(group=group, n_splits=n_splits, gather_output=gather_output,
                      out_dtype=out_dtype, activation=activation, batch_invariant=batch_invariant)
        return cls._from_safetensors("ColumnParallelMXFP8Linear.from_safetensors",
                                     path, prefix, bias, device, layout)

    def _weight_part(self) -> tuple[slice, slice]:
        return slice(self.n_start, self.n_end), slice(None)

    def _scale_part(self) -> tuple[slice, slice]:
        return slice(self.n_start, self.n_end), slice(None)

    def _bias_part(self) -> slice:
        return slice(self.n_start, self.n_end)

    def forward(self, x: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """``x`` [..., K] (every rank passes the full input) or a pre-quantized ``(data, scales)``
        pair. Returns [..., n_local], or [..., N] with ``gather_output``."""
        self._refuse_gradients(x)
        quantized = isinstance(x, tuple)
        activation = None if quantized else self.activation
        if self.weight.shape[0] > 0:
            out = mxlinear.linear(x, self.weight, self.weight_scale, self.bias, self.out_dtype,
                                  activation, batch_invariant=self.batch_invariant)
        else:  # an empty shard (more ranks than rows), once x passes the other ranks' checks
            self._check_as_the_shards_do(x, None, self.in_features, max(self.n_splits),
                                         self.bias, self.out_dtype)
            lead = (x[0] if quantized else x).shape[:-1]
            dtype = self.out_dtype or (torch.bfloat16 if quantized else x.dtype)
            out = torch.empty(*lead, 0, dtype=dtype, device=self.weight.device)
        if not self.gather_output or self.world_size == 1:
            return out
        return self._gather(out)

    def _gather(self, out: torch.Tensor) -> torch.Tensor:
        # all_gather wants equal sizes on every backend: pad each rank's columns to the largest
        # shard, gather, then keep each rank's own columns.
        widest = max(self.n_splits)
        local = out
        if out.shape[-1] < widest:
            pad = out.new_zeros(*out.shape[:-1], widest - out.shape[-1])
            local = torch.cat([out, pad], dim=-1)
        local = local.contiguous()
        parts = [torch.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(parts, local, group=self.group)
        return torch.cat([p[..., :s] for p, s in zip(parts, self.n_splits)], dim=-1)

    def extra_repr(self) -> str:
        return (self._extra() + f", n_shard=[{self.n_start}, {self.n_end})"
                + f", gather_output={self.gather_output}")
