"""Depthwise convolution (groups == C_in, C_out = multiplier * C_in): forward, input gradient and
weight gradient, each deterministic (every output element is owned by one program, partial sums
are added in a fixed order by the launcher).

Channel vocabulary. The forward and the stride-1 input gradient are the same computation:
``dst[n, c] = sum over r < R of conv(src[n, (c*R + r) // DIV], w[c*R + r])`` (+ bias[c]).
The forward has ``R = 1, DIV = multiplier``; the input gradient has ``R = multiplier, DIV = 1``
and the weight walked backwards (``w_base`` points at the last tap, the tap strides are
negative) with padding ``dil*(K-1) - pad``. Every tensor is read through element strides, so
NCHW and channels-last are the same code; the launcher picks the tile shape that is contiguous
in memory (wide rows for NCHW, a block of channels for channels-last). ``dst_offset`` places
``dst`` inside the buffer ``dst_ptr`` points at: a strided input gradient's phases write into
the whole dx rather than a view of it (under torch.compile a kernel writing a strided view
with a storage offset is cloned into a buffer sized to the view, and torch 2.11 then reads
and writes past that buffer).

Two ways to do the multiply-adds, chosen by the launcher:

* ``depthwise_kernel``: a ``[BLOCK_C, BLOCK_H, BLOCK_W]`` output tile in registers; for each
  tap (run-time loops), one masked load of the shifted source tile (an L1/L2 hit after the
  first tap) and one FMA per element. Small kernels: memory-bound, any dtype (int64 exact).
* ``depthwise_band_kernel``: one ``(n, c)`` plane tile ``[BLOCK_H, BLOCK_W]``; for each kernel
  row ``kh``, the output tile is ``A @ B`` with ``A[h, j] = src[row(h, kh), j]`` (a block of
  source columns) and ``B[j, w] = weight[kh, kw]`` where source column ``j`` meets output column
  ``w`` at tap ``kw`` (a banded Toeplitz matrix built from the weight row on the fly). This
  runs the window on tensor cores; only source columns inside the image are visited, so the
  redundant multiplies are about ``BLOCK_J / KW``. Large kernels, floating point.

Weight gradient ``dW[c, kh, kw] = sum over n, oh, ow of dy[n, c, oh, ow] * x[n, c // m, ih, iw]``:

* ``depthwise_small_grad_weight_kernel``: a program owns a channel block, a spatial tile and
  a block of up to 3 x 3 taps; per sample the ``dy`` tile is loaded once and each tap's
  shifted ``x`` tile multiplied into that tap's own accumulator tile (no reduction in the
  loop); the tiles are reduced once at the end, and the launcher sums the programs' partials
  in a fixed order. Any dtype, any kernel size (a larger kernel is cut into tap blocks).
* ``depthwise_band_grad_weight_kernel``: ``dW[kh, kw] = A @ B`` over ``k = (ih, ow)`` with
  ``A[kh, k] = dy[oh, ow]`` where ``oh*stride - pad + kh*dil == ih`` and
  ``B[k, kw] = x[ih, ow*stride - pad + kw*dil]``; a program owns one channel, one
  ``[BLOCK_KH, BLOCK_KW]`` tap tile and one split of the batch. Large kernels, floating point.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .mma import mma


@triton.jit
def program_y(FOLD_Y: tl.constexpr):
    """The program's index along the grid's second axis. CUDA takes at most 65535 programs
    there; a launch with more (the spatial tiles of a 4K image) folds them over the second and
    third axes (``launch.launch``: ``FOLD_Y``), and the index is ``y + z * (programs along
    y)``. The few past the real count own tiles past the output: their stores are masked."""
    if FOLD_Y:
        return tl.program_id(1) + tl.program_id(2) * tl.num_programs(1)
    return tl.program_id(1)


@triton.jit
def depthwise_kernel(
    # pointers
    src_ptr,
    w_ptr,
    bias_ptr,
    dst_ptr,
    # sizes
    C_dst,
    SH,
    SW,
    DH,
    DW,
    KH,
    KW,
    R,
    DIV,
    # geometry
    stride_h,
    stride_w,
    pad_h,
    pad_w,
    dil_h,
    dil_w,
    # strides
    src_sn,
    src_sc,
    src_sh,
    src_sw,
    dst_sn,
    dst_sc,
    dst_sh,
    dst_sw,
    dst_offset,
    w_base,
    w_sc,
    w_skh,
    w_skw,
    # meta-parameters
    HAS_BIAS: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_W: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """dst[n, c, h, w] = sum over r, kh, kw of src[n, (c*R+r)//DIV, h*sh-ph+kh*dh, w*sw-pw+kw*dw]
    * w[c*R + r, kh, kw] (+ bias[c]); grid ``(N * channel blocks, spatial tiles)``."""
    pid_nc = tl.program_id(0)
    pid_hw = tl.program_id(1)
    c_blocks = tl.cdiv(C_dst, BLOCK_C)
    n = pid_nc // c_blocks
    w_tiles = tl.cdiv(DW, BLOCK_W)
    c = (pid_nc % c_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    h = (pid_hw // w_tiles) * BLOCK_H + tl.arange(0, BLOCK_H)
    w = (pid_hw % w_tiles) * BLOCK_W + tl.arange(0, BLOCK_W)
    if INDEX_64:
        n = n.to(tl.int64)
        c = c.to(tl.int64)
    c_ok = c < C_dst
    out_ok = c_ok[:, None, None] & (h < DH)[None, :, None] & (w < DW)[None, None, :]

    acc = tl.zeros([BLOCK_C, BLOCK_H, BLOCK_W], dtype=ACC_DTYPE)
    for r in range(0, R):
        wc = c * R + r
        src_c = src_ptr + n * src_sn + (wc // DIV) * src_sc
        w_c = w_ptr + w_base + wc * w_sc
        for kh in range(0, KH):
            sh = h * stride_h - pad_h + kh * dil_h
            row_ok = (sh >= 0) & (sh < SH)
            src_row = src_c[:, None, None] + (sh * src_sh)[None, :, None]
            for kw in range(0, KW):
                sw = w * stride_w - pad_w + kw * dil_w
                ok = out_ok & row_ok[None, :, None] & ((sw >= 0) & (sw < SW))[None, None, :]
                x = tl.load(src_row + (sw * src_sw)[None, None, :], mask=ok, other=0)
                wt = tl.load(w_c + kh * w_skh + kw * w_skw, mask=c_ok, other=0)
                acc += x.to(ACC_DTYPE) * wt.to(ACC_DTYPE)[:, None, None]

    if HAS_BIAS:
        bias = tl.load(bias_ptr + c, mask=c_ok, other=0)
        acc += bias.to(ACC_DTYPE)[:, None, None]
    dst = dst_ptr + dst_offset + n * dst_sn + (c * dst_sc)[:, None, None]
    dst += (h * dst_sh)[None, :, None] + (w * dst_sw)[None, None, :]
    tl.store(dst, acc.to(dst_ptr.dtype.element_ty), mask=out_ok)


@triton.jit
def depthwise_band_kernel(
    # pointers
    src_ptr,
    w_ptr,
    bias_ptr,
    dst_ptr,
    # sizes
    C_dst,
    SH,
    SW,
    DH,
    DW,
    KH,
    KW,
    R,
    DIV,
    # geometry
    stride_h,
    stride_w,
    pad_h,
    pad_w,
    dil_h,
    dil_w,
    # strides
    src_sn,
    src_sc,
    src_sh,
    src_sw,
    dst_sn,
    dst_sc,
    dst_sh,
    dst_sw,
    dst_offset,
    w_base,
    w_sc,
    w_skh,
    w_skw,
    # meta-parameters
    HAS_BIAS: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_W: tl.constexpr,
    BLOCK_J: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """The same sum as ``depthwise_kernel`` for one ``(n, c)`` plane tile, one kernel row at a
    time as ``[BLOCK_H, BLOCK_J] @ [BLOCK_J, BLOCK_W]`` on tensor cores (fp32 accumulate);
    grid ``(N * C_dst, spatial tiles)``."""
    pid_nc = tl.program_id(0)
    pid_hw = tl.program_id(1)
    if INDEX_64:
        pid_nc = pid_nc.to(tl.int64)
    n = pid_nc // C_dst
    c = pid_nc % C_dst
    w_tiles = tl.cdiv(DW, BLOCK_W)
    h0 = (pid_hw // w_tiles) * BLOCK_H
    w0 = (pid_hw % w_tiles) * BLOCK_W
    h = h0 + tl.arange(0, BLOCK_H)
    w = w0 + tl.arange(0, BLOCK_W)
    # Source columns that some output column of this tile reads, clipped to the image.
    j_lo = tl.maximum(w0 * stride_w - pad_w, 0)
    w_top = tl.minimum(w0 + BLOCK_W, DW) - 1
    j_hi = tl.minimum(w_top * stride_w - pad_w + (KW - 1) * dil_w + 1, SW)
    col_start = w * stride_w - pad_w  # source column of tap 0, per output column

    acc = tl.zeros([BLOCK_H, BLOCK_W], dtype=tl.float32)
    for r in range(0, R):
        wc = c * R + r
        src_c = src_ptr + n * src_sn + (wc // DIV) * src_sc
        w_c = w_ptr + w_base + wc * w_sc
        for kh in range(0, KH):
            sh = h * stride_h - pad_h + kh * dil_h
            row_ok = (sh >= 0) & (sh < SH)
            src_row = src_c + sh * src_sh
            w_row = w_c + kh * w_skh
            for j0 in range(j_lo, j_hi, BLOCK_J):
                j = j0 + tl.arange(0, BLOCK_J)
                a = tl.load(
                    src_row[:, None] + (j * src_sw)[None, :],
                    mask=row_ok[:, None] & (j < j_hi)[None, :],
                    other=0,
                )
                offset = j[:, None] - col_start[None, :]  # = kw * dil_w on the band
                kw = offset // dil_w
                on_band = (offset >= 0) & (kw * dil_w == offset) & (kw < KW)
                b = tl.load(w_row + kw * w_skw, mask=on_band, other=0)
                acc = mma(a.to(DOT_DTYPE), b.to(DOT_DTYPE), acc, DOT_PRECISION)

    if HAS_BIAS:
        acc += tl.load(bias_ptr + c).to(tl.float32)
    dst = dst_ptr + dst_offset + n * dst_sn + c * dst_sc
    dst += (h * dst_sh)[:, None] + (w * dst_sw)[None, :]
    tl.store(dst, acc.to(dst_ptr.dtype.element_ty), mask=(h < DH)[:, None] & (w < DW)[None, :])


@triton.jit
def depthwise_band_grad_weight_kernel(
    # pointers
    dy_ptr,
    x_ptr,
    partial_ptr,
    # sizes
    samples_per_split,
    N,
    C_out,
    H,
    W,
    OH,
    OW,
    KH,
    KW,
    multiplier,
    # geometry
    stride_h,
    stride_w,
    pad_h,
    pad_w,
    dil_h,
    dil_w,
    # strides
    dy_sn,
    dy_sc,
    dy_sh,
    dy_sw,
    x_sn,
    x_sc,
    x_sh,
    x_sw,
    # meta-parameters
    DOT_PRECISION: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    BLOCK_KH: tl.constexpr,
    BLOCK_KW: tl.constexpr,
    BLOCK_K: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """partial[split, c, kh, kw] for one channel ``c`` and one tap tile, summed over the split's
    samples and ``k = (ih, ow)`` in order; ``partial`` is ``(splits, C_out, KH, KW)``
    contiguous; grid ``(C_out * tap tiles, splits)``."""
    pid_ct = tl.program_id(0)
    split = tl.program_id(1)
    kh_tiles = tl.cdiv(KH, BLOCK_KH)
    kw_tiles = tl.cdiv(KW, BLOCK_KW)
    c = pid_ct // (kh_tiles * kw_tiles)
    tap_tile = pid_ct % (kh_tiles * kw_tiles)
    if INDEX_64:
        c = c.to(tl.int64)
        split = split.to(tl.int64)
    kh0 = (tap_tile // kw_tiles) * BLOCK_KH
    kh = kh0 + tl.arange(0, BLOCK_KH)
    kw = (tap_tile % kw_tiles) * BLOCK_KW + tl.arange(0, BLOCK_KW)
    kh_ok = kh < KH
    kw_ok = kw < KW
    # Input rows this tap tile reads from, clipped to the image.
    ih_lo = tl.maximum(kh0 * dil_h - pad_h, 0)
    kh_top = tl.minimum(kh0 + BLOCK_KH, KH) - 1
    ih_hi = tl.minimum((OH - 1) * stride_h - pad_h + kh_top * dil_h + 1, H)
    k_count = tl.maximum(ih_hi - ih_lo, 0) * OW
    n_first = split * samples_per_split
    n_last = tl.minimum(n_first + samples_per_split, N)

    acc = tl.zeros([BLOCK_KH, BLOCK_KW], dtype=tl.float32)
    for n in range(n_first, n_last):
        dy_c = dy_ptr + n * dy_sn + c * dy_sc
        x_c = x_ptr + n * x_sn + (c // multiplier) * x_sc
        for k0 in range(0, k_count, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            k_ok = k < k_count
            ih = ih_lo + k // OW
            ow = k % OW
            oh_num = ih[None, :] + pad_h - (kh * dil_h)[:, None]
            oh = oh_num // stride_h
            a_ok = (oh_num >= 0) & (oh * stride_h == oh_num) & (oh < OH)
            a = tl.load(
                dy_c + oh * dy_sh + (ow * dy_sw)[None, :],
                mask=a_ok & kh_ok[:, None] & k_ok[None, :],
                other=0,
            )
            iw = (ow * stride_w - pad_w)[:, None] + (kw * dil_w)[None, :]
            b_ok = (iw >= 0) & (iw < W) & k_ok[:, None] & kw_ok[None, :]
            b = tl.load(x_c + (ih * x_sh)[:, None] + iw * x_sw, mask=b_ok, other=0)
            acc = mma(a.to(DOT_DTYPE), b.to(DOT_DTYPE), acc, DOT_PRECISION)

    dst = partial_ptr + split * C_out * KH * KW + c * KH * KW
    dst += (kh * KW)[:, None] + kw[None, :]
    tl.store(dst, acc, mask=kh_ok[:, None] & kw_ok[None, :])


@triton.jit
def depthwise_small_kernel(
    # pointers
    src_ptr,
    w_ptr,
    bias_ptr,
    dst_ptr,
    # sizes
    C_dst,
    SH,
    SW,
    DH,
    DW,
    R,
    DIV,
    # geometry
    stride_h,
    stride_w,
    pad_h,
    pad_w,
    dil_h,
    dil_w,
    # strides
    src_sn,
    src_sc,
    src_sh,
    src_sw,
    dst_sn,
    dst_sc,
    dst_sh,
    dst_sw,
    dst_offset,
    w_base,
    w_sc,
    w_skh,
    w_skw,
    # meta-parameters
    KH: tl.constexpr,
    KW: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_W: tl.constexpr,
    INDEX_64: tl.constexpr,
    FOLD_Y: tl.constexpr,
):
    """``depthwise_kernel`` with the kernel size compile-time (small kernels, taps unrolled):
    the row pointer tile is built once per kernel row, each tap adds ``kw * dil_w * src_sw``
    (a constant when both are 1, which Triton specializes), so a tap costs one load, one mask
    AND and one FMA per element; the per-tap weights are independent loads the unrolled code
    issues up front. Grid ``(N * channel blocks, spatial tiles)`` (``FOLD_Y``: the tiles
    over axes 1 and 2, :func:`program_y`)."""
    pid_nc = tl.program_id(0)
    pid_hw = program_y(FOLD_Y)
    c_blocks = tl.cdiv(C_dst, BLOCK_C)
    n = pid_nc // c_blocks
    w_tiles = tl.cdiv(DW, BLOCK_W)
    c = (pid_nc % c_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    h = (pid_hw // w_tiles) * BLOCK_H + tl.arange(0, BLOCK_H)
    w = (pid_hw % w_tiles) * BLOCK_W + tl.arange(0, BLOCK_W)
    if INDEX_64:
        n = n.to(tl.int64)
        c = c.to(tl.int64)
        h = h.to(tl.int64)
        w = w.to(tl.int64)
    c_ok = c < C_dst
    out_ok = c_ok[:, None, None] & (h < DH)[None, :, None] & (w < DW)[None, None, :]
    ih0 = h * stride_h - pad_h
    iw0 = w * stride_w - pad_w
    col0 = (iw0 * src_sw)[None, None, :]

    acc = tl.zeros([BLOCK_C, BLOCK_H, BLOCK_W], dtype=ACC_DTYPE)
    for r in range(0, R):
        wc = c * R + r
        src_c = src_ptr + n * src_sn + (wc // DIV) * src_sc
        w_c = w_ptr + w_base + wc * w_sc
        for kh in tl.static_range(KH):
            ih = ih0 + kh * dil_h
            row_ok = out_ok & ((ih >= 0) & (ih < SH))[None, :, None]
            row = src_c[:, None, None] + (ih * src_sh)[None, :, None] + col0
            for kw in tl.static_range(KW):
                iw = iw0 + kw * dil_w
                ok = row_ok & ((iw >= 0) & (iw < SW))[None, None, :]
                x = tl.load(row + kw * dil_w * src_sw, mask=ok, other=0)
                wt = tl.load(w_c + kh * w_skh + kw * w_skw, mask=c_ok, other=0)
                acc += x.to(ACC_DTYPE) * wt.to(ACC_DTYPE)[:, None, None]

    if HAS_BIAS:
        bias = tl.load(bias_ptr + c, mask=c_ok, other=0)
        acc += bias.to(ACC_DTYPE)[:, None, None]
    dst = dst_ptr + dst_offset + n * dst_sn + (c * dst_sc)[:, None, None]
    dst += (h * dst_sh)[None, :, None] + (w * dst_sw)[None, None, :]
    tl.store(dst, acc.to(dst_ptr.dtype.element_ty), mask=out_ok)


@triton.jit
def _window_row(
    accs, src_c, w_c, ih, kh, out_ok, c_ok, iw0_c, SH, SW, src_sh, src_sw, w_skh, w_skw,
    KW: tl.constexpr, STRIDE_W: tl.constexpr, DIL_W: tl.constexpr, BLOCK_W: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
):  # fmt: skip
    """``accs`` (one tile per output column) plus kernel row ``kh``'s taps, its source row
    ``ih`` (per tile row) loaded one column at a time, each column once."""
    row_ok = out_ok & ((ih >= 0) & (ih < SH))[None, :]
    row = src_c + (ih * src_sh)[None, :]
    taps = ()
    for kw in tl.static_range(KW):
        wt = tl.load(w_c + kh * w_skh + kw * w_skw, mask=c_ok, other=0)
        taps = taps + (wt.to(ACC_DTYPE)[:, None],)
    for j in tl.static_range((BLOCK_W - 1) * STRIDE_W + (KW - 1) * DIL_W + 1):
        iw = iw0_c + j
        ok = row_ok & ((iw >= 0) & (iw < SW))[:, None]
        x = tl.load(row + j * src_sw, mask=ok, other=0).to(ACC_DTYPE)
        summed = ()
        for o in tl.static_range(BLOCK_W):
            acc = accs[o]
            for kw in tl.static_range(KW):  # the tap, if any, meeting column j
                if o * STRIDE_W + kw * DIL_W == j:
                    acc += x * taps[kw]
            summed = summed + (acc,)
        accs = summed
    return accs


@triton.jit
def depthwise_window_kernel(
    # pointers
    src_ptr,
    w_ptr,
    bias_ptr,
    dst_ptr,
    # sizes
    C_dst,
    SH,
    SW,
    DH,
    DW,
    KH,
    R,
    DIV,
    # geometry
    stride_h,
    pad_h,
    pad_w,
    dil_h,
    # strides
    src_sn,
    src_sc,
    src_sh,
    src_sw,
    dst_sn,
    dst_sc,
    dst_sh,
    dst_sw,
    w_base,
    w_sc,
    w_skh,
    w_skw,
    # meta-parameters
    KW: tl.constexpr,
    STRIDE_W: tl.constexpr,
    DIL_W: tl.constexpr,
    UNROLL_KH: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_W: tl.constexpr,
    INDEX_64: tl.constexpr,
    FOLD_Y: tl.constexpr,
):
    """The sum of ``depthwise_kernel`` with a sliding window along the width: a program owns
    ``BLOCK_W`` output columns, each a ``[BLOCK_C, BLOCK_H]`` accumulator tile (a tuple of
    tiles: the columns are unrolled), and per kernel row loads each source column the
    window covers once, ``(BLOCK_W - 1) * STRIDE_W + (KW - 1) * DIL_W + 1`` loads, adding it
    into every output column whose tap meets it. ``depthwise_kernel`` loads ``KW`` shifted
    tiles per kernel row instead, each with its own addresses, mask and conversion: at 7 x 7
    that per-tap work, not the multiply-adds or DRAM, was the limit. Width stride and
    dilation are compile-time (they say which column meets which tap); the launcher maps the
    layout's strided spatial axis to the width (the tiles run along the contiguous axis).
    ``UNROLL_KH`` (0, or ``KH``) unrolls the kernel rows too, so that every row's loads can
    be in flight together. Grid ``(N * channel blocks, spatial tiles)`` (``FOLD_Y``: the
    tiles over axes 1 and 2, :func:`program_y`)."""
    pid_nc = tl.program_id(0)
    pid_hw = program_y(FOLD_Y)
    c_blocks = tl.cdiv(C_dst, BLOCK_C)
    n = pid_nc // c_blocks
    w_tiles = tl.cdiv(DW, BLOCK_W)
    c = (pid_nc % c_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    h = (pid_hw // w_tiles) * BLOCK_H + tl.arange(0, BLOCK_H)
    w0 = (pid_hw % w_tiles) * BLOCK_W
    if INDEX_64:
        n = n.to(tl.int64)
        c = c.to(tl.int64)
        h = h.to(tl.int64)
        w0 = w0.to(tl.int64)
    c_ok = c < C_dst
    out_ok = c_ok[:, None] & (h < DH)[None, :]
    iw0 = w0 * STRIDE_W - pad_w  # source column of output column 0, tap 0
    # ... and as a vector over the channels, for masks (the interpreter takes no scalars there)
    iw0_c = tl.zeros_like(c) + iw0
    w0_c = tl.zeros_like(c) + w0

    accs = ()
    for _ in tl.static_range(BLOCK_W):
        accs = accs + (tl.zeros([BLOCK_C, BLOCK_H], dtype=ACC_DTYPE),)
    for r in range(0, R):
        wc = c * R + r
        src_c = (src_ptr + n * src_sn + (wc // DIV) * src_sc)[:, None] + iw0 * src_sw
        w_c = w_ptr + w_base + wc * w_sc
        ih0 = h * stride_h - pad_h
        if UNROLL_KH:  # every kernel row's loads visible at once (UNROLL_KH == KH)
            for kh in tl.static_range(UNROLL_KH):
                accs = _window_row(
                    accs, src_c, w_c, ih0 + kh * dil_h, kh, out_ok, c_ok, iw0_c, SH, SW,
                    src_sh, src_sw, w_skh, w_skw, KW, STRIDE_W, DIL_W, BLOCK_W, ACC_DTYPE,
                )  # fmt: skip
        else:
            for kh in range(0, KH):
                accs = _window_row(
                    accs, src_c, w_c, ih0 + kh * dil_h, kh, out_ok, c_ok, iw0_c, SH, SW,
                    src_sh, src_sw, w_skh, w_skw, KW, STRIDE_W, DIL_W, BLOCK_W, ACC_DTYPE,
                )  # fmt: skip

    dst = dst_ptr + n * dst_sn + (c * dst_sc)[:, None] + (h * dst_sh)[None, :] + w0 * dst_sw
    if HAS_BIAS:
        bias = tl.load(bias_ptr + c, mask=c_ok, other=0).to(ACC_DTYPE)[:, None]
    for o in tl.static_range(BLOCK_W):
        acc = accs[o]
        if HAS_BIAS:
            acc += bias
        ok = out_ok & (w0_c + o < DW)[:, None]
        tl.store(dst + o * dst_sw, acc.to(dst_ptr.dtype.element_ty), mask=ok)


@triton.jit
def depthwise_window_grad_weight_kernel(
    # pointers
    dy_ptr,
    x_ptr,
    partial_ptr,
    # sizes
    samples_per_split,
    N,
    C_out,
    H,
    W,
    OH,
    OW,
    KH,
    TAPS,
    multiplier,
    # geometry
    stride_h,
    pad_h,
    pad_w,
    dil_h,
    # strides
    dy_sn,
    dy_sc,
    dy_sh,
    dy_sw,
    x_sn,
    x_sc,
    x_sh,
    x_sw,
    tap_skh,
    tap_skw,
    # meta-parameters
    KW: tl.constexpr,
    STRIDE_W: tl.constexpr,
    DIL_W: tl.constexpr,
    BIAS_GRAD: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_W: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """Weight gradient with the forward window's column reuse: a program owns a channel
    block, ``ROWS`` kernel rows from ``kh0`` and a tile of output rows, and walks the output
    width in strips of ``BLOCK_W`` columns; per strip it loads the ``dy`` columns once (a
    tuple of ``[BLOCK_C, BLOCK_H]`` tiles) and, per kernel row, each source column the
    strip's taps meet once, adding ``dy[o] * x[column]`` into the accumulator tile of the
    tap joining them (``ROWS * KW`` tiles, reduced once at the end). A kernel row's source
    tile is the previous row's shifted by ``dil_h`` rows: within one program those loads
    hit L1, where programs of one kernel row each would each bring ``dy`` and ``x`` through
    L2 again. ``partial`` is ``(splits * row tiles, C_out * (TAPS + BIAS_GRAD))`` contiguous;
    tap ``(kh, kw)`` of channel ``c`` goes to column ``c * TAPS + kh * tap_skh + kw *
    tap_skw`` (the launcher may pass the spatial axes swapped), the bias sums (``dy`` per
    channel, from the loaded tiles) after them, written by the ``kh0 == 0`` programs. Grid
    ``(cdiv(KH, ROWS) * channel blocks * row tiles, splits)``."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    tiles = tl.cdiv(OH, BLOCK_H)
    tile = pid % tiles
    c_blocks = tl.cdiv(C_out, BLOCK_C)
    kh0 = (pid // (tiles * c_blocks)) * ROWS
    c = ((pid // tiles) % c_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    h = tile * BLOCK_H + tl.arange(0, BLOCK_H)
    if INDEX_64:
        c = c.to(tl.int64)
        h = h.to(tl.int64)
        split = split.to(tl.int64)
        tile = tile.to(tl.int64)
    c_ok = c < C_out
    out_ok = c_ok[:, None] & (h < OH)[None, :]
    ih0 = h * stride_h - pad_h + kh0 * dil_h  # source row of kernel row kh0
    dy_off = (c * dy_sc)[:, None] + (h * dy_sh)[None, :]
    x_off = ((c // multiplier) * x_sc)[:, None] + (ih0 * x_sh)[None, :]
    zero = tl.zeros_like(c)  # column tests as vectors (the interpreter takes no scalar masks)
    n_first = split * samples_per_split
    n_last = tl.minimum(n_first + samples_per_split, N)

    accs = ()
    for _ in tl.static_range(ROWS * KW):
        accs = accs + (tl.zeros([BLOCK_C, BLOCK_H], dtype=ACC_DTYPE),)
    a_bias = tl.zeros([BLOCK_C, BLOCK_H], dtype=ACC_DTYPE)
    for n in range(n_first, n_last):
        dy_n = dy_ptr + n * dy_sn + dy_off
        x_n = x_ptr + n * x_sn + x_off
        for w0 in range(0, OW, BLOCK_W):
            dys = ()
            for o in tl.static_range(BLOCK_W):
                ok = out_ok & (zero + w0 + o < OW)[:, None]
                d = tl.load(dy_n + (w0 + o) * dy_sw, mask=ok, other=0).to(ACC_DTYPE)
                if BIAS_GRAD:
                    a_bias += d
                dys = dys + (d,)
            iw0 = w0 * STRIDE_W - pad_w
            summed = ()
            for r in tl.static_range(ROWS):
                ih = ih0 + r * dil_h
                row_ok = (ih >= 0) & (ih < H)
                x_ok = out_ok & row_ok[None, :] & (zero + kh0 + r < KH)[:, None]
                if INDEX_64:  # (the row step in 64 bits: dil_h * x_sh may pass int32)
                    x_row = x_n + ((tl.zeros_like(h) + r * dil_h) * x_sh)[None, :]
                else:
                    x_row = x_n + r * dil_h * x_sh
                row_accs = ()
                for kw in tl.static_range(KW):
                    row_accs = row_accs + (accs[r * KW + kw],)
                for j in tl.static_range((BLOCK_W - 1) * STRIDE_W + (KW - 1) * DIL_W + 1):
                    iw = zero + iw0 + j
                    ok = x_ok & ((iw >= 0) & (iw < W))[:, None]
                    x = tl.load(x_row + (iw0 + j) * x_sw, mask=ok, other=0).to(ACC_DTYPE)
                    updated = ()
                    for kw in tl.static_range(KW):
                        acc = row_accs[kw]
                        for o in tl.static_range(BLOCK_W):  # the output column, if any, at tap kw
                            if o * STRIDE_W + kw * DIL_W == j:
                                acc += dys[o] * x
                        updated = updated + (acc,)
                    row_accs = updated
                summed = summed + row_accs
            accs = summed

    row = partial_ptr + (split * tiles + tile) * C_out * (TAPS + BIAS_GRAD)
    dst = row + c * TAPS
    for r in tl.static_range(ROWS):
        tap_ok = c_ok & (zero + kh0 + r < KH)
        for kw in tl.static_range(KW):
            t = (kh0 + r) * tap_skh + kw * tap_skw
            tl.store(dst + t, tl.sum(accs[r * KW + kw], 1), mask=tap_ok)
    if BIAS_GRAD:
        tl.store(row + C_out * TAPS + c, tl.sum(a_bias, 1), mask=c_ok & (zero + kh0 == 0))


@triton.jit
def _wgrad_tap(acc, dy, x_n, x_off, ih0, iw0, H, W, out_ok, kh, kw, dil_h, dil_w, x_sh, x_sw):
    """acc + dy * x shifted to tap (kh, kw); zero outside the image."""
    ih = ih0 + kh * dil_h
    iw = iw0 + kw * dil_w
    ok = out_ok & ((ih >= 0) & (ih < H))[None, :, None] & ((iw >= 0) & (iw < W))[None, None, :]
    x = tl.load(x_n + x_off + (kh * dil_h * x_sh + kw * dil_w * x_sw), mask=ok, other=0)
    return acc + dy * x.to(acc.dtype)


@triton.jit
def _wgrad_store(dst, acc, t, c_ok):
    tl.store(dst + t, tl.sum(tl.sum(acc, 2), 1), mask=c_ok)


@triton.jit
def depthwise_small_grad_weight_kernel(
    # pointers
    dy_ptr,
    x_ptr,
    partial_ptr,
    # sizes
    samples_per_split,
    N,
    C_out,
    H,
    W,
    OH,
    OW,
    multiplier,
    # geometry
    stride_h,
    stride_w,
    pad_h,
    pad_w,
    dil_h,
    dil_w,
    # strides
    dy_sn,
    dy_sc,
    dy_sh,
    dy_sw,
    x_sn,
    x_sc,
    x_sh,
    x_sw,
    KH,
    KW,
    # meta-parameters
    BKH: tl.constexpr,
    BKW: tl.constexpr,
    BIAS_GRAD: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_W: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """Weight gradient, one elementwise accumulator tile per tap of a ``BKH x BKW`` block of
    taps (up to 3 x 3: nine tiles), summed over the split's samples with one ``dy`` load and
    one shifted ``x`` load per tap and sample; the tiles are reduced once, at the end. A
    kernel larger than the block is cut into tap blocks, one per program (the last ones
    partly past the kernel: their stores are masked). ``partial`` is contiguous,
    ``(splits * spatial tiles, C_out * KH*KW)``, or with ``BIAS_GRAD``
    ``(splits * spatial tiles, C_out * (KH*KW + 1))``: each row then ends with the tile's
    sums of ``dy`` per channel (the bias gradient, from the ``dy`` already loaded; written by
    the first tap block). Grid ``(tap blocks * channel blocks * spatial tiles, splits)``."""
    pid_ct = tl.program_id(0)
    split = tl.program_id(1)
    tiles = tl.cdiv(OH, BLOCK_H) * tl.cdiv(OW, BLOCK_W)
    tile = pid_ct % tiles
    w_tiles = tl.cdiv(OW, BLOCK_W)
    c_blocks = tl.cdiv(C_out, BLOCK_C)
    tap_block = pid_ct // (tiles * c_blocks)
    kw_blocks = tl.cdiv(KW, BKW)
    kh0 = (tap_block // kw_blocks) * BKH
    kw0 = (tap_block % kw_blocks) * BKW
    c = ((pid_ct // tiles) % c_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    h = (tile // w_tiles) * BLOCK_H + tl.arange(0, BLOCK_H)
    w = (tile % w_tiles) * BLOCK_W + tl.arange(0, BLOCK_W)
    if INDEX_64:
        c = c.to(tl.int64)
        h = h.to(tl.int64)
        w = w.to(tl.int64)
        split = split.to(tl.int64)
        tile = tile.to(tl.int64)
        # (each tap's step ``kh * dil_h * x_sh`` past 2**31 too: scalars, outside the loop;
        # ``tl.cast``, not ``.to``: a stride of 1 comes as a Python int, which the JIT
        # specialises)
        x_sh = tl.cast(x_sh, tl.int64)
        x_sw = tl.cast(x_sw, tl.int64)
    c_ok = c < C_out
    out_ok = c_ok[:, None, None] & (h < OH)[None, :, None] & (w < OW)[None, None, :]
    dy_off = (c * dy_sc)[:, None, None] + (h * dy_sh)[None, :, None] + (w * dy_sw)[None, None, :]
    ih0 = h * stride_h - pad_h + kh0 * dil_h  # tap (kh0, kw0)'s source position
    iw0 = w * stride_w - pad_w + kw0 * dil_w
    x_off = ((c // multiplier) * x_sc)[:, None, None] + (ih0 * x_sh)[None, :, None]
    x_off += (iw0 * x_sw)[None, None, :]
    n_first = split * samples_per_split
    n_last = tl.minimum(n_first + samples_per_split, N)

    a00 = tl.zeros([BLOCK_C, BLOCK_H, BLOCK_W], dtype=ACC_DTYPE)
    a01 = tl.zeros([BLOCK_C, BLOCK_H, BLOCK_W], dtype=ACC_DTYPE)
    a02 = tl.zeros([BLOCK_C, BLOCK_H, BLOCK_W], dtype=ACC_DTYPE)
    a10 = tl.zeros([BLOCK_C, BLOCK_H, BLOCK_W], dtype=ACC_DTYPE)
    a11 = tl.zeros([BLOCK_C, BLOCK_H, BLOCK_W], dtype=ACC_DTYPE)
    a12 = tl.zeros([BLOCK_C, BLOCK_H, BLOCK_W], dtype=ACC_DTYPE)
    a20 = tl.zeros([BLOCK_C, BLOCK_H, BLOCK_W], dtype=ACC_DTYPE)
    a21 = tl.zeros([BLOCK_C, BLOCK_H, BLOCK_W], dtype=ACC_DTYPE)
    a22 = tl.zeros([BLOCK_C, BLOCK_H, BLOCK_W], dtype=ACC_DTYPE)
    a_bias = tl.zeros([BLOCK_C, BLOCK_H, BLOCK_W], dtype=ACC_DTYPE)
    for n in range(n_first, n_last):
        dy = tl.load(dy_ptr + n * dy_sn + dy_off, mask=out_ok, other=0).to(ACC_DTYPE)
        if BIAS_GRAD:
            a_bias += dy
        x_n = x_ptr + n * x_sn
        a00 = _wgrad_tap(
            a00, dy, x_n, x_off, ih0, iw0, H, W, out_ok, 0, 0, dil_h, dil_w, x_sh, x_sw
        )
        if BKW > 1:
            a01 = _wgrad_tap(
                a01, dy, x_n, x_off, ih0, iw0, H, W, out_ok, 0, 1, dil_h, dil_w, x_sh, x_sw
            )
        if BKW > 2:
            a02 = _wgrad_tap(
                a02, dy, x_n, x_off, ih0, iw0, H, W, out_ok, 0, 2, dil_h, dil_w, x_sh, x_sw
            )
        if BKH > 1:
            a10 = _wgrad_tap(
                a10, dy, x_n, x_off, ih0, iw0, H, W, out_ok, 1, 0, dil_h, dil_w, x_sh, x_sw
            )
            if BKW > 1:
                a11 = _wgrad_tap(
                    a11, dy, x_n, x_off, ih0, iw0, H, W, out_ok, 1, 1, dil_h, dil_w, x_sh, x_sw
                )
            if BKW > 2:
                a12 = _wgrad_tap(
                    a12, dy, x_n, x_off, ih0, iw0, H, W, out_ok, 1, 2, dil_h, dil_w, x_sh, x_sw
                )
        if BKH > 2:
            a20 = _wgrad_tap(
                a20, dy, x_n, x_off, ih0, iw0, H, W, out_ok, 2, 0, dil_h, dil_w, x_sh, x_sw
            )
            if BKW > 1:
                a21 = _wgrad_tap(
                    a21, dy, x_n, x_off, ih0, iw0, H, W, out_ok, 2, 1, dil_h, dil_w, x_sh, x_sw
                )
            if BKW > 2:
                a22 = _wgrad_tap(
                    a22, dy, x_n, x_off, ih0, iw0, H, W, out_ok, 2, 2, dil_h, dil_w, x_sh, x_sw
                )

    row = partial_ptr + (split * tiles + tile) * C_out * (KH * KW + BIAS_GRAD)
    dst = row + c * (KH * KW) + kh0 * KW + kw0
    # tap (kh0 + i, kw0 + j) is stored at i * KW + j, if it is inside the kernel (the tests
    # are vectors over the channels: the interpreter takes no scalar in a mask)
    zero = tl.zeros_like(c)
    if BIAS_GRAD:
        _wgrad_store(row + C_out * (KH * KW), a_bias, c, c_ok & (zero + tap_block == 0))
    h1, h2 = zero + kh0 + 1 < KH, zero + kh0 + 2 < KH
    w1, w2 = zero + kw0 + 1 < KW, zero + kw0 + 2 < KW
    _wgrad_store(dst, a00, 0, c_ok)
    if BKW > 1:
        _wgrad_store(dst, a01, 1, c_ok & w1)
    if BKW > 2:
        _wgrad_store(dst, a02, 2, c_ok & w2)
    if BKH > 1:
        _wgrad_store(dst, a10, KW, c_ok & h1)
        if BKW > 1:
            _wgrad_store(dst, a11, KW + 1, c_ok & h1 & w1)
        if BKW > 2:
            _wgrad_store(dst, a12, KW + 2, c_ok & h1 & w2)
    if BKH > 2:
        _wgrad_store(dst, a20, 2 * KW, c_ok & h2)
        if BKW > 1:
            _wgrad_store(dst, a21, 2 * KW + 1, c_ok & h2 & w1)
        if BKW > 2:
            _wgrad_store(dst, a22, 2 * KW + 2, c_ok & h2 & w2)
