"""``@triton.jit`` kernels only: no allocation, no autograd, no argument checking.

:func:`jit` is ``triton.jit`` that does not specialise on the integer arguments named in
``runtime``. Triton compiles a kernel per pattern of "equals 1" and "divisible by 16" over its
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

#: Every integer parameter (not pointers, not ``tl.constexpr``): for gather kernels, whose
#: addresses are computed per element and never vectorised.
ALL_INTEGERS = ("*",)


def jit(fn=None, *, runtime: tuple[str, ...] = ALL_INTEGERS):
    """``triton.jit(fn)`` with the integer parameters in ``runtime`` (those ``fn`` has, and
    that are not ``tl.constexpr``) left unspecialised; :data:`ALL_INTEGERS` names them all."""

    def wrap(fn):
        params = inspect.signature(fn).parameters
        candidates = [
            n
            for n, p in params.items()
            if "constexpr" not in str(p.annotation) and not n.endswith("_ptr")
        ]
        names = candidates if runtime == ALL_INTEGERS else [n for n in runtime if n in candidates]
        return triton.jit(fn, do_not_specialize=names)

    return wrap(fn) if fn is not None else wrap
