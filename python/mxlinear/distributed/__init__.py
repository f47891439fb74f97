"""Tensor-parallel MXFP8 linear layers over ``torch.distributed`` (docs/MXFP8.md, "Tensor
parallelism", in the source tree).

``ColumnParallelMXFP8Linear`` splits the output features N: rank r holds a contiguous block of
weight rows, their scale rows and bias entries, and computes its block of the output columns
(optionally all-gathered into the full output). ``RowParallelMXFP8Linear`` splits the reduction
dimension K at multiples of 32: rank r holds a contiguous K slice of whole MX blocks of the weight
and the matching scale columns, computes its partial product in float32, and the ranks all-reduce
(SUM) the partials in float32 before the bias is added once and the result is cast.

Both are inference-only modules whose local shard lives in buffers (``weight``, ``weight_scale``,
``bias``) as in ``MXFP8Linear``. Build them from the full tensors (``from_quantized``), from a
full ``nn.Linear`` (``from_linear``, which quantizes only the rank's part) or from a safetensors
checkpoint (``from_safetensors``, which reads only the rank's part of the file). Communication is
``torch.distributed``'s (any backend: gloo on CPU tensors, NCCL on CUDA tensors); the process
group defaults to the world group and the rank and world size are read from it.

Default shards: N rows (column) or K/32 blocks (row) split as evenly as possible, the first
``size % world`` ranks holding one more; ``n_splits`` / ``k_splits`` give explicit per-rank sizes
instead (a K size must be a multiple of 32). A shard may be empty when there are more ranks than
rows or blocks.
"""

from .column import ColumnParallelMXFP8Linear
from .row import RowParallelMXFP8Linear
from ._shards import even_splits

__all__ = ["ColumnParallelMXFP8Linear", "RowParallelMXFP8Linear", "even_splits"]
