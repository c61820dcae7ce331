"""Plan caches: what a call signature determines is worked out once and reused.

A *plan* is everything the public functions decide before launching anything: validation,
geometry, algorithm choice, the normalised arguments of the op. It depends only on the call's
*signature*: every tensor's shape, strides, dtype and device, the values (and types) of the
other arguments, fp32's dot precision (``torch.backends.cudnn.allow_tf32``, and with it off
``precision.TF32_OFF_PRECISION``) and the benchmark switch. :func:`lookup` returns the cached
plan of a signature or builds it; a build that raises (bad input) caches nothing, so every bad
call gets the same clear error as the first. Under ``torch.compile`` nothing is cached: shapes
may be symbolic, and Dynamo runs the build once while tracing anyway; nor inside a
``torch.func`` transform (its plans run ATen), nor under a dispatch mode (fake tensors: what
AOTAutograd traces, where ``is_compiling`` is False on some torch versions).

Each cache is a :class:`caches.BoundedCache` (bounded, thread-safe; ``clear_caches`` empties it).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import precision
from .caches import BoundedCache, clear_caches
from .choice import benchmark_switch
from .launch import transformed

__all__ = [
    "BoundedCache", "clear_caches", "lookup", "settings", "tensor_key", "traced", "values_key",
]  # fmt: skip


def tensor_key(t) -> tuple | None:
    """The part of a tensor's identity a plan may depend on (None for None)."""
    if t is None:
        return None
    return (t.shape, t.stride(), t.dtype, t.device)


# Types a value of a key is checked no further for (``isinstance(v, torch.Tensor)`` costs
# 0.1-0.2 µs a value that is not a tensor: its metaclass's instance check)
_PLAIN_VALUES = frozenset({int, str, bool, float, tuple, list, type(None)})


def values_key(values: tuple) -> str:
    """One key for several plain values (ints, strings, None, tuples and lists of them): their
    ``repr``, which tells ``True`` from ``1`` and ``1.0`` and a list from a tuple. A tensor in
    ``values`` raises (a plan may not hang on a tensor's identity or contents)."""
    for value in values:
        if type(value) not in _PLAIN_VALUES and isinstance(value, torch.Tensor):
            raise TypeError("a tensor where a value is expected")
    return repr(values)


def traced() -> bool:
    """Whether the call is being traced into a graph: by Dynamo (asked first: strict
    ``torch.export`` traces this code, and Dynamo cannot trace the dispatch-stack query) or
    under a tracer's dispatch mode (AOTAutograd's fake and functional tensors, make_fx).
    :func:`lookup` caches no plan then, so what is decided for a graph (``choice.heuristic``'s
    ``traced``) is never kept for eager calls of the same signature."""
    return torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0


def settings() -> tuple:
    """The process-wide settings every plan key holds besides its call's signature: fp32's dot
    precision is that of the kernels a plan may end up replaying (``allow_tf32``, and with it
    off ``TF32_OFF_PRECISION``); the benchmark switch decides how ``"auto"`` chooses
    (``dot_precision(torch.float32)`` follows from the first two)."""
    return precision.allow_tf32(), precision.TF32_OFF_PRECISION, benchmark_switch()


def lookup(cache: BoundedCache, make_key: Callable[[], tuple], build: Callable[[], object]):
    """The plan of the call whose signature ``make_key()`` returns, built by ``build()`` on a
    miss. Uncached while torch.compile traces, or when the arguments are not hashable or not
    what a key expects (``build`` then validates them and raises the real error)."""
    if traced() or transformed():
        return build()  # (a dispatch mode: fake or functional tensors, whose plans are traced)
    try:
        key = (make_key(), *settings())  # (settings read after ``traced()``: eager only)
        plan = cache.get(key)
    except (TypeError, AttributeError):
        return build()
    if plan is None:
        plan = build()
        cache.put(key, plan)
    return plan
