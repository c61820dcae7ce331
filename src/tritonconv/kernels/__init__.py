"""``@triton.jit`` kernels only: no allocation, no autograd, no argument checking.

:func:`jit` is ``triton.jit`` that does not specialise on the integer arguments named in
``runtime``. Triton compiles a kernel per pattern of "equals 1" and "divisible by 16" over its
integer arguments; for window geometry (kernel size, padding, dilation) that buys nothing, while
every new pattern costs a compilation (about a second), which a user meets on every new layer
shape and a random-geometry fuzz on nearly every draw. Strides, and sizes that bound vectorised
accesses, stay specialised where a kernel's loads or stores can use it.
"""

from __future__ import annotations

import inspect

import triton

#: Window geometry: never worth a specialisation.
GEOMETRY = ("KH", "KW", "pad_h", "pad_w", "dil_h", "dil_w")


#: Every integer parameter (not pointers, not ``tl.constexpr``): for gather kernels, whose
#: addresses are computed per element and never vectorised.
ALL_INTEGERS = ("*",)


def jit(fn=None, *, runtime: tuple[str, ...] = GEOMETRY):
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
