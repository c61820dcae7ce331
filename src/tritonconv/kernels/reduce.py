"""Fixed-order reductions: the sum of split partial results (the last step of every split
weight gradient) and the per-channel sum of an output gradient (the bias gradient)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def sum_partials_kernel(
    partial_ptr,
    out_ptr,
    out2_ptr,
    splits,
    numel,
    split_at,
    taps,
    channels,
    BLOCK: tl.constexpr,
    SPLIT_BLOCK: tl.constexpr,
    TWO_OUTPUTS: tl.constexpr,
    CHANNELS_TO_TAPS: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """``out[i] = sum over s of partial[s * numel + i]``, cast to out's dtype (integers wrap
    like the dtype: the partials are exact int64). With ``TWO_OUTPUTS`` the sums from
    ``split_at`` on go to ``out2[i - split_at]`` instead (a weight gradient and its bias
    gradient reduced together). ``CHANNELS_TO_TAPS``: each partial row is laid out
    ``[rows, taps, channels]`` and ``out`` ``[rows, channels, taps]`` (a weight gradient
    written channels-last by its kernel, summed straight into a contiguous weight's layout:
    ``out`` then takes the first output's elements only, no ``TWO_OUTPUTS``).

    Each step loads ``SPLIT_BLOCK`` partials of ``BLOCK`` elements and sums them as a tree
    (``tl.sum``): the order depends on the launch configuration alone, so the result is
    bitwise the same on every run. Many splits of a small weight (depthwise, batch 1) thus
    take a few wide steps rather than one dependent load per split."""
    pid = tl.program_id(0)
    rows = tl.arange(0, SPLIT_BLOCK)
    if INDEX_64:
        pid = pid.to(tl.int64)
        rows = rows.to(tl.int64)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
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
    if TWO_OUTPUTS:
        first = offsets < split_at
        tl.store(out_ptr + offsets, acc.to(out_ptr.dtype.element_ty), mask=mask & first)
        second = out2_ptr + (offsets - split_at)
        tl.store(second, acc.to(out2_ptr.dtype.element_ty), mask=mask & (offsets >= split_at))
    elif CHANNELS_TO_TAPS:  # (rows, tap, channel) -> (rows, channel, tap)
        row_size = taps * channels
        within = offsets % row_size
        moved = offsets - within + (within % channels) * taps + within // channels
        tl.store(out_ptr + moved, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(out_ptr + offsets, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def channel_sum_partials_kernel(
    src_ptr,
    partial_ptr,
    C,
    D,
    H,
    W,
    rows,
    rows_per_split,
    s_n,
    s_c,
    s_d,
    s_h,
    s_w,
    ACC_DTYPE: tl.constexpr,
    ROWS_FAST: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_R: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """``partial[split, c] = sum of src[n, c, d, h, w]`` over the split's rows (a row is one
    (n, d, h, w), in that order), cast to partial's dtype (with one split, partial is the
    sum's output itself). Grid ``(channel blocks, splits)``. The tile is
    ``[BLOCK_C, BLOCK_R]`` with rows fastest (``ROWS_FAST``: NCHW-like tensors, whose width
    is the contiguous axis) or ``[BLOCK_R, BLOCK_C]`` (channels-last), so neighbouring lanes
    read neighbouring addresses; it is summed elementwise and reduced once, at the end."""
    pid_c = tl.program_id(0)
    split = tl.program_id(1)
    c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    r = tl.arange(0, BLOCK_R)
    first = split * rows_per_split
    if INDEX_64:
        c = c.to(tl.int64)
        r = r.to(tl.int64)
        first = split.to(tl.int64) * rows_per_split
    c_ok = c < C
    last = tl.minimum(first + rows_per_split, rows)
    if ROWS_FAST:
        acc = tl.zeros([BLOCK_C, BLOCK_R], dtype=ACC_DTYPE)
    else:
        acc = tl.zeros([BLOCK_R, BLOCK_C], dtype=ACC_DTYPE)
    for r0 in range(first, last, BLOCK_R):
        row = r0 + r
        w = row % W
        h = (row // W) % H
        d = (row // (W * H)) % D
        n = row // (W * H * D)
        row_off = n * s_n + d * s_d + h * s_h + w * s_w
        row_ok = row < last
        if ROWS_FAST:
            ptr = src_ptr + (c * s_c)[:, None] + row_off[None, :]
            tile = tl.load(ptr, mask=c_ok[:, None] & row_ok[None, :], other=0)
        else:
            ptr = src_ptr + row_off[:, None] + (c * s_c)[None, :]
            tile = tl.load(ptr, mask=row_ok[:, None] & c_ok[None, :], other=0)
        acc += tile.to(ACC_DTYPE)
    total = tl.sum(acc, axis=1) if ROWS_FAST else tl.sum(acc, axis=0)
    tl.store(partial_ptr + split * C + c, total.to(partial_ptr.dtype.element_ty), mask=c_ok)
