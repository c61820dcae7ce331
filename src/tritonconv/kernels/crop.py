"""crop: one shifted-window copy kernel serves the crop's forward and its backward.

``crop_kernel`` writes every element of a dense destination ``dst`` from a source ``src``::

    dst[i] = src[i + shift]   where 0 <= i + shift < src_size on every axis, else 0

* crop forward: ``dst`` is the output, ``src`` the input, ``shift = +offset``; the window lies
  inside the input (validated), so every element is a copy;
* crop backward: ``dst`` is the input gradient, ``src`` the output gradient,
  ``shift = -offset``; elements outside the window get 0, so the whole gradient is written in
  one pass with no separate zero fill.

Layouts. The launcher (``ops/crop.py``) brings any N-D problem to exactly ``RANK = 6`` axes:
it orders the axes by ``dst``'s strides (so ``dst`` is row-major in that order: the address of
``dst[i]`` is its flat index), drops axes of size 1 on both sides, merges an axis into the
next-outer one wherever that keeps both the window a box and the source addressable by one
stride, then pads on the left with size-1 axes (Triton specialises integer arguments equal to 1,
so padded axes cost nothing). ``src`` keeps arbitrary strides (non-contiguous, channels-last,
expanded views).

Tiles. A program owns a ``BLOCK_R x BLOCK_C`` tile of the two innermost axes (axis 5, the
innermost, is contiguous in ``dst`` and in ``src`` whenever its stride is 1) at one index of
the four outer axes. The program splits its id into that outer index and its tile with a few
scalar divisions; the tile's own indices are aranges, so no element and no row pays for an
integer division. A tile is at most 4096 elements on the GPU; when the two innermost axes are
both tiny (say 2 x 2) tiles are that small too and the launch is slow, but stays correct.
``INDEX_64`` switches index arithmetic to int64 (set when a tensor spans 2**31 elements or
more).
"""

from __future__ import annotations

import triton
import triton.language as tl

#: Axes the kernel addresses; the launcher pads or merges every problem to this many.
RANK = 6


@triton.jit
def _source_axis(i, shift, src_size, src_stride):
    """(address contribution, inside?) of destination index ``i`` on one source axis."""
    j = i + shift
    return j * src_stride, (j >= 0) & (j < src_size)


@triton.jit
def crop_kernel(
    # pointers
    src_ptr,
    dst_ptr,
    # destination sizes (axis 0's is implied by the grid)
    d1,
    d2,
    d3,
    d4,
    d5,
    # shift of the source index per axis (outermost first)
    shift0,
    shift1,
    shift2,
    shift3,
    shift4,
    shift5,
    # source sizes
    src_size0,
    src_size1,
    src_size2,
    src_size3,
    src_size4,
    src_size5,
    # source strides (elements)
    src_stride0,
    src_stride1,
    src_stride2,
    src_stride3,
    src_stride4,
    src_stride5,
    # meta-parameters
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """dst[i] = src[i + shift] inside the source, 0 outside; ``dst`` row-major, 6 axes.

    Grid: one program per (outer index over axes 0-3, row block of axis 4, column block of
    axis 5), column blocks fastest.
    """
    pid = tl.program_id(0)
    col_blocks = tl.cdiv(d5, BLOCK_C)
    row_blocks = tl.cdiv(d4, BLOCK_R)
    col_block = pid % col_blocks
    t = pid // col_blocks
    row_block = t % row_blocks
    outer = t // row_blocks
    if INDEX_64:
        outer = outer.to(tl.int64)
    i3 = outer % d3
    t = outer // d3
    i2 = t % d2
    t = t // d2
    i1 = t % d1
    i0 = t // d1
    i4 = row_block * BLOCK_R + tl.arange(0, BLOCK_R)
    i5 = col_block * BLOCK_C + tl.arange(0, BLOCK_C)
    if INDEX_64:
        i4 = i4.to(tl.int64)
        i5 = i5.to(tl.int64)

    a0, in0 = _source_axis(i0, shift0, src_size0, src_stride0)
    a1, in1 = _source_axis(i1, shift1, src_size1, src_stride1)
    a2, in2 = _source_axis(i2, shift2, src_size2, src_stride2)
    a3, in3 = _source_axis(i3, shift3, src_size3, src_stride3)
    a4, in4 = _source_axis(i4, shift4, src_size4, src_stride4)
    a5, in5 = _source_axis(i5, shift5, src_size5, src_stride5)
    row_live = i4 < d4
    col_live = i5 < d5
    # rows to read: none when the outer index falls outside the source (a scalar select: the
    # interpreter mis-types a vector & scalar mask)
    read_rows = tl.where(in0 & in1 & in2 & in3, d4, 0)
    row_inside = (i4 < read_rows) & in4
    col_inside = col_live & in5

    src = src_ptr + (a0 + a1 + a2 + a3) + a4[:, None] + a5[None, :]
    values = tl.load(src, mask=row_inside[:, None] & col_inside[None, :], other=0)
    dst = dst_ptr + outer * d4 * d5 + (i4 * d5)[:, None] + i5[None, :]
    tl.store(dst, values, mask=row_live[:, None] & col_live[None, :])
