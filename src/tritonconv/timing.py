"""The timers: :func:`median_ms`, the wall time of a call as a user calling it in a loop feels
it (the benchmark suites, ``bench.time_ms``), and :func:`device_ms`, the GPU time of its
kernels alone (benchmark mode's choice among algorithms and tiles, ``choice.measured``)."""

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


# Cycles per second ``torch.cuda._sleep`` spins at, rounded up (H100/H200 boost clock ~2 GHz):
# a longer sleep than needed costs only time.
_SLEEP_CYCLES_PER_S = 2.2e9


def device_ms(fn: Callable[[int], object], reps: int, *, calls: int = 8, warmup: int = 1) -> float:
    """Median milliseconds per call of ``fn(i)`` on the GPU alone: each of ``reps`` samples
    queues ``calls`` calls behind a sleeping kernel long enough for the host to launch them
    all, so the events around them time the kernels back to back, not the host's launch work
    (on small layers the host takes longer than the kernels, and per-call events would time
    it: every configuration would look alike and noise would choose). Without CUDA,
    :func:`median_ms` (wall clock)."""
    if not torch.cuda.is_available():
        return median_ms(fn, reps, warmup=warmup)
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn(0)
    host = time.perf_counter() - start  # the host's share of a call (the GPU was idle)
    torch.cuda.synchronize()
    # twice the host's time for the calls, at most 50 ms (a call with more host work than
    # ~3 ms is timed with gaps: a host-bound call, whose GPU time hardly matters then)
    cycles = int(min(2 * host * calls + 50e-6, 0.05) * _SLEEP_CYCLES_PER_S)
    samples = []
    for _ in range(reps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(cycles)
        begin.record()
        for i in range(calls):
            fn(i)
        end.record()
        end.synchronize()
        samples.append(begin.elapsed_time(end) / calls)
    return statistics.median(samples)
