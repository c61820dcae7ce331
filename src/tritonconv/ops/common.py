"""Helpers every launcher shares: grid arithmetic, index width, accumulator dtypes.

Plain integer Python on purpose: ``triton.cdiv`` and ``triton.next_power_of_2`` are JIT functions
in recent Triton and cost about 4 µs per call from Python, several times per launch.
"""

from __future__ import annotations

import torch
import triton.language as tl

from ..geometry import INT_DTYPES

# Index arithmetic switches to int64 when an address can reach this many elements.
INDEX32_LIMIT = 2**31 - 1


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def needs_int64(*tensors: torch.Tensor | None) -> bool:
    """True when an element offset into some tensor may not fit in int32: its storage (which
    bounds every offset of every view of it) or its element count is too large."""
    for t in tensors:
        if t is None:
            continue
        if t.numel() > INDEX32_LIMIT:
            return True
        if t.untyped_storage().nbytes() // t.element_size() > INDEX32_LIMIT:
            return True
    return False


def accumulator_dtype(dtype: torch.dtype):
    """Triton dtype sums are kept in: int64 for integers (exact, wraps like the dtype on the
    final cast), float64 for float64, float32 for the other floats."""
    if dtype in INT_DTYPES or dtype == torch.bool:
        return tl.int64
    if dtype == torch.float64:
        return tl.float64
    return tl.float32
