"""Fixed-order sum of split partial results (the last step of every split weight gradient)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def sum_partials_kernel(
    partial_ptr,
    out_ptr,
    splits,
    numel,
    BLOCK: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """``out[i] = sum over s of partial[s * numel + i]``, s ascending, cast to out's dtype
    (integers wrap like the dtype: the partials are exact int64)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if INDEX_64:
        offsets = offsets.to(tl.int64)
    mask = offsets < numel
    acc = tl.load(partial_ptr + offsets, mask=mask, other=0)
    for s in range(1, splits):
        acc += tl.load(partial_ptr + s * numel + offsets, mask=mask, other=0)
    tl.store(out_ptr + offsets, acc.to(out_ptr.dtype.element_ty), mask=mask)
