"""``@triton.jit`` kernels only: no allocation, no autograd, no argument checking.

:func:`jit_runtime_integers` is ``triton.jit`` that specialises on none of the kernel's integer
arguments. Triton compiles a kernel per pattern of "equals 1" and "divisible by 16" over its
integer arguments. The direct kernels are gathers (every address computed per element, nothing
vectorised), so they take every integer at run time: one compilation per dtype and tile
configuration instead of one per shape pattern, which a user meets on every new layer shape and
a random-geometry fuzz on nearly every draw. The im2col and depthwise kernels keep Triton's
specialisation: it measurably pays there (an unspecialised dilation put an integer division back
into the 31x31 band kernel: bf16 forward 7.4x -> 5.2x cuDNN, benchmarks/NOTES.md).
"""

from __future__ import annotations

import inspect

import triton


def jit_runtime_integers(fn):
    """``triton.jit(fn)`` with every integer parameter (not pointers, not ``tl.constexpr``)
    left unspecialised."""
    params = inspect.signature(fn).parameters
    names = [
        n
        for n, p in params.items()
        if "constexpr" not in str(p.annotation) and not n.endswith("_ptr")
    ]
    return triton.jit(fn, do_not_specialize=names)
