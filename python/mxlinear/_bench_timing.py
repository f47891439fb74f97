"""Timing helpers of ``python -m mxlinear.bench``: host time of an issue loop, and CUDA-graph
replays timed by events, the C++ bench's method for its figures (docs/PERFORMANCE.md, "How
`mxlinear bench` measures")."""

import math
import statistics
import time
from collections.abc import Callable

import torch


def median(samples: list[float]) -> float:
    return statistics.median(samples) if samples else math.nan


def host_seconds_per_call(issue: Callable[[], None], iters: int) -> float:
    """Host seconds per call of `iters` back-to-back calls of issue(): the device is idle when the
    loop starts, and only the loop is timed, not the wait for the work it queued. With few enough
    calls that the launch queue never fills, the host never waits on the GPU."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        issue()
    seconds = time.perf_counter() - start
    torch.cuda.synchronize()
    return seconds / iters


def rotation_copies(weight_bytes: int, l2_bytes: int, factor: float = 3.0) -> int:
    """Copies of a weight set so that one pass over them is at least `factor` times L2: every call
    then reads its weights from DRAM, as in a model far larger than L2."""
    if weight_bytes <= 0:
        return 1
    return max(2, math.ceil(factor * l2_bytes / weight_bytes))


def l2_bytes(device: torch.device) -> int:
    # Every torch build with CUDA reports it; 60 MiB (the H200's) if one does not.
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 60 << 20))


def graph_us_per_call(enqueue: Callable[[], None], calls: int, replays: int = 10,
                      warmup: int = 2) -> list[float]:
    """Captures enqueue() (which queues `calls` calls on the current stream) into one CUDA graph,
    replays it `warmup` times, then times `replays` replays with events. Returns microseconds per
    call of each timed replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        enqueue()  # outside the capture: selection caches, allocator blocks, lazy initialization
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        enqueue()
    for _ in range(warmup):
        graph.replay()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_call = []
    for _ in range(replays):
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        per_call.append(1000.0 * start.elapsed_time(stop) / calls)
    del graph
    return per_call
