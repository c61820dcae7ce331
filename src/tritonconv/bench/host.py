"""Suite ``host``: what a call costs end to end, eager and under ``torch.compile`` (issue 10).

1. Eager per-call wall time of four batch-1 layers, ours (``algo="auto"``) against
   ``F.conv2d`` (cuDNN): forward, and forward + backward (``y.backward(dy)`` with input, weight
   and bias gradients). Each call is timed alone, from the Python call to the end of a
   ``torch.cuda.synchronize()``, median of ``reps``: what a user feels for one small layer.
   Beside it: the host's cost per call in a loop synchronised only at the end (what a network
   of many small layers pays once the GPU keeps up), and the GPU kernel time of one call
   (torch.profiler: the sum of its kernels; events around host-bound calls would time the
   host).
2. A stack of 8 convolutions + ReLU, compiled with ``torch.compile`` in the default mode and in
   ``mode="reduce-overhead"`` (CUDA graphs), ours against the same stack of ``torch.nn.Conv2d``:
   both compiled, then timed in alternation, per-call wall and per call in a loop.
3. ResNet-50-style bottleneck blocks (batch 8, bf16 channels-last, inference): eager and
   compiled, ours and cuDNN, with the compile time of each.

Compile times here are first calls in one process, after one small compile of PyTorch's own
convolution has paid what any first compile pays (Inductor's imports and worker pool); ours
compile first, so what is left of a process's first-compile costs counts against ours.
``benchmarks/probe_compile_time.py`` measures them in fresh processes, cold and warm caches.

On a machine without CUDA everything runs through Triton's interpreter on toy shapes and the
compiled rows use the ``aot_eager`` backend (no CUDA-graph row): the numbers only show that the
plumbing works.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .. import functional
from .. import nn as tnn
from ..testing import DEVICE
from . import Options, Row, suite

CUDA = DEVICE == "cuda"


@dataclass(frozen=True)
class HostCase:
    name: str
    input: tuple[int, int, int, int]
    weight: tuple[int, int, int, int]
    dtype: torch.dtype
    channels_last: bool
    padding: int | str = 0
    groups: int = 1

    def shape(self) -> str:
        N, C, H, W = self.input
        K, _, R, S = self.weight
        layout = "NHWC" if self.channels_last else "NCHW"
        groups = f" g{self.groups}" if self.groups > 1 else ""
        return f"N{N} C{C} {H}×{W} → K{K} {R}×{S}{groups} {layout}"


HOST_CASES = [
    HostCase("seed_1ch_112", (1, 1, 112, 112), (1, 1, 3, 3), torch.float32, False, "same"),
    HostCase("r50_3x3_64_56", (1, 64, 56, 56), (64, 64, 3, 3), torch.bfloat16, True, 1),
    HostCase("dw3x3_96_56", (1, 96, 56, 56), (96, 1, 3, 3), torch.bfloat16, True, 1, 96),
    HostCase("r50_1x1_256_14", (1, 256, 14, 14), (1024, 256, 1, 1), torch.bfloat16, True),
]
# Toy versions for the interpreter (same layouts and dtypes, tiny planes and channels).
QUICK_CASES = [
    HostCase("seed_1ch_112", (1, 1, 12, 12), (1, 1, 3, 3), torch.float32, False, "same"),
    HostCase("r50_3x3_64_56", (1, 8, 6, 6), (8, 8, 3, 3), torch.bfloat16, True, 1),
    HostCase("dw3x3_96_56", (1, 8, 6, 6), (8, 1, 3, 3), torch.bfloat16, True, 1, 8),
    HostCase("r50_1x1_256_14", (1, 16, 4, 4), (32, 16, 1, 1), torch.bfloat16, True),
]


class EmptyFunction(torch.autograd.Function):
    """An autograd Function that only saves its inputs: the engine's floor for an op written in
    Python (the host probes time it beside ours)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return torch.empty_like(x), torch.empty_like(w)


def floor_steps(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> dict:
    """Forward + backward of the two floors a convolution's training step is measured against,
    by name: an empty autograd Function of ``x`` and ``w``, and a native op (``neg``) of ``x``;
    ``x`` and ``w`` require gradients, ``dy`` is ``x``'s shape."""

    def empty():
        x.grad = w.grad = None
        EmptyFunction.apply(x, w).backward(dy)

    def native():
        x.grad = None
        x.neg().backward(dy)

    return {"empty Function fwd+bwd": empty, "native op (neg) fwd+bwd": native}


@contextlib.contextmanager
def launches_replaced(make: Callable[[Callable, str], Callable]):
    """Within the block every compiled launch calls what ``make(launcher, kernel name)``
    returns in place of ``launcher``, with its arguments: a replay's kept arguments
    (``launch._ready``, and the first launch that keeps them: Triton's C launcher and its
    argument tuple) and a cached launch through Triton's own wrapper
    (``launch._run_compiled``: a launcher of no arguments) alike. Benchmark tools use it to
    time the launches by kernel, or to drop them all (``make`` returning a no-op: what is
    left is the host path's Python and allocations). Not replaced: a signature's first
    launches, which go through Triton's ``kernel[grid]`` (to compile, then to find the
    compiled kernel): warm the calls up first. Blocks nest."""
    from .. import launch

    ready = launch._ready
    # (what is in force now, an outer block's included, is what each exit restores)
    outer_get = vars(ready).get("get")
    run_compiled, launch_kept = launch._run_compiled, launch._launch_kept
    kept_get = outer_get or ready.get

    def get(key):
        kept = kept_get(key)
        if kept is None:
            return None
        return make(kept[0], launch.kernel_name(key[0].kernel)), kept[1]

    def first(step, kept):
        make(kept[0], launch.kernel_name(step.kernel))(*kept[1])

    def compiled(entry, grid, stream, args):
        name = launch.kernel_name(getattr(entry[0], "name", entry[0]))
        make(lambda *a: run_compiled(entry, grid, stream, args), name)()

    ready.get = get  # (the instance's, over BoundedCache.get)
    launch._run_compiled, launch._launch_kept = compiled, first
    try:
        yield
    finally:
        if outer_get is None:
            del ready.get
        else:
            ready.get = outer_get
        launch._run_compiled, launch._launch_kept = run_compiled, launch_kept


def make_case(case: HostCase, device: str, *, requires_grad: bool):
    """(input, weight, bias, kwargs) of a case, fresh random values."""
    fmt = torch.channels_last if case.channels_last else torch.contiguous_format
    x = torch.randn(case.input, device=device).to(case.dtype, memory_format=fmt)
    w = torch.randn(case.weight, device=device).to(case.dtype)
    b = torch.randn(case.weight[0], device=device).to(case.dtype)
    for t in (x, w, b):
        t.requires_grad_(requires_grad)
    return x, w, b, dict(padding=case.padding, groups=case.groups)


def _sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def _block_us(fn: Callable[[], object], calls: int) -> float:
    """µs per call of ``calls`` back-to-back calls of ``fn``, synchronised at the end."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync()
    return (time.perf_counter() - start) / calls * 1e6


def paired_us(fns: dict, opts: Options, *, block: int) -> dict:
    """Median µs per call of each function, measured in alternation (A, B, A, B, ...) so that
    a noisy shared machine slows both alike. ``block=1``: each sample is one call to a
    synchronised GPU (the wall time of one call); ``block > 1``: each sample is ``block``
    back-to-back calls synchronised once (the host's cost per call once the GPU keeps up)."""
    samples = 5 if opts.quick else max(60, 2 * opts.reps) // (1 if block == 1 else 4)
    for fn in fns.values():
        for _ in range(3 if opts.quick else 10):
            fn()
    _sync()
    times: dict = {name: [] for name in fns}
    for _ in range(samples):
        for name, fn in fns.items():
            times[name].append(_block_us(fn, block))
    return {name: statistics.median(t) for name, t in times.items()}


def wall_us(fn: Callable[[], object], opts: Options) -> float:
    """Median µs of one call of ``fn`` from the Python call to a synchronised GPU."""
    return paired_us({"fn": fn}, opts, block=1)["fn"]


def kernel_us(fn: Callable[[], object], calls: int = 20) -> float | None:
    """GPU µs per call of ``fn``: its kernels' total time under torch.profiler (CUDA only)."""
    if not CUDA:
        return None
    fn()
    _sync()
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        _sync()
    return sum(e.self_device_time_total for e in prof.key_averages()) / calls


def _eager_rows(opts: Options) -> Iterator[Row]:
    for case in QUICK_CASES if opts.quick else HOST_CASES:
        if opts.wants(case.name):
            yield from _case_rows(case, opts)


def _case_rows(case: HostCase, opts: Options) -> Iterator[Row]:
    x, w, b, kwargs = make_case(case, DEVICE, requires_grad=False)
    xg, wg, bg, _ = make_case(case, DEVICE, requires_grad=True)
    dy = torch.randn_like(F.conv2d(x, w, b, **kwargs))
    dtype = str(case.dtype).removeprefix("torch.")
    functions = {"ours": functional.conv2d, "ref": F.conv2d}

    def forward(conv):
        return lambda: conv(x, w, b, **kwargs)

    def forward_backward(conv):
        def step():
            for t in (xg, wg, bg):
                t.grad = None
            conv(xg, wg, bg, **kwargs).backward(dy)

        return step

    with torch.no_grad():
        forwards = {k: forward(f) for k, f in functions.items()}
        fwd = paired_us(forwards, opts, block=1)
        loop = paired_us(forwards, opts, block=20)
        kernel = {k: kernel_us(f) for k, f in forwards.items()}
    steps = {k: forward_backward(f) for k, f in functions.items()}
    both = paired_us(steps, opts, block=1)
    both_loop = paired_us(steps, opts, block=10)
    common = dict(suite="host", case=case.name, shape=case.shape(), dtype=dtype)
    ref = "F.conv2d" if CUDA else "F.conv2d (CPU)"
    rows = [
        ("fwd wall", fwd),
        ("fwd host/call (loop)", loop),
        ("fwd GPU kernels", kernel),
        ("fwd+bwd wall", both),
        ("fwd+bwd host/call (loop)", both_loop),
    ]
    for op, times in rows:
        if times["ours"] is None:
            continue
        yield Row(
            op=op,
            ours_ms=times["ours"] / 1e3,
            ref_ms=times["ref"] / 1e3,
            ref_name=ref,
            **common,
        )


class ConvStack(nn.Sequential):
    """8 x (3x3 convolution + ReLU), 64 channels."""

    def __init__(self, conv: type[nn.Conv2d], channels: int = 64, depth: int = 8):
        layers = []
        for _ in range(depth):
            layers += [conv(channels, channels, 3, padding=1, bias=False), nn.ReLU()]
        super().__init__(*layers)


class Bottleneck(nn.Module):
    """ResNet-50's bottleneck block (1x1 reduce, 3x3, 1x1 expand, batch norm, identity skip)."""

    def __init__(self, conv: type[nn.Conv2d], channels: int = 256, width: int = 64):
        super().__init__()
        self.conv1 = conv(channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv(width, channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + x)


def _blocks(conv, channels, width, count=3):
    return nn.Sequential(*(Bottleneck(conv, channels, width) for _ in range(count)))


def _compiled(model: nn.Module, mode: str | None):
    backend = "inductor" if CUDA else "aot_eager"
    kwargs = {"mode": mode} if CUDA and mode else {}
    return torch.compile(model, backend=backend, fullgraph=True, **kwargs)


def _timed_compile(model, x, mode, opts) -> tuple[float, float]:
    """(µs per call, seconds the first call took: the compile) of ``model`` compiled."""
    compiled, compile_s = _first_call(model, x, mode)
    with torch.no_grad():
        return wall_us(lambda: compiled(x), opts), compile_s


def _first_call(model, x, mode, *, reset: bool = True) -> tuple[Callable, float]:
    """``model`` compiled (after clearing every compiled cache, unless ``reset`` is False), and
    the seconds its first call took (the compile)."""
    if reset:
        torch._dynamo.reset()
    compiled = _compiled(model, mode)
    start = time.perf_counter()
    with torch.no_grad():
        compiled(x)
        _sync()
    return compiled, time.perf_counter() - start


def _model_pair(make, shape, dtype):
    """(ours, reference, input): the same weights in a tritonconv and a torch.nn model."""
    torch.manual_seed(0)
    ref = make(nn.Conv2d).to(DEVICE, dtype).eval().to(memory_format=torch.channels_last)
    ours = make(tnn.Conv2d).to(DEVICE, dtype).eval().to(memory_format=torch.channels_last)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(shape, device=DEVICE).to(dtype, memory_format=torch.channels_last)
    return ours, ref, x


def _warm_up_compiler(dtype) -> None:
    """One small compile of PyTorch's own convolution: what any first compile of a process
    pays (Inductor's imports and passes, its compile workers), paid before the timed ones."""
    model = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()).to(DEVICE, dtype)
    x = torch.randn(1, 8, 8, 8, device=DEVICE, dtype=dtype)
    _first_call(model, x, None)


def _compiled_rows(opts: Options) -> Iterator[Row]:
    dtype = torch.bfloat16 if CUDA else torch.float32
    _warm_up_compiler(dtype)
    dname = str(dtype).removeprefix("torch.")
    quick = opts.quick
    stack_shape = (1, 8, 6, 6) if quick else (1, 64, 56, 56)
    channels = stack_shape[1]
    if opts.wants("stack8"):
        ours, ref, x = _model_pair(lambda conv: ConvStack(conv, channels), stack_shape, dtype)
        shape = f"8×(3×3 conv+ReLU) N1 C{channels} {stack_shape[2]}² NHWC"
        for mode in ("default", "reduce-overhead") if CUDA else ("default",):
            # both compiled (from one clean slate), then timed in alternation
            mode_arg = None if mode == "default" else mode
            c_ours, compile_ours = _first_call(ours, x, mode_arg)
            c_ref, compile_ref = _first_call(ref, x, mode_arg, reset=False)
            calls = {"ours": lambda c=c_ours: c(x), "ref": lambda c=c_ref: c(x)}
            with torch.no_grad():
                wall = paired_us(calls, opts, block=1)
                loop = paired_us(calls, opts, block=20)
            extra = {"compile_s": compile_ours, "ref_compile_s": compile_ref}
            for op, times in ((f"compiled {mode}", wall), (f"compiled {mode} (loop)", loop)):
                yield Row(
                    "host",
                    "stack8",
                    shape,
                    op,
                    dname,
                    times["ours"] / 1e3,
                    times["ref"] / 1e3,
                    "nn.Conv2d compiled",
                    extra=extra,
                )
    if opts.wants("bottleneck3"):
        block_shape = (2, 16, 6, 6) if quick else (8, 256, 56, 56)
        width = block_shape[1] // 4
        ours, ref, x = _model_pair(
            lambda conv: _blocks(conv, block_shape[1], width), block_shape, dtype
        )
        shape = f"3 bottlenecks N{block_shape[0]} C{block_shape[1]} {block_shape[2]}² NHWC"
        with torch.no_grad():
            eager = paired_us({"ours": lambda: ours(x), "ref": lambda: ref(x)}, opts, block=1)
        eager_ours, eager_ref = eager["ours"], eager["ref"]
        t_ours, c_ours = _timed_compile(ours, x, None, opts)
        t_ref, c_ref = _timed_compile(ref, x, None, opts)
        yield Row(
            "host",
            "bottleneck3",
            shape,
            "eager",
            dname,
            eager_ours / 1e3,
            eager_ref / 1e3,
            "nn.Conv2d eager",
        )
        yield Row(
            "host",
            "bottleneck3",
            shape,
            "compiled",
            dname,
            t_ours / 1e3,
            t_ref / 1e3,
            "nn.Conv2d compiled",
            extra={
                "compile_s": c_ours,
                "ref_compile_s": c_ref,
                "ours_compiled_over_eager": t_ours / eager_ours,
            },
        )


@suite("host")
def host_suite(opts: Options) -> Iterator[Row]:
    yield from _eager_rows(opts)
    yield from _compiled_rows(opts)
