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
"""

from __future__ import annotations

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
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if tracing(*tensors):
        if INTERPRETER:
            return  # a fake tensor has nothing to interpret: the body is its own fake
        torch.library.wrap_triton(kernel)[grid](*args, **meta)
        return
    if INTERPRETER:
        kernel[grid](*args, **meta)
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
