"""Every Triton kernel launch of tritonconv goes through :func:`launch`.

One call site, three situations:

* **Tracing** (``torch.compile``, ``make_fx``, fake or functional tensors): the kernel goes
  through ``torch.library.wrap_triton``, so the graph records the Triton kernel itself and
  Inductor can schedule, fuse around and CUDA-graph it. Under Triton's interpreter a fake
  tensor has no data to interpret: the launch is skipped (the op's body is then its own fake
  implementation, exactly as ``torch.library.triton_op`` uses it on the GPU).
* **Interpreter** (CPU tensors, ``TRITON_INTERPRET=1``): ``kernel[grid](...)``.
* **Compiled kernels on CUDA**: a lean launch. Triton's ``JITFunction.run`` binds and
  specialises every argument and rebuilds its cache key on each call (30-40 µs per launch on the
  H100 machine, benchmarks/NOTES.md). The first launch of a given argument signature goes through
  it and keeps the compiled kernel; later launches with the same signature call the compiled
  kernel's launcher directly. The signature holds everything Triton specialises on (every
  non-tensor argument's value, every tensor's dtype and 16-byte alignment, the launch options)
  plus the device, so a cached kernel is exactly the one Triton would have picked.

The lean path is bypassed, and Triton's own path taken, whenever Triton has launch hooks
installed (profilers such as proton rely on them).

**Launch plans.** A launcher whose launches depend only on its arguments' signature (tensor
shapes, strides, dtypes, devices and the other arguments' values) is decorated with
:func:`launch_plan`. Its first call with a signature runs normally while every ``launch`` is
recorded, tensors by which argument they were; later calls replay the recorded launches on the
new tensors without running the launcher's Python at all: tile choice, grid, strides and the
kernel's argument list are worked out once per signature. (Under the interpreter the replay
interprets the recorded launches, so CPU tests exercise the recording too.)
"""

from __future__ import annotations

import inspect
import threading

import torch

from ._runtime import INTERPRETER

# Tensor types the kernels may read directly (anything else is a tracing or subclass tensor).
PLAIN_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)

# Bound on the lean-launch cache (entries: kernel x argument signature x device).
LAUNCH_CACHE_SIZE = 8192


def is_plain(*tensors: torch.Tensor | None) -> bool:
    """True when every given tensor is an ordinary tensor holding real data."""
    return all(t is None or type(t) in PLAIN_TENSOR_TYPES for t in tensors)


def tracing(*tensors: torch.Tensor | None) -> bool:
    """True while a tracer (fake/functional tensors, a dispatch mode) is looking at the call:
    nothing may be cached by shape then, shapes may be symbolic, and kernels are recorded."""
    return not is_plain(*tensors) or torch._C._len_torch_dispatch_stack() > 0


class _LaunchCache:
    """Compiled kernels by launch signature: bounded (oldest entries dropped first) and safe
    with several threads (a lost race compiles nothing twice: Triton caches too)."""

    def __init__(self, size: int):
        self.size = size
        self.entries: dict = {}
        self.lock = threading.Lock()

    def get(self, key):
        return self.entries.get(key)

    def put(self, key, value) -> None:
        with self.lock:
            while len(self.entries) >= self.size:
                self.entries.pop(next(iter(self.entries)))
            self.entries[key] = value

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()


_cache = _LaunchCache(LAUNCH_CACHE_SIZE)
# Launch options of ``kernel[grid](..., num_warps=...)``: not kernel parameters.
_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion"})


def clear_launch_cache() -> None:
    """Forget every cached compiled kernel (Triton's own cache is untouched)."""
    _cache.clear()


def _hooks():
    """Triton's launch hooks (enter, exit), whatever the Triton version keeps them in."""
    try:
        from triton import knobs

        return knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    except (ImportError, AttributeError):  # Triton before knobs: hooks on CompiledKernel
        from triton.compiler import CompiledKernel

        return CompiledKernel.launch_enter_hook, CompiledKernel.launch_exit_hook


def _hooks_installed() -> bool:
    return any(hook is not None and getattr(hook, "calls", True) for hook in _hooks())


def _signature(args, meta) -> tuple:
    """What Triton specialises a launch on: each tensor's dtype and 16-byte alignment, every
    other argument's value."""
    return tuple(
        (a.dtype, a.data_ptr() & 15 == 0) if isinstance(a, torch.Tensor) else a for a in args
    ) + tuple(meta.items())


def launch(kernel, grid: tuple, *args, **meta) -> None:
    """``kernel[grid](*args, **meta)``, traced, interpreted or launched lean (module docstring).

    ``args`` are the kernel's leading parameters in order, ``meta`` the rest (constexprs) by
    name plus launch options (``num_warps``...).
    """
    recording = getattr(_recorder, "steps", None)
    if recording is not None:
        recording.append((kernel, grid, args, meta))
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if tracing(*tensors):
        if INTERPRETER:
            return  # a fake tensor has nothing to interpret: the body is its own fake
        torch.library.wrap_triton(kernel)[grid](*args, **meta)
        return
    if INTERPRETER:
        _interpret(kernel, grid, args, meta)
        return
    device = torch.cuda.current_device()
    key = (kernel, device, _signature(args, meta))
    entry = _cache.get(key)
    if entry is None or _hooks_installed():
        compiled = kernel[grid](*args, **meta)
        tail = _tail(kernel, len(args), meta)
        if compiled is not None and tail is not None:
            _cache.put(key, (compiled, tail))
        return
    _run_compiled(entry, grid, device, args)


# Triton's interpreter patches ``triton.language`` while it runs a kernel: one at a time.
_INTERPRETER_LOCK = threading.Lock()


def _interpret(kernel, grid, args, meta) -> None:
    with _INTERPRETER_LOCK:
        kernel[grid](*args, **meta)


def _run_compiled(entry, grid, device: int, args) -> None:
    """Launch a compiled kernel (``entry``: it and its trailing constexpr values) directly."""
    compiled, tail = entry
    grid = (*grid, 1, 1)
    compiled.run(
        grid[0],
        grid[1],
        grid[2],
        torch._C._cuda_getCurrentRawStream(device),
        compiled.function,
        compiled.packed_metadata,
        None,  # launch metadata: only read by launch hooks (none installed)
        None,
        None,
        *args,
        *tail,
    )


def _tail(kernel, leading: int, meta: dict) -> tuple | None:
    """The values of the kernel's parameters after the ``leading`` positional ones, in order,
    from ``meta``; None when one is missing (a default value: Triton's own path handles it)."""
    names = getattr(kernel, "arg_names", None)
    if names is None:
        return None
    rest = names[leading:]
    if any(n not in meta for n in rest) or set(meta) - _OPTIONS != set(rest):
        return None
    return tuple(meta[n] for n in rest)


# --------------------------------------------------------------------------------------------
# launch plans
# --------------------------------------------------------------------------------------------

_recorder = threading.local()


class _Step:
    """One recorded launch: the kernel's arguments with the tensors left as slots (which
    argument of the launcher each one was), and its compiled kernels by device and alignment."""

    __slots__ = ("compiled", "grid", "kernel", "meta", "slots", "template")

    def __init__(self, kernel, grid, args, meta, slots):
        self.kernel, self.grid, self.meta = kernel, grid, meta
        self.template = list(args)
        self.slots = slots  # [(position in args, index of the launcher's tensor)]
        self.compiled: dict = {}

    def run(self, tensors: list) -> None:
        args = self.template.copy()
        for position, index in self.slots:
            args[position] = tensors[index]
        if INTERPRETER:
            _interpret(self.kernel, self.grid, args, self.meta)
            return
        device = torch.cuda.current_device()
        key = (device, *(args[p].data_ptr() & 15 == 0 for p, _ in self.slots))
        entry = self.compiled.get(key)
        if entry is None or _hooks_installed():
            compiled = self.kernel[self.grid](*args, **self.meta)
            tail = _tail(self.kernel, len(args), self.meta)
            if compiled is not None and tail is not None and len(self.compiled) < 16:
                self.compiled[key] = (compiled, tail)
            return
        _run_compiled(entry, self.grid, device, args)


def _steps(recorded, tensors: list) -> list[_Step] | None:
    """The recorded launches as steps over ``tensors``; None if a launch used a tensor that is
    not one of them (made inside the launcher), or one tensor came as two arguments (a later
    call may pass two): the launcher is then not replayed."""
    if len({id(t) for t in tensors}) != len(tensors):
        return None
    steps = []
    for kernel, grid, args, meta in recorded:
        slots = []
        for position, arg in enumerate(args):
            if isinstance(arg, torch.Tensor):
                index = next((i for i, t in enumerate(tensors) if t is arg), None)
                if index is None:
                    return None
                slots.append((position, index))
        steps.append(_Step(kernel, grid, args, meta, slots))
    return steps


def _signature_key(args) -> tuple:
    key = [
        (a.shape, a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor) else a for a in args
    ]
    key.append(torch.backends.cudnn.allow_tf32)
    return tuple(key)


def launch_plan(launcher):
    """Decorator: record ``launcher``'s launches once per argument signature and replay them
    (module docstring). ``launcher`` must launch kernels only through :func:`launch`, allocate
    nothing the kernels see, and decide its launches from its arguments' signature alone (and
    ``torch.backends.cudnn.allow_tf32``, which picks the fp32 dot precision). Its positional
    arguments must be tensors, None or hashable values (keywords are bound to positions); it
    returns None."""
    plans = _LaunchCache(LAUNCH_CACHE_SIZE)
    signature = inspect.signature(launcher)

    def planned(*args, **kwargs) -> None:
        if kwargs:
            args = signature.bind(*args, **kwargs).args
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if tracing(*tensors):
            launcher(*args)
            return
        try:
            key = _signature_key(args)
            steps = plans.get(key)
        except TypeError:  # an unhashable argument
            launcher(*args)
            return
        if steps is not None:
            for step in steps:
                step.run(tensors)
            return
        _recorder.steps = recorded = []
        try:
            launcher(*args)
        finally:
            _recorder.steps = None
        steps = _steps(recorded, tensors)
        if steps is not None:
            plans.put(key, steps)

    planned.__name__ = launcher.__name__
    planned.__doc__ = launcher.__doc__
    planned.plans = plans
    return planned
