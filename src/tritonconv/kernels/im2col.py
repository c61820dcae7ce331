"""im2col, col2im and relayout: the memory-bound kernels of convolution by GEMM.

im2col and col2im are written over three spatial axes ``(D, H, W)``; a 2-D (or 1-D) problem
is the 3-D one with leading size-1 axes (unit kernel, stride and dilation, no padding), as in
``implicit_gemm.py``, so every rank runs the same two kernels (relayout, which only the 2-D
im2col+GEMM convolution uses, stays 2-D). Index vocabulary:

* an *image* element is ``x[n, c, d, h, w]``, read or written through five element strides, so
  contiguous, channels-last and any non-contiguous view are the same code (a missing axis has
  size 1 and any stride);
* a *column row* is ``r = ((c * KD + kd) * KH + kh) * KW + kw`` (the order of
  ``weight.flatten(1)``), split for grouped convolution into ``g = r // rows_per_group`` and
  ``kg = r % rows_per_group``;
* an output *position* is ``pos = n * L + q`` with ``q = (od * OH + oh) * OW + ow`` and
  ``L = OD * OH * OW``.

The column matrix's address is affine in ``(n, q, g, kg)``::

    col_base + n * col_sn + q * col_sq + g * col_sg + kg * col_sk

F.unfold's ``(N, C*KD*KH*KW, L)`` layout and the GEMM's ``(G, rows_per_group, positions)``
layout are two stride choices of this one formula; ``col_base`` lets a chunk of positions start
anywhere. Kernels only see a window ``[position_start, position_start + num_positions)``.

What the depth axis costs a 2-D problem: nothing. ``DEPTH`` (a constexpr) says whether the
depth axis is real (``(D, KD, OD) != (1, 1, 1)``); without it ``d = od = kd = 0`` are constants
and the depth index math is compiled out, and the depth arguments come last, so a 2-D launch
compiles to the same SASS as the 2-D-only kernels did (checked on sm_90 with Triton 3.6 and 3.9;
on an H100, splitting depth at run time made im2col 40-60% slower on ResNet-50 planes, and
interleaving the depth arguments alone cost col2im 3% through scheduling). With ``DEPTH``,
im2col splits ``q`` and ``r`` on their vectors and checks depth bounds only when a depth tap
can leave the image (``CHECK_D``); col2im gives each program one depth plane, so ``d`` and the
depth taps are scalars, and a depth tap that reaches no output depth is skipped as a whole.

Registers: im2col and relayout hold one ``BLOCK_R x BLOCK_P`` tile; col2im holds one
``BLOCK`` accumulator and loops over the KD*KH*KW taps at run time, so kernel size is
unbounded. ``INDEX_64`` switches index arithmetic to int64 (set when a tensor has 2**31
elements or more), program ids included.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def im2col_kernel(
    # pointers
    x_ptr,
    col_ptr,
    # sizes
    position_start,
    num_positions,
    rows,
    rows_per_group,
    H,
    W,
    OW,
    L,
    KH,
    KW,
    # geometry
    stride_h,
    stride_w,
    pad_h,
    pad_w,
    dil_h,
    dil_w,
    # image strides
    x_sn,
    x_sc,
    x_sh,
    x_sw,
    # column address
    col_base,
    col_sn,
    col_sq,
    col_sg,
    col_sk,
    # the depth axis (unused without DEPTH), last: the 2-D argument list stays as it was, and
    # the compiled 2-D kernel is the one from before depth existed, instruction for instruction
    D,
    OH,
    KD,
    stride_d,
    pad_d,
    dil_d,
    x_sd,
    # meta-parameters
    DEPTH: tl.constexpr,
    CHECK_D: tl.constexpr,
    FLAT_POSITIONS: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_P: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """cols[r, pos] = x[n, c, od*sd - pd + kd*dd, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw], 0 in
    the padding.

    ``DEPTH``: the depth axis is real (else ``od = kd = 0``, compiled out). ``CHECK_D``: some
    depth tap can fall outside the image (depth padding); without it every depth index of a
    valid (row, position) pair is inside, and the check is left out.
    ``FLAT_POSITIONS``: the layout stores a chunk's positions contiguously (``col_sn == L``
    and ``col_sq == 1``, the GEMM layout), so the column address is ``col_base + p + row
    offset``; written that way Triton can prove contiguity and issue 16-byte stores.
    """
    pid = tl.program_id(0)
    if INDEX_64:
        pid = pid.to(tl.int64)
    row_blocks = tl.cdiv(rows, BLOCK_R)
    r = (pid % row_blocks) * BLOCK_R + tl.arange(0, BLOCK_R)
    p = (pid // row_blocks) * BLOCK_P + tl.arange(0, BLOCK_P)
    row_ok = r < rows
    pos_ok = p < num_positions

    pos = position_start + p
    n = pos // L
    q = pos % L
    if DEPTH:
        t = q // OW
        oh = t % OH
        od = t // OH
    else:
        oh = q // OW
    ow = q % OW
    plane_taps = KH * KW
    if DEPTH:
        taps = KD * plane_taps
        c = r // taps
        kd = (r % taps) // plane_taps
    else:
        c = r // plane_taps
    kh = (r % plane_taps) // KW
    kw = r % KW
    g = r // rows_per_group
    kg = r % rows_per_group

    # Row and position parts of every index are formed on the vectors, so each element of
    # the tile costs one add per checked coordinate and one for its address.
    oh_in = oh * stride_h
    ow_in = ow * stride_w
    kh_in = kh * dil_h - pad_h
    kw_in = kw * dil_w - pad_w
    ih = oh_in[None, :] + kh_in[:, None]
    iw = ow_in[None, :] + kw_in[:, None]
    inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    if DEPTH:
        od_in = od * stride_d
        kd_in = kd * dil_d - pad_d
        if CHECK_D:
            i_d = od_in[None, :] + kd_in[:, None]
            inside = inside & (i_d >= 0) & (i_d < D)
    store_ok = row_ok[:, None] & pos_ok[None, :]
    position_src = n * x_sn + oh_in * x_sh + ow_in * x_sw
    row_src = c * x_sc + kh_in * x_sh + kw_in * x_sw
    if DEPTH:
        position_src += od_in * x_sd
        row_src += kd_in * x_sd
    src = x_ptr + position_src[None, :] + row_src[:, None]
    values = tl.load(src, mask=store_ok & inside, other=0)
    position_offset = p if FLAT_POSITIONS else n * col_sn + q * col_sq
    dst = col_ptr + col_base + position_offset[None, :] + (g * col_sg + kg * col_sk)[:, None]
    tl.store(dst, values, mask=store_ok)


@triton.jit
def _col2im_plane_taps(
    acc,
    col_ptr,
    col_base,
    col_sn,
    col_sq,
    col_sg,
    col_sk,
    n,
    channel_taps,
    h,
    w,
    live,
    od,
    L,
    OH,
    OW,
    KH,
    KW,
    rows_per_group,
    position_start,
    position_end,
    stride_h,
    stride_w,
    pad_h,
    pad_w,
    dil_h,
    dil_w,
    ACC_DTYPE: tl.constexpr,
):
    """``acc`` plus the column entries of the KH*KW taps of one depth tap that cover
    ``(h, w)``, in a fixed order: ``od`` is that tap's output depth (checked by the caller),
    ``channel_taps`` is ``c * KD + kd`` (the column row is ``(channel_taps * KH + kh) * KW +
    kw``)."""
    for kh in range(0, KH):
        oh_num = h + pad_h - kh * dil_h
        oh = oh_num // stride_h
        ok_h = live & (oh_num >= 0) & (oh * stride_h == oh_num) & (oh < OH)
        for kw in range(0, KW):
            ow_num = w + pad_w - kw * dil_w
            ow = ow_num // stride_w
            q = (od * OH + oh) * OW + ow
            pos = n * L + q
            ok = ok_h & (ow_num >= 0) & (ow * stride_w == ow_num) & (ow < OW)
            ok = ok & (pos >= position_start) & (pos < position_end)
            r = (channel_taps * KH + kh) * KW + kw
            g = r // rows_per_group
            kg = r % rows_per_group
            src = col_ptr + col_base + n * col_sn + q * col_sq + g * col_sg + kg * col_sk
            acc += tl.load(src, mask=ok, other=0).to(ACC_DTYPE)
    return acc


@triton.jit
def col2im_kernel(
    # pointers
    col_ptr,
    x_ptr,
    # sizes: the image elements written are depth planes [0, D) of samples
    # [n_start, n_start + plane_numel // (C*H*W))
    n_start,
    plane_numel,
    C,
    H,
    W,
    OH,
    OW,
    KH,
    KW,
    rows_per_group,
    position_start,
    position_end,
    # geometry
    stride_h,
    stride_w,
    pad_h,
    pad_w,
    dil_h,
    dil_w,
    # image strides
    x_sn,
    x_sc,
    x_sh,
    x_sw,
    # column address
    col_base,
    col_sn,
    col_sq,
    col_sg,
    col_sk,
    # the depth axis (unused without DEPTH), last: the 2-D argument list stays as it was, and
    # the compiled 2-D kernel is the one from before depth existed, instruction for instruction
    plane_blocks,
    D,
    OD,
    KD,
    stride_d,
    pad_d,
    dil_d,
    x_sd,
    # meta-parameters
    DEPTH: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    ACCUMULATE: tl.constexpr,
    BLOCK: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """x[n, c, d, h, w] (+)= sum of the column entries whose window covers (d, h, w).

    A gather: each lane owns one image element and walks the KD*KH*KW taps in a fixed order,
    keeping a tap when ``h + ph - kh*dh`` is a non-negative multiple of the stride below
    ``OH*stride`` (likewise for d and w) and its position lies in the chunk. No atomics, so the
    result is bitwise reproducible. Program ``pid`` covers block ``pid % plane_blocks`` of the
    ``(n, c, h, w)`` elements of depth plane ``d = pid // plane_blocks``: ``d`` and every depth
    quantity are scalars. Without ``DEPTH`` (``D == KD == OD == 1``) they are the constant 0.
    """
    pid = tl.program_id(0)
    if INDEX_64:
        pid = pid.to(tl.int64)
    if DEPTH:
        d = pid // plane_blocks
        e = (pid % plane_blocks) * BLOCK + tl.arange(0, BLOCK)
    else:
        e = pid * BLOCK + tl.arange(0, BLOCK)
    live = e < plane_numel
    w = e % W
    t = e // W
    h = t % H
    t = t // H
    c = t % C
    n = n_start + t // C

    acc = tl.zeros([BLOCK], dtype=ACC_DTYPE)
    # fmt: off
    if DEPTH:
        L = OD * OH * OW
        for kd in range(0, KD):
            od_num = d + pad_d - kd * dil_d
            od = od_num // stride_d
            # The same for the whole program: a depth tap reaching no output depth is skipped.
            if (od_num >= 0) & (od * stride_d == od_num) & (od < OD):
                acc = _col2im_plane_taps(
                    acc, col_ptr, col_base, col_sn, col_sq, col_sg, col_sk, n, c * KD + kd, h, w,
                    live, od, L, OH, OW, KH, KW, rows_per_group, position_start, position_end,
                    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, ACC_DTYPE,
                )
    else:
        acc = _col2im_plane_taps(
            acc, col_ptr, col_base, col_sn, col_sq, col_sg, col_sk, n, c, h, w,
            live, 0, OH * OW, OH, OW, KH, KW, rows_per_group, position_start, position_end,
            stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, ACC_DTYPE,
        )
    # fmt: on

    dst = x_ptr + n * x_sn + c * x_sc + h * x_sh + w * x_sw
    if DEPTH:
        dst += d * x_sd
    if ACCUMULATE:
        acc += tl.load(dst, mask=live, other=0).to(ACC_DTYPE)
    tl.store(dst, acc.to(x_ptr.dtype.element_ty), mask=live)


@triton.jit
def relayout_kernel(
    # pointers
    src_ptr,
    dst_ptr,
    bias_ptr,
    # sizes
    position_start,
    num_positions,
    channels,
    OW,
    L,
    # addresses: base + n*sn + c*sc + oh*sh + ow*sw on each side
    src_base,
    src_sn,
    src_sc,
    src_sh,
    src_sw,
    dst_base,
    dst_sn,
    dst_sc,
    dst_sh,
    dst_sw,
    # meta-parameters
    HAS_BIAS: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_P: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """dst[n, c, oh, ow] = src[n, c, oh, ow] (+ bias[c]) for positions of one chunk.

    Moves a GEMM's ``(channels, positions)`` matrix into an NCHW or channels-last tensor (the
    forward's epilogue, with the bias fused into this single pass), or a tensor into such a
    matrix (the backward's prologue for the output gradient).
    """
    pid = tl.program_id(0)
    if INDEX_64:  # before the multiply: the first position can pass int32
        pid = pid.to(tl.int64)
    channel_blocks = tl.cdiv(channels, BLOCK_C)
    c = (pid % channel_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    p = (pid // channel_blocks) * BLOCK_P + tl.arange(0, BLOCK_P)
    ok = (c < channels)[:, None] & (p < num_positions)[None, :]
    pos = position_start + p
    n = pos // L
    q = pos % L
    oh = q // OW
    ow = q % OW
    src = src_ptr + src_base + (n * src_sn + oh * src_sh + ow * src_sw)[None, :]
    values = tl.load(src + (c * src_sc)[:, None], mask=ok, other=0)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + c, mask=c < channels, other=0)
        values = values.to(ACC_DTYPE) + bias.to(ACC_DTYPE)[:, None]
    dst = dst_ptr + dst_base + (n * dst_sn + oh * dst_sh + ow * dst_sw)[None, :]
    tl.store(dst + (c * dst_sc)[:, None], values.to(dst_ptr.dtype.element_ty), mask=ok)
