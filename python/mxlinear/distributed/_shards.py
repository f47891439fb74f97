"""Shard sizes and bounds, the process group, and owned copies of shard slices."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist


def even_splits(size: int, parts: int, unit: int = 1) -> list[int]:
    """Per-rank sizes of ``size`` split into ``parts`` contiguous shards of whole ``unit``s, as
    even as possible: the first ``(size / unit) % parts`` shards hold one unit more. ``size`` must
    be a multiple of ``unit``."""
    units, rest = divmod(size // unit, parts)
    return [(units + (1 if r < rest else 0)) * unit for r in range(parts)]


def _bounds(sizes: Sequence[int]) -> list[tuple[int, int]]:
    out, start = [], 0
    for s in sizes:
        out.append((start, start + s))
        start += s
    return out


def _resolve_splits(where: str, name: str, splits, total: int, world: int, unit: int,
                    axis: str) -> list[int]:
    """The per-rank sizes: ``splits`` checked, or the even split."""
    if splits is None:
        return even_splits(total, world, unit)
    if isinstance(splits, (str, bytes)) or not isinstance(splits, Sequence):
        raise TypeError(
            f"{where}: argument '{name}' is a {type(splits).__name__}; expected a list of "
            f"{world} per-rank sizes"
        )
    sizes = list(splits)
    if len(sizes) != world:
        raise ValueError(
            f"{where}: argument '{name}' has {len(sizes)} sizes; expected {world} (one per rank "
            "of the group)"
        )
    for r, s in enumerate(sizes):
        if not isinstance(s, int) or isinstance(s, bool) or s < 0:
            raise ValueError(
                f"{where}: argument '{name}' gives rank {r} the size {s!r}; expected an int >= 0"
            )
    if sum(sizes) != total:
        raise ValueError(
            f"{where}: argument '{name}' sums to {sum(sizes)}; expected {total} ({axis})"
        )
    if unit > 1:
        for r, (start, end) in enumerate(_bounds(sizes)):
            if (end - start) % unit != 0:
                raise ValueError(
                    f"{where}: rank {r}'s {axis} shard [{start}, {end}) has {end - start} "
                    f"columns; expected a multiple of {unit} (whole MX blocks)"
                )
    return sizes


def _group_info(where: str, group) -> tuple[object, int, int]:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            f"{where}: torch.distributed is not initialized; call "
            "torch.distributed.init_process_group first"
        )
    group = dist.group.WORLD if group is None else group
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError(f"{where}: argument 'group' does not contain this process")
    return group, rank, dist.get_world_size(group)


def _own(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy with its own storage, so a shard never keeps the full tensor alive."""
    return t.clone(memory_format=torch.contiguous_format)


