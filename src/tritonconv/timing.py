"""The one wall-clock timer: benchmark mode (``choice.measured``) and the benchmark suites
(``bench.time_ms``) both time calls with it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def median_ms(fn: Callable[[int], object], reps: int, *, warmup: int = 1, inputs: int = 1) -> float:
    """Median milliseconds of ``fn(i)`` over ``reps`` calls, ``i`` cycling over ``inputs``
    input sets, after ``warmup`` untimed calls. On CUDA each call sits between two events (all
    recorded first, one synchronisation at the end: what a user calling ``fn`` in a loop
    feels, host path included); without CUDA, ``time.perf_counter`` around each call."""
    for i in range(warmup):
        fn(i % inputs)
    if not torch.cuda.is_available():
        times = []
        for i in range(reps):
            start = time.perf_counter()
            fn(i % inputs)
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)
    torch.cuda.synchronize()
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(reps)
    ]
    for i, (start, end) in enumerate(events):
        start.record()
        fn(i % inputs)
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)
