"""Direct convolution: no column buffer, the kernel window is walked in registers.

Index vocabulary (2-D spatial, any memory format: every tensor is read through element strides):

* ``src`` is what the window slides over and ``dst`` what is written. The forward has
  ``src = x`` (N, C_in, H, W) and ``dst = y`` (N, C_out, OH, OW); the input gradient
  (``TRANSPOSED``) has ``src = dy`` and ``dst = dx``, with the same kernel walking the window
  backwards: ``dx[ih] += dy[oh] * w`` wherever ``oh*stride - pad + kh*dil == ih``, gathered so
  each program writes its own outputs (no atomics).
* within a group ``g``, ``s`` counts source channels and ``d`` destination channels; the
  weight element of ``(s, d, kh, kw)`` sits at
  ``w + g*w_sg + s*w_ss + d*w_sd + kh*w_skh + kw*w_skw`` (the forward passes
  ``w_ss = weight.stride(1)``, ``w_sd = weight.stride(0)``; the gradient swaps them).

``direct_conv_kernel``: one program owns ``BLOCK_P`` destination positions (flattened over
``n, h, w``) x ``BLOCK_D`` destination channels of one group; its accumulator
``[BLOCK_P, BLOCK_D]`` stays in registers while it loops over the KH*KW taps (run-time loops,
so kernel size is unbounded) and, per tap, over the group's source channels ``BLOCK_S`` at a
time. Taps in the padding are masked, never loaded. Floats with at least 16 channels on both
sides use ``tl.dot`` (``[P, S] @ [S, D]``, fp32 accumulate; ``DOT_PRECISION`` decides whether
fp32 stays fp32-accurate; operands are cast to ``DOT_DTYPE``, their own dtype except under
the interpreter, whose NumPy dot has no bfloat16); otherwise, and always for integers (int64
accumulate, exact) and float64, one source channel at a time as an outer product
``acc += x[:, None] * w[None, :]``.

Why not ``tl.sum(x[:, :, None] * w[None, :, :], 1)`` over a ``[P, S, D]`` product (what this
kernel did before): with ``S`` narrower than the lanes the compiled layout puts on that axis
(seen with ``D = 16``, ``S < 8``, 4 warps, Triton 3.6 on an H100), the reduction adds the
replicated copies too, so every output came out ``8/S`` times too large (2x, 4x, 8x). The
interpreter sums NumPy arrays and was right, so only the GPU showed it (issue 9). The outer
product has no cross-lane reduction at all. Where a ``tl.sum`` stays (the weight gradient
below, the depthwise kernels), the reduced axis is at least 16 wide and the GPU fuzz
(``tritonconv verify --fuzz``) reaches every tile configuration the launchers choose.

``direct_grad_weight_kernel``: ``dW[co, r] = sum over positions of dy[pos, co] * cols[pos, r]``
with ``r = (ci*KH + kh)*KW + kw`` gathered on the fly. One program owns a ``[BLOCK_D, BLOCK_R]``
tile of one group's weight and one *split* (a fixed range of positions) and walks its positions
in order; the launcher sums the splits' partial tiles in a fixed order. Bitwise reproducible.

``INDEX_64`` switches index arithmetic to int64 (a tensor with 2**31 elements or more).
"""

from __future__ import annotations

import triton.language as tl

from . import jit_runtime_integers
from .mma import mma

# Gather kernels: every address is computed per element and no access is vectorised, so no
# integer argument (sizes, strides, geometry) is worth a specialisation.


@jit_runtime_integers
def direct_conv_kernel(
    # pointers
    src_ptr,
    w_ptr,
    bias_ptr,
    dst_ptr,
    # sizes
    num_positions,
    SH,
    SW,
    DH,
    DW,
    src_per_group,
    dst_per_group,
    KH,
    KW,
    # geometry (of the forward convolution)
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
    w_sg,
    w_ss,
    w_sd,
    w_skh,
    w_skw,
    # meta-parameters
    TRANSPOSED: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    USE_DOT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """dst[n, g*Dg + d, h, w] = sum over taps, s of src[n, g*Sg + s, src_h, src_w] * w(s, d, tap).

    Forward: ``src_h = h*stride - pad + kh*dil``. Transposed (input gradient):
    ``src_h = (h + pad - kh*dil) / stride`` where that division is exact.
    """
    pid_p = tl.program_id(0)
    pid_d = tl.program_id(1)
    d_blocks = tl.cdiv(dst_per_group, BLOCK_D)
    g = pid_d // d_blocks
    if INDEX_64:  # before the multiply: the first position can pass int32
        pid_p = pid_p.to(tl.int64)
        g = g.to(tl.int64)
    p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    d = (pid_d % d_blocks) * BLOCK_D + tl.arange(0, BLOCK_D)
    p_ok = p < num_positions
    d_ok = d < dst_per_group
    dw = p % DW
    t = p // DW
    dh = t % DH
    n = t // DH
    src_n = src_ptr + n * src_sn + (g * src_per_group) * src_sc
    w_g = w_ptr + g * w_sg + d * w_sd

    acc = tl.zeros([BLOCK_P, BLOCK_D], dtype=ACC_DTYPE)
    for kh in range(0, KH):
        if TRANSPOSED:
            num_h = dh + pad_h - kh * dil_h
            sh = num_h // stride_h
            ok_h = (num_h >= 0) & (sh * stride_h == num_h) & (sh < SH)
        else:
            sh = dh * stride_h - pad_h + kh * dil_h
            ok_h = (sh >= 0) & (sh < SH)
        for kw in range(0, KW):
            if TRANSPOSED:
                num_w = dw + pad_w - kw * dil_w
                sw = num_w // stride_w
                ok = ok_h & (num_w >= 0) & (sw * stride_w == num_w) & (sw < SW)
            else:
                sw = dw * stride_w - pad_w + kw * dil_w
                ok = ok_h & (sw >= 0) & (sw < SW)
            ok = ok & p_ok
            src_tap = src_n + sh * src_sh + sw * src_sw
            w_tap = w_g + kh * w_skh + kw * w_skw
            if USE_DOT:
                for s0 in range(0, src_per_group, BLOCK_S):
                    s = s0 + tl.arange(0, BLOCK_S)
                    s_ok = s < src_per_group
                    x = tl.load(
                        src_tap[:, None] + (s * src_sc)[None, :],
                        mask=ok[:, None] & s_ok[None, :],
                        other=0,
                    )
                    w = tl.load(
                        w_tap[None, :] + (s * w_ss)[:, None],
                        mask=s_ok[:, None] & d_ok[None, :],
                        other=0,
                    )
                    acc = mma(x.to(DOT_DTYPE), w.to(DOT_DTYPE), acc, DOT_PRECISION)
            else:
                # One source channel at a time, an outer product: no reduction across lanes
                # (see the module docstring for why not a broadcast-and-sum over [P, S, D]).
                for s in range(0, src_per_group):
                    x = tl.load(src_tap + s * src_sc, mask=ok, other=0)
                    w = tl.load(w_tap + s * w_ss, mask=d_ok, other=0)
                    acc += x.to(ACC_DTYPE)[:, None] * w.to(ACC_DTYPE)[None, :]

    if HAS_BIAS:
        bias = tl.load(bias_ptr + g * dst_per_group + d, mask=d_ok, other=0)
        acc += bias.to(ACC_DTYPE)[None, :]
    dst = dst_ptr + (n * dst_sn + dh * dst_sh + dw * dst_sw)[:, None]
    dst += ((g * dst_per_group + d) * dst_sc)[None, :]
    tl.store(dst, acc.to(dst_ptr.dtype.element_ty), mask=p_ok[:, None] & d_ok[None, :])


@jit_runtime_integers
def direct_grad_weight_kernel(
    # pointers
    dy_ptr,
    x_ptr,
    partial_ptr,
    # sizes
    num_positions,
    positions_per_split,
    H,
    W,
    OH,
    OW,
    in_per_group,
    out_per_group,
    KH,
    KW,
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
    partial_split_stride,
    # meta-parameters
    USE_DOT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_P: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """partial[split, g*Dg + d, r] = sum over the split's positions of dy[pos, d] * cols[pos, r].

    ``partial`` is ``(splits, C_out, Cg_in*KH*KW)`` contiguous; the accumulator
    ``[BLOCK_D, BLOCK_R]`` stays in registers across the whole split.
    """
    pid_tile = tl.program_id(0)
    split = tl.program_id(1)
    rows = in_per_group * KH * KW
    r_blocks = tl.cdiv(rows, BLOCK_R)
    d_blocks = tl.cdiv(out_per_group, BLOCK_D)
    g = pid_tile // (r_blocks * d_blocks)
    tile = pid_tile % (r_blocks * d_blocks)
    d = (tile // r_blocks) * BLOCK_D + tl.arange(0, BLOCK_D)
    r = (tile % r_blocks) * BLOCK_R + tl.arange(0, BLOCK_R)
    if INDEX_64:
        g = g.to(tl.int64)
        split = split.to(tl.int64)
    d_ok = d < out_per_group
    r_ok = r < rows
    kk = KH * KW
    ci = r // kk
    kh = (r % kk) // KW
    kw = r % KW
    dy_c = dy_ptr + ((g * out_per_group + d) * dy_sc)[:, None]
    x_c = x_ptr + ((g * in_per_group + ci) * x_sc)[None, :]

    acc = tl.zeros([BLOCK_D, BLOCK_R], dtype=ACC_DTYPE)
    start = split * positions_per_split
    end = tl.minimum(start + positions_per_split, num_positions)
    for p0 in range(start, end, BLOCK_P):
        p = p0 + tl.arange(0, BLOCK_P)
        p_ok = p < end
        ow = p % OW
        t = p // OW
        oh = t % OH
        n = t // OH
        dy = tl.load(
            dy_c + (n * dy_sn + oh * dy_sh + ow * dy_sw)[None, :],
            mask=d_ok[:, None] & p_ok[None, :],
            other=0,
        )
        ih = oh[:, None] * stride_h - pad_h + (kh * dil_h)[None, :]
        iw = ow[:, None] * stride_w - pad_w + (kw * dil_w)[None, :]
        inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        cols = tl.load(
            x_c + (n * x_sn)[:, None] + ih * x_sh + iw * x_sw,
            mask=inside & p_ok[:, None] & r_ok[None, :],
            other=0,
        )
        if USE_DOT:
            acc = mma(dy.to(DOT_DTYPE), cols.to(DOT_DTYPE), acc, DOT_PRECISION)
        else:
            acc += tl.sum(dy.to(ACC_DTYPE)[:, :, None] * cols.to(ACC_DTYPE)[None, :, :], 1)

    dst = partial_ptr + split * partial_split_stride
    dst += ((g * out_per_group + d) * rows)[:, None] + r[None, :]
    tl.store(dst, acc, mask=d_ok[:, None] & r_ok[None, :])
