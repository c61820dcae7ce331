"""Compile the Triton kernels a model's convolutions will launch, ahead of time, in parallel.

Triton compiles a kernel the first time it is launched with a given specialisation (the
shapes, strides, dtypes and 16-byte alignments it is given, and the tile configuration), in the
calling process, one kernel after another: the first pass of a model through tritonconv spends
most of its time in the compiler (``tritonconv bench --suite models --models resnet50`` on an
H100: the eager phase 43 s cold, 6 s with Triton's cache warm) while the machine's other CPU
cores wait. Triton keeps what it compiles on disk (``~/.triton/cache``, or
``$TRITON_CACHE_DIR``), where every process on the machine finds it.

:func:`warmup` captures every convolution call of one forward pass of a model (one
:class:`ConvCall` per distinct call: a small picklable record, no tensors), and runs those
calls, forward and forward + backward, on random tensors of the same shapes, strides, dtypes
and device, under the same settings, in ``workers`` processes started with ``spawn`` (CUDA
cannot fork). The workers fill Triton's on-disk cache, which they share with the caller (they
inherit its environment), so the caller's own first calls load compiled kernels instead of
compiling them. Only the compiled kernels carry over: algorithm choices measured by the workers
(benchmark mode), timed side by side on one GPU, are never written to tritonconv's choice cache.

What is warmed: the convolution *modules* (``torch.nn`` ones as :func:`tritonconv.nn.convert`
would run them, tritonconv's as they are); a ``tritonconv.conv2d`` called directly in a
``forward``, and tritonconv's other ops, are not seen. The output gradient of each backward is a
random tensor laid out like the output: a model whose gradients reach a convolution in another
layout compiles those kernels on its first backward pass.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import multiprocessing
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from . import choice as _choice
from . import nn as tnn
from .geometry import TritonConvError
from .ops.conv_gemm import get_workspace_limit, set_workspace_limit

#: At most this many worker processes by default (each holds a CUDA context).
MAX_DEFAULT_WORKERS = 8
CPU_NOTE = (
    "CPU tensors: nothing to compile (PyTorch's CPU convolutions run them, or, with "
    "TRITONCONV_CPU_KERNELS=1, Triton's interpreter, which compiles nothing)"
)
NO_CALLS_NOTE = "no tritonconv convolution call on the GPU"


@dataclass(frozen=True)
class Settings:
    """The process-wide switches that change which kernels a convolution launches."""

    cudnn_allow_tf32: bool  # fp32 implicit GEMM: TF32, or fp32 (ieee) dots
    matmul_allow_tf32: bool  # fp32 cuBLAS GEMMs and band kernels
    benchmark: bool  # tritonconv's benchmark mode (``choice.benchmark_enabled()``)
    cudnn_benchmark: bool
    workspace_limit: int  # im2col+GEMM's column-buffer cap (``get_workspace_limit()``)

    @classmethod
    def current(cls) -> Settings:
        return cls(
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
            _choice.benchmark_enabled(), torch.backends.cudnn.benchmark, get_workspace_limit(),
        )  # fmt: skip

    @contextlib.contextmanager
    def applied(self):
        """These settings inside, the previous ones restored after."""
        previous = (
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
            _choice._benchmark, torch.backends.cudnn.benchmark, get_workspace_limit(),
        )  # fmt: skip
        torch.backends.cudnn.allow_tf32 = self.cudnn_allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = self.matmul_allow_tf32
        _choice.set_benchmark(self.benchmark)
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        set_workspace_limit(self.workspace_limit)
        try:
            yield
        finally:
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = previous[:2]
            _choice.set_benchmark(previous[2])
            torch.backends.cudnn.benchmark = previous[3]
            set_workspace_limit(previous[4])

    def __str__(self) -> str:
        tf32 = "on" if self.cudnn_allow_tf32 else "off"
        how = "measured" if self.benchmark else "heuristic"
        return f"TF32 {tf32}, {how}"


@dataclass(frozen=True)
class TensorSpec:
    """A tensor without its values: dtype, shape, strides, and its offset (in elements) from
    16-byte alignment, on which Triton specialises pointers (a view starting elsewhere gets
    other kernels)."""

    dtype: str  # a ``torch`` attribute: "float32"
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int = 0

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorSpec:
        dtype = str(t.dtype).removeprefix("torch.")
        offset = t.data_ptr() % 16 // t.element_size()
        return cls(dtype, tuple(t.shape), tuple(t.stride()), offset)

    def make(self, device: torch.device) -> torch.Tensor:
        """A tensor of this description on ``device``, random values."""
        dtype = getattr(torch, self.dtype)
        return _choice.random_strided(self.shape, self.stride, dtype, device, self.offset)

    def __str__(self) -> str:
        return f"{self.dtype} {list(self.shape)} strides {list(self.stride)}"


# The keyword arguments of every convolution module's constructor (transposed ones: also
# ``output_padding``), read back from the module's attributes of the same names.
_OPTIONS = (
    "in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups",
    "padding_mode",
)  # fmt: skip
_OURS = frozenset(tnn.CONVERTED.values())


@dataclass(frozen=True)
class ConvCall:
    """One convolution call of a model, as a tritonconv module would run it: picklable and
    hashable (equal calls compile the same kernels), no tensors."""

    module: str  # the tritonconv module class, importable: "tritonconv.nn.Conv2d"
    options: tuple[tuple[str, object], ...]  # its constructor's keyword arguments, algo too
    weight: TensorSpec
    bias: TensorSpec | None
    input: TensorSpec
    device: str  # "cuda:0"
    args: tuple = ()  # the forward's further arguments (a transposed module's output_size)
    kwargs: tuple[tuple[str, object], ...] = ()
    settings: Settings | None = None  # None: leave the process's settings as they are

    @classmethod
    def of(cls, module: nn.Module, args: tuple, kwargs: dict) -> ConvCall | None:
        """The call ``module(*args, **kwargs)`` under the current settings, or None where
        ``module`` is a convolution tritonconv does not run (a subclass of a ``torch.nn``
        convolution, which :func:`tritonconv.nn.convert` leaves alone)."""
        ours = _tritonconv_class(module)
        if ours is None:
            return None
        options = {name: getattr(module, name) for name in _OPTIONS}
        if isinstance(module, nn.modules.conv._ConvTransposeNd):
            options["output_padding"] = module.output_padding
        options["bias"] = module.bias is not None
        options["algo"] = getattr(module, "algo", "auto")
        input = args[0]
        return cls(
            module=f"{ours.__module__}.{ours.__qualname__}",
            options=tuple(options.items()),
            weight=TensorSpec.of(module.weight),
            bias=None if module.bias is None else TensorSpec.of(module.bias),
            input=TensorSpec.of(input),
            device=str(input.device),
            args=_frozen(args[1:]),
            kwargs=tuple((k, _frozen(v)) for k, v in sorted(kwargs.items())),
            settings=Settings.current(),
        )

    def build(self, device: torch.device) -> nn.Module:
        """The module on ``device``, with random parameters laid out as recorded."""
        path, _, name = self.module.rpartition(".")
        cls = getattr(importlib.import_module(path), name)
        module = cls(**dict(self.options), device="meta")
        for attr, spec in (("weight", self.weight), ("bias", self.bias)):
            if spec is not None:
                value = spec.make(device)
                setattr(module, attr, nn.Parameter(value, value.is_floating_point()))
        return module

    def __str__(self) -> str:
        options = dict(self.options)
        shape = f"{options.pop('in_channels')}, {options.pop('out_channels')}"
        rest = "".join(f", {k}={v!r}" for k, v in options.items())
        extra = "".join(f", {v!r}" for v in self.args)
        extra += "".join(f", {k}={v!r}" for k, v in self.kwargs)
        settings = f"; {self.settings}" if self.settings else ""
        return (
            f"{self.module.rpartition('.')[2]}({shape}{rest}) on {self.device}: input "
            f"{self.input}{extra}; weight {self.weight}{settings}"
        )


def _tritonconv_class(module: nn.Module) -> type | None:
    """The tritonconv module class that runs ``module``'s convolution: its own (for a subclass
    of one, that one: its constructor is known), or the one ``convert`` swaps in."""
    if isinstance(module, tnn._Converted):
        return next((c for c in type(module).__mro__ if c in _OURS), None)
    return tnn.CONVERTED.get(type(module))


def _frozen(value):
    """``value`` hashable: lists, sizes and tensors as tuples."""
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


# ---------------------------------------------------------------------------------------------
# Capturing a model's calls


def capture_calls(model: nn.Module, *example_inputs) -> list[ConvCall]:
    """Every distinct convolution call of one forward pass of ``model`` on
    ``example_inputs`` (no gradients), in call order, under the current settings. While it
    runs, tritonconv's modules compute with torch's convolution (same output: nothing is
    compiled in this process; integer inputs, which torch's CUDA convolutions refuse, keep
    tritonconv's), and ``model`` is left as it was (batch-norm statistics included)."""
    calls: dict[ConvCall, None] = {}  # an ordered set

    def visit(name, module, args, kwargs):
        call = ConvCall.of(module, args, kwargs)
        if call is not None:
            calls.setdefault(call)

    buffers = [(b, b.clone()) for b in model.buffers()]
    try:
        with _torch_convolutions(model):
            tnn.visit_convolutions(model, example_inputs, visit)
    finally:
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)
    return list(calls)


@contextlib.contextmanager
def _torch_convolutions(model: nn.Module):
    """Inside, each tritonconv convolution module of ``model`` computes with its torch base
    class's convolution (an instance attribute shadows the method, removed after)."""
    patched = []
    for module in model.modules():
        if not isinstance(module, tnn._Converted):
            continue
        base = next((c for c in type(module).__mro__ if c in tnn.CONVERTED), None)
        transposed = isinstance(module, nn.modules.conv._ConvTransposeNd)
        name = "forward" if transposed else "_conv_forward"
        if base is None or name in vars(module):
            continue
        theirs = functools.partial(getattr(base, name), module)
        setattr(module, name, functools.partial(_by_torch, theirs, getattr(module, name)))
        patched.append((module, name))
    try:
        yield
    finally:
        for module, name in patched:
            delattr(module, name)


def _by_torch(theirs, ours, input, *args, **kwargs):
    return (theirs if input.is_floating_point() else ours)(input, *args, **kwargs)


# ---------------------------------------------------------------------------------------------
# Running them


@dataclass(frozen=True)
class WarmupReport:
    """What :func:`warmup` did: how many distinct calls it ran, in how many worker processes
    (0: in the calling process), in how many seconds, and the calls that failed, each with its
    error (a failed call only means its kernels compile later, on first use). ``note`` says
    why nothing ran, when nothing did."""

    calls: int
    workers: int
    seconds: float
    failures: tuple[tuple[str, str], ...] = ()  # (call, error)
    note: str = ""

    def __str__(self) -> str:
        if self.note:
            return f"warm-up: {self.note}"
        text = (
            f"warm-up: {self.calls} convolution call(s) in {self.workers} worker(s), "
            f"{self.seconds:.1f} s"
        )
        if self.failures:
            text += f"; {len(self.failures)} failed: " + "; ".join(
                f"{call}: {error}" for call, error in self.failures
            )
        return text


def warm_call(call: ConvCall, backward: bool = True) -> str | None:
    """Run ``call`` once on random tensors under its settings: the forward without
    gradients, and (``backward``, float dtypes) a forward + backward producing the input,
    weight and bias gradients from a random output gradient; then wait for the device. None
    when it ran, else the error's text (never raises)."""
    try:
        device = torch.device(call.device)
        settings = call.settings.applied() if call.settings else contextlib.nullcontext()
        on_device = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
        with settings, on_device:
            module = call.build(device)
            x = call.input.make(device)
            args, kwargs = call.args, dict(call.kwargs)
            with torch.no_grad():
                module(x, *args, **kwargs)
            if backward and x.is_floating_point():
                x.requires_grad_()
                y = module(x, *args, **kwargs)
                wrt = [x, *(p for p in (module.weight, module.bias) if p is not None)]
                torch.autograd.grad(y, wrt, torch.randn_like(y))
            if device.type == "cuda":
                torch.cuda.synchronize(device)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


def _work(call: ConvCall, backward: bool) -> str | None:
    """:func:`warm_call` in a worker process."""
    _choice._store_on_disk = False
    return warm_call(call, backward)


def _worker_count(workers: int | None) -> int:
    if workers is None:
        return min(MAX_DEFAULT_WORKERS, os.cpu_count() or 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise TritonConvError(
            f"workers={workers!r}: expected a whole number >= 0 (0: in this process), or None"
        )
    return workers


def warm_calls(
    calls: Sequence[ConvCall], workers: int | None = None, backward: bool = True
) -> WarmupReport:
    """Run each distinct call of ``calls`` once (:func:`warm_call`), in ``workers`` spawned
    processes (default ``min(8, os.cpu_count())``, never more than there are calls), each
    taking the next call when it is done with one; ``workers=0``: one after another in this
    process. A call that fails, or whose worker dies, is in the report's failures; nothing
    raises but a bad ``workers``."""
    count = _worker_count(workers)
    begin = time.perf_counter()
    calls = list(dict.fromkeys(calls))
    count = min(count, len(calls))
    if count == 0:
        errors = [warm_call(call, backward) for call in calls]
    else:
        errors = _in_workers(calls, count, backward)
    failures = tuple((str(c), e) for c, e in zip(calls, errors) if e is not None)
    return WarmupReport(len(calls), count, time.perf_counter() - begin, failures)


def _in_workers(calls: list[ConvCall], count: int, backward: bool) -> list[str | None]:
    """Each call a task of its own, so that a worker that drew quick calls takes more: the
    calls' compile times range from 0.02 to 5 s (resnet50's on an H100). Starting the workers
    costs about 10 s there, mostly ``import tritonconv`` (``torch.library.triton_op`` imports
    Inductor), 8 processes at once."""
    errors: list[str | None] = []
    try:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(count, mp_context=context) as pool:
            futures = [pool.submit(_work, call, backward) for call in calls]
            try:
                for future in futures:
                    try:
                        errors.append(future.result())
                    except Exception as e:  # the worker died (or its result did not come back)
                        errors.append(f"worker failed: {type(e).__name__}: {e}")
            except BaseException:  # Ctrl-C: drop the calls not started, do not wait for them
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    except Exception as e:  # no pool: e.g. a __main__ that spawn cannot import again
        errors += [f"no worker process: {type(e).__name__}: {e}"] * (len(calls) - len(errors))
    return errors


def warmup(model: nn.Module, *example_inputs, workers: int | None = None, backward: bool = True):
    """Compile, in ``workers`` parallel processes, every Triton kernel the tritonconv
    convolutions of ``model`` launch on ``example_inputs`` (see the module's docstring): one
    forward pass without gradients captures the calls (:func:`capture_calls`; the model's
    ``torch.nn`` convolutions count as :func:`tritonconv.nn.convert` would swap them, and the
    current TF32, benchmark-mode and workspace settings with each), then each distinct call
    runs forward and, with ``backward``, forward + backward, in workers that fill Triton's
    on-disk cache for this process's first pass.

    ``workers``: processes to spawn (default ``min(8, os.cpu_count())``, never more than
    there are calls; 0: run the calls here, one after another). Returns a
    :class:`WarmupReport`; a call that fails is in its failures, never raised (it only costs
    its compile later). Returns at once when the model and inputs are on the CPU (nothing to
    compile) or make no convolution call. Raises ``TritonConvError`` (a ``ValueError``) for a
    bad ``workers``. The first call in a process spawns the workers by re-importing the
    ``__main__`` module: a script needs the usual ``if __name__ == "__main__":`` guard."""
    count = _worker_count(workers)
    begin = time.perf_counter()
    tensors = [t for t in tree_leaves(example_inputs) if isinstance(t, torch.Tensor)]
    tensors += [*model.parameters(), *model.buffers()]
    if not any(t.device.type == "cuda" for t in tensors):
        return WarmupReport(0, 0, time.perf_counter() - begin, note=CPU_NOTE)
    calls = [c for c in capture_calls(model, *example_inputs) if c.device.startswith("cuda")]
    if not calls:
        return WarmupReport(0, 0, time.perf_counter() - begin, note=NO_CALLS_NOTE)
    report = warm_calls(calls, count, backward)
    return dataclasses.replace(report, seconds=time.perf_counter() - begin)
