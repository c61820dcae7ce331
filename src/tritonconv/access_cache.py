"""Inductor's access analysis of tritonconv's kernels, worked out once per specialisation.

When ``torch.compile`` traces a ``wrap_triton`` launch, PyTorch finds out which of the
kernel's pointer arguments it reads and writes by generating the kernel's Triton IR and
walking it (``torch._higher_order_ops.triton_kernel_wrap.identify_accessed_tensors``; before
torch 2.12 ``identify_mutated_tensors``, which reports the written ones only). It
does so at every call site and again at each stage that needs the answer (functionalisation,
Inductor's lowering of the kernel node, its graph's mutation bookkeeping), with no cache: a
compiled stack of 8 convolutions generates the IR of one kernel some two dozen times, at
~40 ms each on the development machine for our implicit-GEMM kernels (benchmarks/NOTES.md,
session 13).

The answer depends only on what the analysis feeds Triton, which is narrower than the
arguments: fake tensors and Inductor's tensor boxes become an empty tensor of their dtype,
symbolic integers become 2, and Triton itself tells integers apart only by whether they equal
1, are multiples of 16 and fit 32 bits. The names it reports are the kernel's own parameter
names, the same at every call site. So for our kernels (and only ours: nothing else is
touched) the analysis is memoised on exactly that: the kernel, each argument's dtype or
integer class or value. (A launch with options such as ``num_warps`` reaches the analysis as
a fresh one-config ``Autotuner`` around the kernel each time; the key is the kernel inside,
whose IR the options do not change. Until session 16 the key missed every such launch,
which is all of ours.) Anything outside that (a real tensor, whose
address alignment Triton would see; tensor-descriptor metadata; an unhashable value) goes
straight to PyTorch's analysis, uncached.

:func:`install` wraps PyTorch's function in place, once, when a launch is first traced
(``launch.launch``); it does nothing on a PyTorch without that function or with another
parameter list. Set ``TRITONCONV_ACCESS_CACHE=0`` to leave PyTorch's analysis alone.
"""

from __future__ import annotations

import copy
import inspect
import os
import threading

import torch

from .caches import BoundedCache

# Distinct (kernel, specialisation) pairs remembered; a model has a few hundred at most.
ACCESS_CACHE_SIZE = 2048

_analyses = BoundedCache("kernel access analyses", ACCESS_CACHE_SIZE)
_install_lock = threading.Lock()
_installed = False
# What PyTorch's analysis was before :func:`install` wrapped it (None until then).
original = None

# The function wrapped, by its name in the torch versions this was written for: the newer
# first (torch 2.13: reads and writes), then the older (torch 2.11: writes); both take these
# parameters. The name installed is kept in ``name``.
_NAMES = ("identify_accessed_tensors", "identify_mutated_tensors")
_PARAMETERS = ("kernel", "kwargs", "tma_descriptor_metadata")
name: str | None = None


def _ours(kernel) -> bool:
    """Whether ``kernel`` is one of tritonconv's own ``@triton.jit`` kernels."""
    from triton.runtime.jit import JITFunction

    return type(kernel) is JITFunction and kernel.fn.__module__.startswith("tritonconv.")


def _int_class(value: int) -> tuple:
    """What Triton's JIT specialises an integer argument on: equal to 1, a multiple of 16, and
    its type (i32, i64 or u64 by range)."""
    width = 32 if -(2**31) <= value < 2**31 else 64 if value < 2**63 else 65
    return ("int", value == 1, value % 16 == 0, width)


def _arg_key(value):
    """One argument's part of the key; raises TypeError where there is none."""
    import sympy
    import triton.language as tl
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool, sympy.Expr)):
        return ("symbolic", type(value).__name__)
    if isinstance(value, FakeTensor) or type(value).__name__ == "TensorBox":
        return ("tensor", value.dtype)
    if isinstance(value, torch.Tensor):  # real data: its address alignment would count
        raise TypeError("a real tensor")
    if isinstance(value, int) and not isinstance(value, bool):
        return _int_class(value)
    if value is None or isinstance(value, (bool, float, str, tl.dtype)):
        return (type(value), value)
    raise TypeError(f"no key for a {type(value).__name__}")  # (nor a reference kept to it)


def _unwrapped(kernel, kwargs: dict) -> tuple:
    """The kernel and arguments the analysis generates IR for. A launch with options
    (``num_warps``, ``num_stages``...) reaches it as a one-config ``Autotuner``, made anew for
    every traced launch, around the ``@triton.jit`` kernel: PyTorch's analysis then reads the
    first config's arguments and the kernel inside (the options do not change the IR)."""
    from triton.runtime.autotuner import Autotuner

    if isinstance(kernel, Autotuner):
        if kernel.configs:
            kwargs = {**kwargs, **kernel.configs[0].kwargs}
        kernel = kernel.fn
    return kernel, kwargs


def access_key(kernel, kwargs: dict, tma_descriptor_metadata) -> tuple | None:
    """The memo key of one analysis, or None when it is not to be memoised (module docstring)."""
    kernel, kwargs = _unwrapped(kernel, kwargs)
    if tma_descriptor_metadata or not _ours(kernel):
        return None
    try:
        return (kernel, tuple((name, _arg_key(kwargs[name])) for name in sorted(kwargs)))
    except Exception:  # no key (TypeError), or a value unlike what this was written for
        return None


def _analysis(kernel, kwargs, tma_descriptor_metadata):
    key = access_key(kernel, kwargs, tma_descriptor_metadata)
    if key is None:
        return original(kernel, kwargs, tma_descriptor_metadata)
    result = _analyses.get(key)
    if result is None:
        result = original(kernel, kwargs, tma_descriptor_metadata)
        _analyses.put(key, result)
    return copy.deepcopy(result)  # callers own what they get, as from an uncached call


def install() -> bool:
    """Memoise PyTorch's access analysis of our kernels (module docstring); True once done."""
    global _installed, original, name
    if _installed:
        return True
    if os.environ.get("TRITONCONV_ACCESS_CACHE", "1") == "0":
        return False
    with _install_lock:
        if _installed:
            return True
        try:
            from torch._higher_order_ops import triton_kernel_wrap as wrap
        except ImportError:
            return False
        found = next((n for n in _NAMES if hasattr(wrap, n)), None)
        if found is None:
            return False
        analysis = getattr(wrap, found)
        try:
            parameters = tuple(inspect.signature(analysis).parameters)
        except (TypeError, ValueError):
            return False
        if parameters != _PARAMETERS:
            return False
        original, name = analysis, found
        setattr(wrap, found, _analysis)
        _installed = True
        return True
