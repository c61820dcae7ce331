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
    SPLIT_BLOCK: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """``out[i] = sum over s of partial[s * numel + i]``, cast to out's dtype (integers wrap
    like the dtype: the partials are exact int64).

    Each step loads ``SPLIT_BLOCK`` partials of ``BLOCK`` elements and sums them as a tree
    (``tl.sum``): the order depends on the launch configuration alone, so the result is
    bitwise the same on every run. Many splits of a small weight (depthwise, batch 1) thus
    take a few wide steps rather than one dependent load per split."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rows = tl.arange(0, SPLIT_BLOCK)
    if INDEX_64:
        offsets = offsets.to(tl.int64)
        rows = rows.to(tl.int64)
    mask = offsets < numel
    acc = tl.zeros([BLOCK], dtype=partial_ptr.dtype.element_ty)
    for s0 in range(0, splits, SPLIT_BLOCK):
        s = s0 + rows
        tile = tl.load(
            partial_ptr + s[:, None] * numel + offsets[None, :],
            mask=(s < splits)[:, None] & mask[None, :],
            other=0,
        )
        acc += tl.sum(tile, axis=0)
    tl.store(out_ptr + offsets, acc.to(out_ptr.dtype.element_ty), mask=mask)
