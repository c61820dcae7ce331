"""Benchmarks: tritonconv against PyTorch (cuDNN, F.unfold/F.fold, slicing) in one process.

A *suite* is a generator of :class:`Row` registered with :func:`suite`; each op family keeps its
suite in its own module here (``conv.py``, ``direct.py``, ``crop.py``). :func:`time_ms` is the
one timer: CUDA-event medians after warm-up, cycling through several input sets so that caches
do not flatter anyone. On a machine without CUDA it falls back to wall-clock medians (the
interpreter's numbers say nothing about GPU speed; they only show the plumbing works).
"""

from __future__ import annotations

import contextlib
import cProfile
import json
import math
import pstats
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import torch

from ..timing import median_ms

SuiteFn = Callable[["Options"], Iterator["Row"]]
SUITES: dict[str, SuiteFn] = {}


def suite(name: str):
    """Register a suite function under ``name``."""

    def register(fn: SuiteFn) -> SuiteFn:
        SUITES[name] = fn
        return fn

    return register


@dataclass
class Options:
    reps: int = 50
    warmup: int = 10
    quick: bool = False  # smaller shapes, fewer reps (the CPU path and smoke runs)
    dtypes: tuple[str, ...] = ("float32",)
    cases: tuple[str, ...] = ()  # only these case names (empty: all)

    def wants(self, case: str) -> bool:
        return not self.cases or case in self.cases


@dataclass
class Row:
    """One measurement: ours against a reference on the same inputs, in the same process."""

    suite: str
    case: str
    shape: str
    op: str  # e.g. "fwd", "bwd (dX+dW)", "unfold"
    dtype: str
    ours_ms: float
    ref_ms: float | None
    ref_name: str
    work: float = 0.0  # FLOPs or bytes moved by one call
    unit: str = ""  # "TFLOP/s" or "GB/s"
    note: str = ""
    extra: dict = field(default_factory=dict)
    # GPU time of the same calls replayed from a CUDA graph (no host work): the kernels alone
    ours_kernel_ms: float | None = None
    ref_kernel_ms: float | None = None
    # memory-bound rows: their bandwidth (work / time, on kernel time where measured) over
    # that of a copy timed beside them
    of_copy: float | None = None

    @property
    def speedup(self) -> float | None:
        """Reference time over ours: above 1 means tritonconv is faster."""
        return None if not self.ref_ms else self.ref_ms / self.ours_ms

    @property
    def kernel_speedup(self) -> float | None:
        """The same ratio on kernel time (CUDA-graph replay), where both sides have it."""
        if not self.ref_kernel_ms or not self.ours_kernel_ms:
            return None
        return self.ref_kernel_ms / self.ours_kernel_ms

    @property
    def rate(self) -> float | None:
        if not self.work or not self.unit:
            return None
        per_second = self.work / (self.ours_ms * 1e-3)
        return per_second / (1e12 if self.unit == "TFLOP/s" else 1e9)


def input_sets(
    make: Callable[[], object], bytes_each: int, *, cache_bytes: int = 64 << 20, most: int = 8
):
    """Enough independent input sets that cycling through them overflows the L2 cache (2 to
    ``most``: a layer whose sets are smaller stays partly in L2)."""
    count = min(most, max(2, math.ceil(2 * cache_bytes / max(1, bytes_each))))
    return [make() for _ in range(count)]


#: Milliseconds one measurement (``time_ms``, ``kernel_ms``) should take at most: slow calls
#: get fewer repetitions (at least ``MIN_REPS``). cuDNN's 31x31 depthwise convolutions take
#: 19-32 ms a call in bf16 and more in fp32; at 50 repetitions, over 6 input sets replayed,
#: the depthwise suite's RepLKNet case alone ran past 300 s (session 33).
MEASURE_BUDGET_MS = 1500.0
MIN_REPS = 5


def _budget_reps(reps: int, call_ms: float) -> int:
    """``reps`` repetitions of a call taking ``call_ms``, fewer if they would overrun
    :data:`MEASURE_BUDGET_MS` (not under :data:`MIN_REPS` for that, nor more than asked)."""
    return min(reps, max(MIN_REPS, int(MEASURE_BUDGET_MS / max(call_ms, 1e-6))))


def _warm_ms(fn: Callable[[int], object], untimed: int, n_inputs: int) -> float:
    """Warm-up: ``untimed`` calls of ``fn`` (compilation, autotuning and benchmark-mode
    measurements happen there), then one timed pass over the ``n_inputs`` input sets; its
    milliseconds per call, synchronised (the host's own clock without CUDA)."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for i in range(untimed):
        fn(i % n_inputs)
    sync()
    start = time.perf_counter()
    for i in range(n_inputs):
        fn(i)
    sync()
    return (time.perf_counter() - start) * 1e3 / max(1, n_inputs)


def time_ms(fn: Callable[[int], object], n_inputs: int, opts: Options) -> float:
    """Median milliseconds of ``fn(i)``, ``i`` cycling over ``n_inputs`` input sets (fewer
    repetitions of slow calls: :data:`MEASURE_BUDGET_MS`)."""
    reps = max(3, opts.reps // 10) if opts.quick else opts.reps
    warmup = 1 if opts.quick else opts.warmup
    if torch.cuda.is_available():
        reps = _budget_reps(reps, _warm_ms(fn, warmup, n_inputs))
        warmup = 0
    return median_ms(fn, reps, warmup=warmup, inputs=n_inputs)


def loop_us(fn: Callable[[], object], calls: int = 200, warmup: int = 10) -> float:
    """Per-call µs of ``calls`` back-to-back calls of ``fn``, synchronised once at the end: the
    host's throughput, what a model's step feels when its kernels are shorter than the Python
    that launches them (the probes of the host path use it)."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls * 1e6


def profile_calls(fn: Callable[[], object], calls: int, top: int) -> pstats.Stats:
    """A cProfile of ``calls`` calls of ``fn`` (synchronised at the end), its top ``top``
    functions by internal time printed; returned for more views (callers)."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        fn()
    sync()
    profile.disable()
    stats = pstats.Stats(profile).sort_stats("tottime")
    stats.print_stats(top)
    return stats


def kernel_times(fn: Callable[[], object]) -> list[tuple[str, int, float]]:
    """(kernel name, launches, µs in all) of the GPU kernels one call of ``fn`` runs, after a
    warm-up call (torch.profiler; the probes of the host path list them beside their loops)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [
        (e.key, e.count, e.self_device_time_total)
        for e in prof.key_averages()
        if e.self_device_time_total > 0
    ]


@contextlib.contextmanager
def overridden(module, **values) -> Iterator[None]:
    """``module``'s constants set to ``values`` for a probe's variant (a tile rule's knob),
    tritonconv's caches and launch plans cleared on the way in and out so that no call
    replays what another setting recorded; restored afterwards."""
    from ..caches import clear_caches

    saved = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    clear_caches()
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
        clear_caches()


def kernel_ms(fn: Callable[[int], object], n_inputs: int, opts: Options) -> float | None:
    """Median milliseconds of ``fn(i)`` on the GPU alone: passes over the ``n_inputs`` input
    sets captured in a CUDA graph and replayed, so the host's launch work (done once, at
    capture) is not in the figure. None without CUDA or when ``fn`` cannot be captured.

    A graph replay costs the host several microseconds before its first kernel starts, and the
    events around it time that wait too: a graph holding one pass of a 5 µs kernel reads as
    ~15 µs. So the graph holds as many passes as make a replay last at least
    :data:`KERNEL_MS_GRAPH_US` (up to :data:`KERNEL_MS_MAX_PASSES`), measured from a first
    one-pass capture, and the time is divided by the passes (benchmarks/NOTES.md, session 9).

    ``time_ms`` is what a user calling ``fn`` feels; this is what the kernels cost. On layers
    whose kernels take less time than the host path the two differ, and both are reported."""
    if not torch.cuda.is_available():
        return None
    # warm up (compilation, cudnn.benchmark) outside capture
    call_ms = _warm_ms(fn, max(2, n_inputs), n_inputs)  # (a first untimed pass, then one timed)
    reps = max(3, opts.reps // 10) if opts.quick else max(5, opts.reps // 2)
    reps = _budget_reps(reps, call_ms * n_inputs)
    one_pass = _replay_ms(fn, n_inputs, 1, reps)
    if one_pass is None:
        return None
    passes = min(KERNEL_MS_MAX_PASSES, max(1, math.ceil(KERNEL_MS_GRAPH_US / 1000 / one_pass)))
    total = one_pass if passes == 1 else _replay_ms(fn, n_inputs, passes, reps)
    return None if total is None else total / (passes * n_inputs)


#: A replay of ``kernel_ms``'s graph lasts at least this long (µs), so the host's few
#: microseconds of replay latency are a small part of it ...
KERNEL_MS_GRAPH_US = 400
#: ... with at most this many passes over the input sets in the graph.
KERNEL_MS_MAX_PASSES = 64


def _replay_ms(fn, n_inputs: int, passes: int, reps: int) -> float | None:
    """Median ms of one replay of a graph holding ``passes`` passes of ``fn`` over the input
    sets; None (and a warning) when ``fn`` cannot be captured."""
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(passes):
                for i in range(n_inputs):
                    fn(i)
    except Exception as exc:  # a call that cannot be captured: the per-call figure stands alone
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        _end_failed_capture()
        name = getattr(fn, "__qualname__", repr(fn))
        warnings.warn(f"{name} could not be captured in a CUDA graph: {exc!r}", stacklevel=3)
        return None
    graph.replay()
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(reps)
    ]
    for start, end in events:
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    del graph
    return statistics.median(s.elapsed_time(e) for s, e in events)


def _end_failed_capture() -> None:
    """Put the CUDA random generators back in their normal state after a failed capture.

    A capture registers the generators (their offsets start counting for the graph); when the
    capture is invalidated, ``capture_end`` raises before it hands them back, and every later
    random op in the process fails ("Offset increment outside graph capture"). Capturing one
    trivial graph runs that hand-back."""
    with contextlib.suppress(Exception):
        repair = torch.cuda.CUDAGraph()
        with torch.cuda.graph(repair):
            torch.empty(1, device="cuda").zero_()
        del repair


def run(names: list[str], opts: Options, progress=None) -> list[Row]:
    """Run the named suites; ``progress(row)`` is called as each row is measured."""
    _load_suites()
    rows: list[Row] = []
    for name in names:
        for row in SUITES[name](opts):
            rows.append(row)
            if progress:
                progress(row)
    return rows


def _load_suites() -> None:
    """Import every module of this package: each registers its suites."""
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def suite_names() -> list[str]:
    _load_suites()
    return list(SUITES)


def environment() -> dict:
    info = {"torch": torch.__version__, "date": time.strftime("%Y-%m-%d")}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:  # pragma: no cover
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["cudnn"] = torch.backends.cudnn.version()
    else:
        info["gpu"] = "none (Triton interpreter on CPU)"
    return info


def _fmt(value, digits=3):
    return "—" if value is None else f"{value:.{digits}f}"


def _percent(value):
    return "—" if value is None else f"{value:.0%}"


def markdown(rows: list[Row], env: dict) -> str:
    lines = [
        f"Measured {env['date']} on {env['gpu']}; torch {env['torch']}, Triton "
        f"{env.get('triton', '?')}, cuDNN {env.get('cudnn', '—')}. *ms*: median per call "
        "(CUDA events around each call after warm-up, inputs rotated: what a caller feels); "
        "*kernel ms*: the same calls replayed from a CUDA graph (GPU time alone); speedup = "
        "reference time / ours (>1: ours faster).",
        "",
        "| suite | case | shape | op | dtype | ours ms | ref | ref ms | speedup | "
        "ours kernel ms | ref kernel ms | kernel speedup | ours rate | of copy |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rate = f"{r.rate:.1f} {r.unit}" if r.rate is not None else "—"
        lines.append(
            f"| {r.suite} | {r.case} | {r.shape} | {r.op} | {r.dtype} | {_fmt(r.ours_ms)} | "
            f"{r.ref_name} | {_fmt(r.ref_ms)} | {_fmt(r.speedup, 2)} | "
            f"{_fmt(r.ours_kernel_ms)} | {_fmt(r.ref_kernel_ms)} | {_fmt(r.kernel_speedup, 2)} | "
            f"{rate} | {_percent(r.of_copy)} |"
        )
    return "\n".join(lines) + "\n"


def to_json(rows: list[Row], env: dict) -> str:
    data = [
        dict(asdict(r), speedup=r.speedup, kernel_speedup=r.kernel_speedup, rate=r.rate)
        for r in rows
    ]
    return json.dumps({"environment": env, "rows": data}, indent=2)
