"""Implicit-GEMM convolution on tensor cores: no column buffer, written over 3 spatial axes.

1-D and 2-D convolutions are the 3-D case with size-1 axes (unit kernel, stride, dilation; no
padding), so every dimension runs the same two kernels.

``conv_igemm_kernel`` computes the forward convolution and, with ``TRANSPOSED``, its input
gradient (hence also the transposed convolution) as one GEMM per group:

* rows ``M``: destination positions (flattened ``n, d, h, w``), ``BLOCK_M`` per program;
* columns: destination channels of the group, ``BLOCK_N`` per program;
* reduction: taps x source channels, one tap and ``BLOCK_K`` channels per step, the source tile
  loaded straight from the image (taps in the padding masked, never loaded).

Vocabulary as in ``direct.py``: ``src`` is what the window slides over (forward: x; input
gradient: dy), ``dst`` what is written; in group ``g`` the weight element of source channel
``s``, destination channel ``d`` and tap ``(kd, kh, kw)`` sits at
``w + g*w_sg + s*w_ss + d*w_sd + kd*w_skd + kh*w_skh + kw*w_skw``. The launcher passes a
weight with ``w_ss == 1`` or ``w_sd == 1`` (copying it so when neither holds), so the
``[BLOCK_K, BLOCK_N]`` weight tile is read along one of its axes: the forward of a
channels-last weight (``w_ss == 1``, specialised by Triton) and its input gradient
(``w_sd == 1``) read the weight as it is.

**Input gradient without zero taps.** ``dx[i] = sum over o, k with o*stride - pad + k*dil == i
of dy[o] * w[k]``: for a stride above 1 most taps of a given ``i`` have no ``o``. The positions
``i`` split into ``stride`` *phases* per axis (``i = r + stride*q``); within a phase the taps that
have an ``o`` are the same for every position: ``k = k0 + j*kstep`` with
``kstep = stride / gcd(stride, dil)`` and ``k0`` the first tap whose ``r + pad - k*dil`` is a
multiple of the stride, and then ``o = (i + pad - k0*dil) / stride - j*(kstep*dil/stride)``,
exact. The grid's third axis is the phase; each program multiplies only its phase's taps.
The forward is the one-phase case with ``k0 = 0``, ``kstep = 1``, ``o -> i = o*stride - pad +
k*dil``: both walk ``source = base + j*step`` per axis.

``conv_igemm_wgrad_kernel``: ``dW[g, co, ci, tap] = sum over positions p of dy[p, co] *
x[p shifted by the tap, ci]``, a GEMM per (group, tap) reducing over ``N * output positions``.
The positions are cut into fixed *splits*, each program writes its split's fp32 partial tile,
and ``sum_partials`` adds the splits in a fixed order: deterministic, bitwise reproducible.
Its reduction axis is the flattened ``(n, d, h, w)`` position, so every step needs each
position's coordinates: dividing a ``[BLOCK_K]`` vector of positions by the output sizes costs
a 32-bit division per element per axis, which GPUs emulate in ~25 instructions, and made the
first version's loop about four times longer in ALU work than in tensor-core work
(benchmarks/NOTES.md). With ``SMALL_DIVIDE`` nothing in the loop divides: the split's first
position is divided once, before it; each step's positions are ``first + i`` with
``i < BLOCK_K``, their carries into the next axis quotients of small integers computed in fp32
(:func:`_small_quotient`, exact below 2**21: the launcher checks), and the next step's first
position is carried the same way. ``FLAT_DY``: ``dy``'s position strides are those of a dense
channels-last tensor, so a position's ``dy`` offset is the position times the width stride and
the ``dy`` tile needs no coordinates at all; ``POINTWISE`` (a 1x1 window at stride 1, unpadded,
over flat ``dy`` and ``x``): ``x``'s positions are ``dy``'s, so no position has coordinates.

**Specialised loops** (constexprs the launchers set, each one less piece of per-step integer
work; the SASS of each loop is counted by benchmarks/ptx_loop.py): the forward loop walks
``(tap, channel block)`` steps with counters carried from step to step instead of dividing
the step number, and with ``WINDOW`` false (one tap) its bounds are the same at every step;
``THREE_D`` false (a one-deep problem with an unpadded depth) drops every depth coordinate and
bound check; the weight gradient's ``EVEN_C`` (the tiles divide both channel counts) drops
the channel masks, so each loaded vector has one predicate.

Floats of 16 and 32 bits multiply on tensor cores (``USE_DOT``) and accumulate in fp32;
``DOT_PRECISION`` decides whether fp32 operands use TF32 or fp32 products (``ieee``).
Integers and float64 take the same loops without tensor cores, accumulating in ``ACC_DTYPE``
(int64: exact, wrapping like PyTorch; float64): the forward with ``BLOCK_K == 1``, each step an
outer product ``[BLOCK_M, 1] * [1, BLOCK_N]`` (no reduction across lanes, the pitfall
``direct.py`` describes); the weight gradient sums ``[M, K, N]`` products over ``BLOCK_K >= 16``
positions, as ``direct_grad_weight_kernel`` does (one position per step would cost the
interpreter minutes).
``INDEX_64`` switches index arithmetic to int64.

**TMA kernels** (Hopper; 16-bit, and TF32 for 1x1 layers; every tile a descriptor box, no
address arithmetic in the loop): ``pointwise_tma_kernel``, a 1x1 stride-1 layer as one GEMM
over channels-last rows (and a kernel-equals-stride transposed convolution, its columns
scattered to the taps' positions); ``window_tma_kernel``, a stride-1 window's forward and
input gradient from boxes of the image at each tap's shifted corner, the padding the
hardware's zero fill; ``wgrad_tma_kernel``, its weight gradient from one-row boxes of dy and
of x at the tap's shift, reduced over fixed splits of the rows.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .mma import bf16x6_step, lift, mma, split_bf16


@triton.jit
def _first_tap(r, pad, dil, stride, kstep, K):
    """The first tap ``k`` in ``[0, kstep)`` with ``(r + pad - k*dil) % stride == 0``, or ``K``
    (no tap) when there is none."""
    k0 = K + 0 * kstep  # (the wider of the two types: the loop's index has kstep's)
    for j in range(0, kstep):
        k0 = tl.where(((r + pad - j * dil) % stride == 0) & (k0 == K), j, k0)
    return k0


@triton.jit
def _small_quotient(t, d, inv_d):
    """``t // d`` for integers ``0 <= t < 2**21`` and ``d >= 1``, ``inv_d = 1 / d`` in fp32:
    ``(t + 0.5) / d`` is at least ``0.5 / d`` away from every integer, more than the fp32
    rounding of ``t * inv_d + 0.5 * inv_d`` can move it at that size (three instructions
    instead of an emulated division)."""
    return (t.to(tl.float32) * inv_d + 0.5 * inv_d).to(tl.int32)


@triton.jit
def _aligned(value, ALIGN: tl.constexpr):
    """``value``, a multiple of ``ALIGN`` (the launcher checked), written so that Triton knows
    it too: its alignment analysis sees through ``// ALIGN * ALIGN`` (a shift pair), not
    through ``tl.multiple_of`` on a scalar argument (the PTX is the same without it)."""
    return value // ALIGN * ALIGN


@triton.jit
def _within(v, n, UNSIGNED: tl.constexpr = True):
    """``0 <= v < n`` for int32 ``v`` and ``n >= 0`` as one unsigned comparison (a negative
    ``v`` reads as at least 2^31): half the compares of a bounds check. (``n`` may be a
    constant: the JIT makes an argument equal to 1 one.)"""
    bound = tl.zeros_like(v) + n
    if UNSIGNED and bound.dtype == tl.int32:  # (v and n both 32-bit: else two compares)
        return v.to(tl.uint32, bitcast=True) < bound.to(tl.uint32, bitcast=True)
    return (v >= 0) & (v < n)


@triton.jit
def conv_igemm_kernel(
    # pointers
    src_ptr,
    w_ptr,
    bias_ptr,
    dst_ptr,
    # sizes
    M,
    QD,
    QH,
    QW,
    SD,
    SH,
    SW,
    DD,
    DH,
    DW,
    src_per_group,
    dst_per_group,
    KD,
    KH,
    KW,
    # geometry (of the forward convolution)
    stride_d,
    stride_h,
    stride_w,
    pad_d,
    pad_h,
    pad_w,
    dil_d,
    dil_h,
    dil_w,
    # (taps between two that reach the same phase: ``kstep`` above. No parameter name starts
    # with "ks": Inductor types such arguments as int64, its name for dynamic sizes, which
    # made _first_tap's loop change k0's type and the compile fail; session 16)
    tap_step_d,
    tap_step_h,
    tap_step_w,
    # strides
    src_sn,
    src_sc,
    src_sd,
    src_sh,
    src_sw,
    dst_sn,
    dst_sc,
    dst_sd,
    dst_sh,
    dst_sw,
    w_sg,
    w_sd,
    w_ss,
    w_skd,
    w_skh,
    w_skw,
    # the real channels per group when PACK groups share a program (else unused)
    src_g,
    dst_g,
    # SPLIT_K: elements between two splits' partial outputs (else unused)
    dst_split_stride,
    # meta-parameters
    TRANSPOSED: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    EVEN_K: tl.constexpr,
    THREE_D: tl.constexpr,
    WINDOW: tl.constexpr,
    USE_DOT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_N2: tl.constexpr,
    GROUP_M: tl.constexpr,
    PACK: tl.constexpr,
    INDEX_64: tl.constexpr,
    ALIGN: tl.constexpr = 1,
    ALIGN_W_SS: tl.constexpr = False,
    SPLIT_K: tl.constexpr = False,
    FOLD_Z: tl.constexpr = False,
    SWAP: tl.constexpr = False,
    TAP_BITS: tl.constexpr = False,
):
    """dst[n, g*Dg + d, pos] = sum over taps, s of src[n, g*Sg + s, source(pos, tap)] * w(s, d, tap)
    (+ bias); ``M = N*QD*QH*QW`` rows per phase (forward: ``Q = D``, the output size).

    ``ALIGN``: a power of two (at most 8) dividing every position, group and tap stride of the
    three tensors (in elements), which the launcher checked. Triton infers alignment of integer
    arguments only from multiples of 16, so channel counts such as 24, 40, 120 or 184 (strides
    that are multiples of 8 but not 16) would otherwise load and store element by element,
    unpipelined (MobileNetV3's 120 -> 40 1x1 layer ran at 0.09x cuDNN). ``ALIGN_W_SS``: the
    weight's aligned stride is ``w_ss`` (its unit one ``w_sd``), else ``w_sd``.

    ``PACK > 1``: ``PACK`` consecutive groups of ``src_g -> dst_g`` channels run as one group of
    ``Sg = PACK*src_g -> Dg = PACK*dst_g`` (their channels are consecutive in memory), the
    weight tile block-diagonal (source channel ``c`` meets destination channel ``d`` only when
    ``c // src_g == d // dst_g``): full-width loads and fewer idle tensor-core lanes for
    groups narrower than the 16-wide MMA.

    ``SPLIT_K`` (one phase only): program ``(., ., split)`` sums its ``1 / splits`` share of
    the reduction steps (``splits`` = the grid's third size) and stores that partial sum, the
    bias in split 0's only, at ``dst + split * dst_split_stride`` (``dst``: the fp32 partials,
    each laid out as the output); ``sum_partials`` adds them in split order. For problems of
    few output rows and a long reduction, which would leave most multiprocessors idle.

    ``SWAP`` (tensor-core dtypes): the loop accumulates the transposed tile ``W^T X^T``
    (destination channels as the MMA's rows, positions as its columns), transposed back
    before the epilogue: the same sums, fewer shared-memory reads per product on tiles of
    256 rows (``ops.implicit_gemm.swap_rule``).

    ``FOLD_Z`` (an input gradient of more stride phases than CUDA's 65535 programs along a
    grid's third axis, which ``launch`` folds): the phases run over the first and third axes,
    phase ``(pid0 // tiles) * programs(2) + pid2`` (``tiles``: the row and column blocks of a
    phase); a program past the last phase does nothing.

    ``TAP_BITS`` (``WINDOW`` kernels of at most 32 taps): which taps of each row read inside
    the source (not its zero padding) is worked out once, before the loop, as one bit per tap
    in an int32 per row; a step then tests its tap's bit instead of comparing the row's
    source coordinates with the bounds (four compares and the selects that merge them, per
    row and step: ~16 SASS instructions per 16-byte load, the loop's largest share).

    ``BLOCK_N2 > 0`` (not with ``SWAP`` or ``PACK``): a column tile is ``BLOCK_N + BLOCK_N2``
    destination channels wide, a width Triton's power-of-two blocks cannot have (144 = 128 +
    16): a second accumulator of ``BLOCK_N2`` columns takes the same source tile each step, so
    no column is padded and the source is read once for all of them."""
    if ALIGN > 1:
        src_sn = _aligned(src_sn, ALIGN)
        src_sd = _aligned(src_sd, ALIGN)
        src_sh = _aligned(src_sh, ALIGN)
        src_sw = _aligned(src_sw, ALIGN)
        dst_sn = _aligned(dst_sn, ALIGN)
        dst_sd = _aligned(dst_sd, ALIGN)
        dst_sh = _aligned(dst_sh, ALIGN)
        dst_sw = _aligned(dst_sw, ALIGN)
        src_per_group = _aligned(src_per_group, ALIGN)
        dst_per_group = _aligned(dst_per_group, ALIGN)
        w_sg = _aligned(w_sg, ALIGN)
        w_skd = _aligned(w_skd, ALIGN)
        w_skh = _aligned(w_skh, ALIGN)
        w_skw = _aligned(w_skw, ALIGN)
        if ALIGN_W_SS:  # the weight tile runs along its destination channels (w_sd == 1)
            w_ss = _aligned(w_ss, ALIGN)
        else:  # along its reduction channels (w_ss == 1)
            w_sd = _aligned(w_sd, ALIGN)
    pid = tl.program_id(0)
    g = tl.program_id(1)
    phase = 0 if SPLIT_K else tl.program_id(2)  # (SPLIT_K: splits on that axis, one phase)
    # Grouped ordering: GROUP_M row blocks share each column block while it is in L2.
    m_blocks = tl.cdiv(M, BLOCK_M)
    n_blocks = tl.cdiv(dst_per_group, BLOCK_N + BLOCK_N2)
    if FOLD_Z:
        phase += (pid // (m_blocks * n_blocks)) * tl.num_programs(2)
        pid = pid % (m_blocks * n_blocks)
        if phase >= stride_d * stride_h * stride_w:
            return
    width = GROUP_M * n_blocks
    first_m = (pid // width) * GROUP_M
    rows_here = tl.minimum(m_blocks - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % rows_here
    pid_n = (pid % width) // rows_here

    if INDEX_64:  # before the multiply: the first row can pass int32
        pid_m = pid_m.to(tl.int64)
        g = g.to(tl.int64)
    p = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    qw = p % QW
    t = p // QW
    qh = t % QH
    t = t // QH
    qd = t % QD
    n = t // QD
    row_ok = p < M
    if TRANSPOSED:
        rw = phase % stride_w
        rh = (phase // stride_w) % stride_h
        rd = phase // (stride_w * stride_h)
        dd = rd + qd * stride_d
        dh = rh + qh * stride_h
        dw = rw + qw * stride_w
        row_ok = row_ok & (dd < DD) & (dh < DH) & (dw < DW)
        k0_d = _first_tap(rd, pad_d, dil_d, stride_d, tap_step_d, KD)
        k0_h = _first_tap(rh, pad_h, dil_h, stride_h, tap_step_h, KH)
        k0_w = _first_tap(rw, pad_w, dil_w, stride_w, tap_step_w, KW)
        nk_d = (KD - k0_d + tap_step_d - 1) // tap_step_d
        nk_h = (KH - k0_h + tap_step_h - 1) // tap_step_h
        nk_w = (KW - k0_w + tap_step_w - 1) // tap_step_w
        base_d = (dd + pad_d - k0_d * dil_d) // stride_d
        base_h = (dh + pad_h - k0_h * dil_h) // stride_h
        base_w = (dw + pad_w - k0_w * dil_w) // stride_w
        step_d = -((tap_step_d * dil_d) // stride_d)
        step_h = -((tap_step_h * dil_h) // stride_h)
        step_w = -((tap_step_w * dil_w) // stride_w)
    else:
        dd, dh, dw = qd, qh, qw
        k0_d, k0_h, k0_w = 0, 0, 0
        nk_d, nk_h, nk_w = KD, KH, KW
        base_d = dd * stride_d - pad_d
        base_h = dh * stride_h - pad_h
        base_w = dw * stride_w - pad_w
        step_d, step_h, step_w = dil_d, dil_h, dil_w

    d = pid_n * (BLOCK_N + BLOCK_N2) + tl.arange(0, BLOCK_N)
    d_ok = d < dst_per_group
    # Every address of a row is its base plus a per-tap scalar: computed once here.
    src_rows = src_ptr + n * src_sn + (g * src_per_group) * src_sc
    src_rows += base_d * src_sd + base_h * src_sh + base_w * src_sw
    w_first_tap = k0_d * w_skd + k0_h * w_skh + k0_w * w_skw
    if PACK > 1:  # the real group and channel of each packed destination channel
        w_cols = w_ptr + (g * PACK + d // dst_g) * w_sg + (d % dst_g) * w_sd
    else:
        w_cols = w_ptr + g * w_sg + d * w_sd
    w_cols += w_first_tap
    if BLOCK_N2 > 0:  # the tile's last BLOCK_N2 columns, their own accumulator
        tl.static_assert(USE_DOT and PACK == 1 and not SWAP)
        d2 = pid_n * (BLOCK_N + BLOCK_N2) + BLOCK_N + tl.arange(0, BLOCK_N2)
        d2_ok = d2 < dst_per_group
        w_cols2 = w_ptr + g * w_sg + d2 * w_sd + w_first_tap
        acc2 = tl.zeros([BLOCK_M, BLOCK_N2], dtype=ACC_DTYPE)
    k = tl.arange(0, BLOCK_K)

    c_blocks = tl.cdiv(src_per_group, BLOCK_K)
    iterations = nk_d * nk_h * nk_w * c_blocks
    first = 0
    if SPLIT_K:  # this split's steps
        per_split = tl.cdiv(iterations, tl.num_programs(2))
        first = tl.program_id(2) * per_split
        iterations = tl.minimum(iterations, first + per_split)
    if SWAP:  # the transposed product: destination channels as the MMA's rows
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=ACC_DTYPE)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC_DTYPE)
    if WINDOW:  # the step's channel block and taps, counted from step to step (no division)
        cb = tl.program_id(0) * 0
        if INDEX_64:
            cb = cb.to(tl.int64)
        jw = cb
        jh = cb
        jd = cb
        if SPLIT_K:  # the first step's, divided out once
            cb += first % c_blocks
            jw += (first // c_blocks) % nk_w
            jh += (first // (c_blocks * nk_w)) % nk_h
            jd += first // (c_blocks * nk_w * nk_h)
        if TAP_BITS:  # bit (jd, jh, jw) of a row: that tap reads inside the source
            tap_bits = tl.zeros([BLOCK_M], dtype=tl.int32)
            for td in range(nk_d):
                sd = base_d + td * step_d
                d_in = row_ok
                if THREE_D:
                    d_in = d_in & (sd >= 0) & (sd < SD)
                for th in range(nk_h):
                    sh = base_h + th * step_h
                    h_in = d_in & (sh >= 0) & (sh < SH)
                    for tw in range(nk_w):
                        sw = base_w + tw * step_w
                        inside = h_in & (sw >= 0) & (sw < SW)
                        tap = (td * nk_h + th) * nk_w + tw
                        tap_bits = tap_bits | (inside.to(tl.int32) << tap)
            tap_bit = (1 << ((jd * nk_h + jh) * nk_w + jw)).to(tl.int32)
    for it in range(first, iterations):
        if WINDOW:
            c = cb * BLOCK_K + k
            sh = base_h + jh * step_h
            sw = base_w + jw * step_w
            src_tap = (jh * step_h) * src_sh + (jw * step_w) * src_sw
            w_tap = (
                (jd * tap_step_d) * w_skd + (jh * tap_step_h) * w_skh + (jw * tap_step_w) * w_skw
            )
        else:  # one tap: the steps are its channel blocks, the bounds the same at every step
            c = it * BLOCK_K + k
            sh = base_h
            sw = base_w
            src_tap = 0
            w_tap = 0
        ok = ((tap_bits & tap_bit) != 0) if TAP_BITS else row_ok & _within(sh, SH) & _within(sw, SW)
        if THREE_D:
            sd = base_d
            if WINDOW:
                sd += jd * step_d
                src_tap += (jd * step_d) * src_sd
            if not TAP_BITS:
                ok = ok & _within(sd, SD)
        a_ptrs = src_rows[:, None] + (src_tap + c * src_sc)[None, :]
        if PACK > 1:
            b_ptrs = w_cols[None, :] + (w_tap + (c % src_g) * w_ss)[:, None]
            diagonal = (c // src_g)[:, None] == (d // dst_g)[None, :]
        else:
            b_ptrs = w_cols[None, :] + (w_tap + c * w_ss)[:, None]
        if EVEN_K:
            a = tl.load(a_ptrs, mask=ok[:, None], other=0)
            b_mask = d_ok[None, :]
        else:
            c_ok = c < src_per_group
            a = tl.load(a_ptrs, mask=ok[:, None] & c_ok[None, :], other=0)
            b_mask = c_ok[:, None] & d_ok[None, :]
        if PACK > 1:
            b_mask = b_mask & diagonal
        b = tl.load(b_ptrs, mask=b_mask, other=0)
        if BLOCK_N2 > 0:
            b2_ptrs = w_cols2[None, :] + (w_tap + c * w_ss)[:, None]
            if EVEN_K:
                b2 = tl.load(b2_ptrs, mask=d2_ok[None, :], other=0)
            else:
                b2 = tl.load(b2_ptrs, mask=c_ok[:, None] & d2_ok[None, :], other=0)
            acc2 = mma(a.to(DOT_DTYPE), b2.to(DOT_DTYPE), acc2, DOT_PRECISION)
        if SWAP:
            acc = mma(b.to(DOT_DTYPE).T, a.to(DOT_DTYPE).T, acc, DOT_PRECISION)
        elif USE_DOT:
            acc = mma(a.to(DOT_DTYPE), b.to(DOT_DTYPE), acc, DOT_PRECISION)
        else:  # BLOCK_K == 1: an outer product, exact in ACC_DTYPE (no cross-lane reduction)
            acc += a.to(ACC_DTYPE) * b.to(ACC_DTYPE)
        if WINDOW:  # the next channel block, wrapping into the next tap (width, height, depth)
            cb += 1
            wrap = cb == c_blocks
            cb = tl.where(wrap, 0, cb)
            if TAP_BITS:  # taps in the bits' order: the next tap is the next bit
                tap_bit = tl.where(wrap, tap_bit << 1, tap_bit)
            jw += wrap.to(jw.dtype)
            wrap = jw == nk_w
            jw = tl.where(wrap, 0, jw)
            jh += wrap.to(jh.dtype)
            wrap = jh == nk_h
            jh = tl.where(wrap, 0, jh)
            jd += wrap.to(jd.dtype)

    if SWAP:
        acc = acc.T
    dst_rows = dst_ptr + n * dst_sn + dd * dst_sd + dh * dst_sh + dw * dst_sw
    if SPLIT_K:
        if ALIGN > 1:
            dst_split_stride = _aligned(dst_split_stride, ALIGN)
        split = tl.program_id(2)
        if INDEX_64:
            split = split.to(tl.int64)
        dst_rows += split * dst_split_stride
    _store_columns(acc, d, d_ok, dst_rows, row_ok, bias_ptr, g * dst_per_group, dst_sc,
                   HAS_BIAS, SPLIT_K, ACC_DTYPE)  # fmt: skip
    if BLOCK_N2 > 0:
        _store_columns(acc2, d2, d2_ok, dst_rows, row_ok, bias_ptr, g * dst_per_group, dst_sc,
                       HAS_BIAS, SPLIT_K, ACC_DTYPE)  # fmt: skip


@triton.jit
def _store_columns(
    acc, d, d_ok, dst_rows, row_ok, bias_ptr, first_channel, dst_sc,
    HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr, ACC_DTYPE: tl.constexpr,
):  # fmt: skip
    """``conv_igemm_kernel``'s epilogue for the columns ``d`` (destination channels
    ``first_channel + d``) of the rows starting at ``dst_rows``: the bias added (under
    ``SPLIT_K`` by the first split only), cast and stored."""
    if HAS_BIAS:
        bias = tl.load(bias_ptr + first_channel + d, mask=d_ok, other=0).to(ACC_DTYPE)
        if SPLIT_K:  # added once, by the first split
            bias = tl.where(tl.program_id(2) == 0, bias, tl.zeros_like(bias))
        acc += bias[None, :]
    dst = dst_rows[:, None] + ((first_channel + d) * dst_sc)[None, :]
    tl.store(dst, acc.to(dst_rows.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


@triton.jit
def _wgrad_tap(
    acc, dy, dy_mid, dy_lo, x_rows, inside, i_w, j, kw0, KW, IW, dil_w, x_sw, ci_ok,
    WINDOW: tl.constexpr, TAP_TAIL: tl.constexpr, UNSIGNED_BOUNDS: tl.constexpr,
    EVEN_C: tl.constexpr, USE_DOT: tl.constexpr,
    DOT_PRECISION: tl.constexpr, DOT_DTYPE: tl.constexpr, ACC_DTYPE: tl.constexpr,
):  # fmt: skip
    """``acc + dy @ x`` for width tap ``kw0 + j`` (``x_rows``/``i_w``: tap ``kw0``'s addresses
    and columns); a tap past the kernel's width (the last group's tail, only where
    ``TAP_TAIL``: ``TAP_GROUP`` does not divide the width) loads nothing.
    Without ``WINDOW`` (pointwise) every position of ``inside`` is in the image.

    ``DOT_PRECISION == "bf16x3"`` (fp32 operands): ``dy`` and ``dy_lo`` are the first two of
    dy's :func:`~tritonconv.kernels.mma.split_bf16` pieces (``hi + mid``, dy to about 2^-16
    of it), x is split the same way, and the product is ``hi*hi + hi*lo + lo*hi`` on 16-bit
    tensor cores (``DOT_DTYPE``: the halves' dot dtype), each term accumulated in fp32.
    ``DOT_PRECISION == "bf16x6"`` (fp32, TF32 off): ``dy``, ``dy_mid`` and ``dy_lo`` are dy's
    :func:`~tritonconv.kernels.mma.split_bf16` pieces, x is split the same way, and the step
    is :func:`~tritonconv.kernels.mma.bf16x6_step`'s, lifted and added in fp32."""
    ok = inside
    if WINDOW:
        col = i_w + j * dil_w
        ok = ok & _within(col, IW, UNSIGNED_BOUNDS)
        if TAP_TAIL:  # (a vector comparison: the interpreter takes no scalar in a mask)
            ok = ok & (tl.zeros_like(col) + kw0 + j < KW)
    if EVEN_C:  # one predicate per position row: no channel mask to combine per vector
        xs = tl.load(x_rows + j * dil_w * x_sw, mask=ok[:, None], other=0)
    else:
        xs = tl.load(x_rows + j * dil_w * x_sw, mask=ok[:, None] & ci_ok[None, :], other=0)
    if DOT_PRECISION == "bf16x6":
        x_hi, x_mid, x_lo = split_bf16(xs, DOT_DTYPE)
        return acc + lift(bf16x6_step(dy, dy_mid, dy_lo, x_hi, x_mid, x_lo))
    if DOT_PRECISION == "bf16x3":
        x_hi, x_lo, _ = split_bf16(xs, DOT_DTYPE)  # (hi + mid: about 2^-16 of xs)
        acc = tl.dot(dy_lo.to(DOT_DTYPE), x_hi.to(DOT_DTYPE), acc, input_precision="ieee")
        acc = tl.dot(dy.to(DOT_DTYPE), x_lo.to(DOT_DTYPE), acc, input_precision="ieee")
        return tl.dot(dy.to(DOT_DTYPE), x_hi.to(DOT_DTYPE), acc, input_precision="ieee")
    if USE_DOT:
        return mma(dy.to(DOT_DTYPE), xs.to(DOT_DTYPE), acc, DOT_PRECISION)
    # [M, K, N] products summed over K (at least 16 positions wide: see the module doc)
    return acc + tl.sum(dy.to(ACC_DTYPE)[:, :, None] * xs.to(ACC_DTYPE)[None, :, :], 1)


@triton.jit
def conv_igemm_wgrad_kernel(
    # pointers
    dy_ptr,
    x_ptr,
    partial_ptr,
    # sizes
    M,
    positions_per_split,
    ID,
    IH,
    IW,
    OD,
    OH,
    OW,
    in_per_group,
    out_per_group,
    KD,
    KH,
    KW,
    # geometry
    stride_d,
    stride_h,
    stride_w,
    pad_d,
    pad_h,
    pad_w,
    dil_d,
    dil_h,
    dil_w,
    # strides
    dy_sn,
    dy_sc,
    dy_sd,
    dy_sh,
    dy_sw,
    x_sn,
    x_sc,
    x_sd,
    x_sh,
    x_sw,
    partial_split_stride,
    p_so,
    p_si,
    p_skd,
    p_skh,
    p_skw,
    inv_ow,
    inv_oh,
    inv_od,
    # the real channels per group when PACK groups share a program (else unused)
    in_g,
    out_g,
    # meta-parameters
    SMALL_DIVIDE: tl.constexpr,
    FLAT_DY: tl.constexpr,
    EVEN_C: tl.constexpr,
    THREE_D: tl.constexpr,
    POINTWISE: tl.constexpr,
    TAP_GROUP: tl.constexpr,
    TAP_TAIL: tl.constexpr,
    UNSIGNED_BOUNDS: tl.constexpr,
    USE_DOT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    INDEX_64: tl.constexpr,
    ALIGN: tl.constexpr = 1,
    PACK: tl.constexpr = 1,
):
    """partial[split, g*Cout_g + co, ci, tap] = sum over the split's positions p of
    dy[p, g*Cout_g + co] * x[p shifted by tap, g*Cin_g + ci]; ``partial`` is
    ``(splits, C_out, Cin_g, KD, KH, KW)`` with element strides ``partial_split_stride`` and
    ``p_so, p_si, p_skd, p_skh, p_skw``: each split laid out as the weight is, so the sum of
    the splits is the weight gradient in the weight's own layout. A program
    owns ``TAP_GROUP`` (1 to 3) neighbouring taps along the width: each step's ``dy`` tile and
    position coordinates serve all of them (one accumulator each). Grid ``(channel tiles,
    groups * KD * KH * cdiv(KW, TAP_GROUP), splits)``. ``ALIGN``: as the forward kernel's,
    for the position strides of ``dy`` and ``x`` and the channels per group.

    ``PACK > 1``: as the forward kernel's, ``PACK`` consecutive groups of ``in_g -> out_g``
    channels run as one group of ``in_per_group = PACK*in_g`` and ``out_per_group =
    PACK*out_g`` channels (``groups`` in the grid counts packs): each step's loads are
    ``PACK`` times wider, and only the tile's block diagonal (input channel ``c`` and output
    channel ``o`` of the same group, ``c // in_g == o // out_g``) is stored, at input channel
    ``c % in_g``."""
    if ALIGN > 1:
        dy_sn = _aligned(dy_sn, ALIGN)
        dy_sd = _aligned(dy_sd, ALIGN)
        dy_sh = _aligned(dy_sh, ALIGN)
        dy_sw = _aligned(dy_sw, ALIGN)
        x_sn = _aligned(x_sn, ALIGN)
        x_sd = _aligned(x_sd, ALIGN)
        x_sh = _aligned(x_sh, ALIGN)
        x_sw = _aligned(x_sw, ALIGN)
        in_per_group = _aligned(in_per_group, ALIGN)
        out_per_group = _aligned(out_per_group, ALIGN)
    pid_tile = tl.program_id(0)
    pid_tap = tl.program_id(1)
    split = tl.program_id(2)
    w_groups = tl.cdiv(KW, TAP_GROUP)
    g = pid_tap // (KD * KH * w_groups)
    rest = pid_tap % (KD * KH * w_groups)
    kw0 = (rest % w_groups) * TAP_GROUP
    kh = (rest // w_groups) % KH
    kd = rest // (w_groups * KH)
    n_blocks = tl.cdiv(in_per_group, BLOCK_N)
    co = (pid_tile // n_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
    ci = (pid_tile % n_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    if INDEX_64:
        g = g.to(tl.int64)
        split = split.to(tl.int64)
    co_ok = co < out_per_group
    ci_ok = ci < in_per_group
    dy_cols = dy_ptr + (g * out_per_group + co) * dy_sc
    x_cols = x_ptr + (g * in_per_group + ci) * x_sc
    shift_d = kd * dil_d - pad_d
    shift_h = kh * dil_h - pad_h
    shift_w = kw0 * dil_w - pad_w

    acc0 = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC_DTYPE)
    acc1 = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC_DTYPE)
    acc2 = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC_DTYPE)
    start = split * positions_per_split
    end = tl.minimum(start + positions_per_split, M)
    i = tl.arange(0, BLOCK_K)
    if SMALL_DIVIDE and not POINTWISE:  # the split's first position's coordinates, carried
        w0 = start % OW
        t0 = start // OW
        h0 = t0 % OH
        t0 = t0 // OH
        d0 = t0 % OD
        n0 = t0 // OD
    for p0 in range(start, end, BLOCK_K):
        p = p0 + i
        p_ok = p < end
        if POINTWISE:  # x at dy's positions, both flat: no coordinates at all
            dy_pos = p * dy_sw
            inside = p_ok
            x_rows = x_cols[None, :] + (p * x_sw)[:, None]
            i_w = p
        else:
            if SMALL_DIVIDE:  # no division in the loop (see the module doc)
                w_run = w0 + i
                carry = _small_quotient(w_run, OW, inv_ow)
                ow = w_run - carry * OW
                h_run = h0 + carry
                carry = _small_quotient(h_run, OH, inv_oh)
                oh = h_run - carry * OH
                if THREE_D:
                    d_run = d0 + carry
                    carry = _small_quotient(d_run, OD, inv_od)
                    od = d_run - carry * OD
                else:
                    od = tl.zeros_like(oh)
                n = n0 + carry
                # the next step's first position: BLOCK_K further, carried the same way
                w0 += BLOCK_K
                step = _small_quotient(w0, OW, inv_ow)
                w0 -= step * OW
                h0 += step
                step = _small_quotient(h0, OH, inv_oh)
                h0 -= step * OH
                if THREE_D:
                    d0 += step
                    step = _small_quotient(d0, OD, inv_od)
                    d0 -= step * OD
                n0 += step
            else:
                ow = p % OW
                t = p // OW
                oh = t % OH
                t = t // OH
                od = t % OD
                n = t // OD
            dy_pos = p * dy_sw if FLAT_DY else n * dy_sn + od * dy_sd + oh * dy_sh + ow * dy_sw
            i_h = oh * stride_h + shift_h
            i_w = ow * stride_w + shift_w  # tap kw0's column; tap kw0 + j is j * dil_w further
            inside = p_ok & _within(i_h, IH, UNSIGNED_BOUNDS)
            x_pos = n * x_sn + i_h * x_sh + i_w * x_sw
            if THREE_D:
                i_d = od * stride_d + shift_d
                inside = inside & _within(i_d, ID, UNSIGNED_BOUNDS)
                x_pos += i_d * x_sd
            x_rows = x_cols[None, :] + x_pos[:, None]
        dy_mask = p_ok[None, :] if EVEN_C else co_ok[:, None] & p_ok[None, :]
        dy = tl.load(dy_cols[:, None] + dy_pos[None, :], mask=dy_mask, other=0)
        dy_mid = dy
        dy_lo = dy
        if DOT_PRECISION == "bf16x3":  # split once, for every tap
            dy, dy_lo, _ = split_bf16(dy, DOT_DTYPE)
        if DOT_PRECISION == "bf16x6":
            dy, dy_mid, dy_lo = split_bf16(dy, DOT_DTYPE)
        # the dy tile and the coordinates above serve TAP_GROUP taps along the width
        acc0 = _wgrad_tap(acc0, dy, dy_mid, dy_lo, x_rows, inside, i_w, 0, kw0, KW, IW, dil_w,
                          x_sw, ci_ok, not POINTWISE, TAP_TAIL, UNSIGNED_BOUNDS, EVEN_C, USE_DOT,
                          DOT_PRECISION, DOT_DTYPE, ACC_DTYPE)  # fmt: skip
        if TAP_GROUP > 1:
            acc1 = _wgrad_tap(acc1, dy, dy_mid, dy_lo, x_rows, inside, i_w, 1, kw0, KW, IW,
                              dil_w, x_sw, ci_ok, not POINTWISE, TAP_TAIL, UNSIGNED_BOUNDS, EVEN_C,
                              USE_DOT, DOT_PRECISION, DOT_DTYPE, ACC_DTYPE)  # fmt: skip
        if TAP_GROUP > 2:
            acc2 = _wgrad_tap(acc2, dy, dy_mid, dy_lo, x_rows, inside, i_w, 2, kw0, KW, IW,
                              dil_w, x_sw, ci_ok, not POINTWISE, TAP_TAIL, UNSIGNED_BOUNDS, EVEN_C,
                              USE_DOT, DOT_PRECISION, DOT_DTYPE, ACC_DTYPE)  # fmt: skip

    tap0 = kd * p_skd + kh * p_skh + kw0 * p_skw
    dst = partial_ptr + split * partial_split_stride + tap0
    ok = co_ok[:, None] & ci_ok[None, :]
    # packed groups: each input channel at its place in its own group, the block diagonal only
    ci_at = (ci % in_g) if PACK > 1 else ci
    dst += ((g * out_per_group + co) * p_so)[:, None] + (ci_at * p_si)[None, :]
    if PACK > 1:
        ok = ok & ((co // out_g)[:, None] == (ci // in_g)[None, :])
    kw = tl.zeros_like(co)[:, None] + kw0  # tap kw0 as a tile, for the tail's masks
    tl.store(dst, acc0, mask=ok)
    if TAP_GROUP > 1:
        tl.store(dst + p_skw, acc1, mask=ok & (kw + 1 < KW))
    if TAP_GROUP > 2:
        tl.store(dst + 2 * p_skw, acc2, mask=ok & (kw + 2 < KW))


@triton.jit
def pointwise_tma_kernel(
    src,
    w,
    bias_ptr,
    dst,
    rows,
    C_src,
    C_dst,
    # SCATTER only: the source's width and height, the destination's row and column strides
    W_src,
    H_src,
    row_sd,
    row_sh,
    row_sw,
    C_phase,
    PW,
    PH,
    PD,
    col_sd,
    col_sh,
    TRANSPOSED: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SCATTER: tl.constexpr,
    TAP_BOX: tl.constexpr,
    BOX_W: tl.constexpr,
):
    """A 1x1 stride-1 unpadded one-group convolution over channels-last rows as a GEMM whose
    tiles move by TMA: ``dst[rows, C_dst] = src[rows, C_src] @ w^T (+ bias)``, ``w`` the
    ``[C_dst, C_src]`` weight; ``TRANSPOSED`` (the input gradient): ``w`` is ``[C_src, C_dst]``
    (the forward's ``[out, in]``). ``src``, ``w``, ``dst``: TMA descriptors made on the host
    (boxes ``[BLOCK_M, BLOCK_K]``, ``[BLOCK_N, BLOCK_K]`` or ``[BLOCK_K, BLOCK_N]``,
    ``[BLOCK_M, BLOCK_N]``), kernel parameters the tensor-map hardware reads directly:
    descriptors made on the device cost each program about 2 µs before its first load
    (session 20, benchmarks/NOTES.md).

    Boxes past the last row or channel are zero-filled on load and clipped on store, so no
    tile needs a mask (but ``SCATTER``'s pointer stores, below, mask rows). A grid smaller
    than the tile count makes the programs persistent: each walks tiles ``pid, pid +
    programs, ...`` (grouped by ``GROUP_M`` rows of tiles, so consecutive tiles share weight
    columns in L2), and the flattened loop lets the next tile's loads start while this one's
    result is stored. ``DOT_DTYPE``: the operands' own
    type (fp32 for bfloat16 under the interpreter, ``ops.direct.dot_dtype``);
    ``DOT_PRECISION``: ``"tf32"`` for fp32 operands (TF32 allowed), launched untransposed
    only: TF32 products need both operands K-major.

    ``SCATTER`` (a transposed convolution whose kernel equals its stride, unpadded: every
    output position takes exactly one tap, so it is one GEMM of the input's rows by the
    ``[C_in, taps * C_out]`` weight): ``dst`` is a pointer to the dense channels-last
    output, and GEMM column ``j = ((a * PH + b) * PW + c) * C_phase + co`` (tap ``(a, b, c)``
    of a kernel ``PD x PH x PW``) of source row ``(nd, h, w)`` (the input's flattened
    position: ``W_src`` wide, ``H_src`` high) lands at ``nd * row_sd + h * row_sh + w *
    row_sw + a * col_sd + b * col_sh + c * C_phase + co``. The width taps ``c`` lie side by
    side in the output, so a run of ``PW * C_phase`` columns (one ``(a, b)``) is consecutive
    addresses; the launcher picks ``BLOCK_N`` dividing that, so each tile's row is one
    contiguous run (and no tile has columns past the last). Bias: ``bias[co]``.

    ``TAP_BOX`` (else the pointer stores above): the scattered tiles are stored by TMA too,
    ``dst`` a descriptor of the output as ``[(n*D + d)*PD + a, h, b, w, run]`` (depth tap ``a``,
    height tap ``b``, ``run = PW * C_phase`` columns; ``(n*D + d)*PD + a`` is the output depth
    ``n*OD + od``, a box one deep takes any), so that a ``[BLOCK_M, BLOCK_N]`` tile is the box
    ``[1, BLOCK_M // BOX_W, 1, BOX_W, BLOCK_N]``: the launcher takes this form only where every
    row tile covers ``BLOCK_M // BOX_W`` whole input rows of ``BOX_W = W_src`` positions (or
    ``BOX_W = BLOCK_M`` positions of one row) within one ``n*D + d``. A TMA store leaves the
    program free for the next tile while it drains.
    """
    m_tiles = tl.cdiv(rows, BLOCK_M)
    n_tiles = tl.cdiv(C_dst, BLOCK_N)
    steps = tl.cdiv(C_src, BLOCK_K)
    for tile in tl.range(tl.program_id(0), m_tiles * n_tiles, tl.num_programs(0), flatten=True):
        width = GROUP_M * n_tiles
        first_m = (tile // width) * GROUP_M
        rows_here = tl.minimum(m_tiles - first_m, GROUP_M)
        m0 = (first_m + (tile % width) % rows_here) * BLOCK_M
        n0 = ((tile % width) // rows_here) * BLOCK_N
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for step in range(steps):
            a = src.load([m0, step * BLOCK_K]).to(DOT_DTYPE)
            if TRANSPOSED:
                b = w.load([step * BLOCK_K, n0]).to(DOT_DTYPE)
            else:
                b = w.load([n0, step * BLOCK_K]).to(DOT_DTYPE).T
            acc = mma(a, b, acc, DOT_PRECISION)
        if HAS_BIAS:
            d = n0 + tl.arange(0, BLOCK_N)
            if SCATTER:  # (every column a channel of some tap)
                acc += tl.load(bias_ptr + d % C_phase).to(tl.float32)[None, :]
            else:
                acc += tl.load(bias_ptr + d, mask=d < C_dst, other=0).to(tl.float32)[None, :]
        if SCATTER:
            run = PW * C_phase  # columns of one (depth, height) tap: its width taps side by side
            ab = n0 // run  # the tile's (depth tap, height tap) = (ab // PH, ab % PH)
            if TAP_BOX:
                t = m0 // W_src
                at = [(t // H_src) * PD + ab // PH, t % H_src, ab % PH, m0 % W_src, n0 % run]
                # (the box shape a literal: a list held in a variable is a list of tensors)
                box = acc.to(dst.dtype).reshape([1, BLOCK_M // BOX_W, 1, BOX_W, BLOCK_N])
                dst.store(at, box)
            else:
                m = m0.to(tl.int64) + tl.arange(0, BLOCK_M)
                t = m // W_src
                row = (t // H_src) * row_sd + (t % H_src) * row_sh + (m % W_src) * row_sw
                # (the launcher keeps this under 2**31)
                first = (ab // PH) * col_sd + (ab % PH) * col_sh + n0 % run
                col = tl.multiple_of(first, BLOCK_N) + tl.arange(0, BLOCK_N)
                ptrs = dst + tl.multiple_of(row, 8)[:, None] + col[None, :]
                tl.store(ptrs, acc.to(dst.dtype.element_ty), mask=(m < rows)[:, None])
        else:
            dst.store([m0, n0], acc.to(dst.dtype))


@triton.jit
def window_tma_kernel(
    src,
    w,
    bias_ptr,
    dst,
    N,
    D,
    H,
    W,
    C_src,
    C_dst,
    KH,
    KW,
    taps,
    pad_d,
    pad_h,
    pad_w,
    dil_d,
    dil_h,
    dil_w,
    TRANSPOSED: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    TH: tl.constexpr,
    TW: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    FOUR_D: tl.constexpr,
    W_ROWS: tl.constexpr,
):
    """A stride-1 one-group convolution (or, ``TRANSPOSED``, its input gradient) over dense
    channels-last tensors whose every tile moves by TMA, the padding included: ``src`` and
    ``dst`` are descriptors of the images as ``[N, D, H, W, C]`` (``D``, ``H``, ``W``: the
    destination's sizes; a 1-D or 2-D problem is one deep and high), boxes ``[1, 1, TH, TW,
    BLOCK_K]`` and ``[1, 1, TH, TW, BLOCK_N]``. A tile is a ``TH x TW`` rectangle of one
    destination plane's positions by ``BLOCK_N`` channels; its reduction step for tap ``(kd,
    kh, kw)`` and channel block ``c0`` loads the source box at the rectangle's corner shifted
    by the tap (forward: ``+ k*dil - pad``; input gradient: ``+ pad - k*dil``, ``pad`` the
    forward's ``pad_before``), and the hardware fills every position outside the source with
    zeros: no mask and no address arithmetic in the loop. Stores clip at the destination's
    edges, so rectangles may overhang them (the launcher picks ``TW`` to waste little).

    The box, viewed as ``[TH*TW, BLOCK_K]`` positions by channels, is wgmma's B operand: the
    loop accumulates the transposed tile ``w . x^T`` (destination channels by positions),
    transposed back for the epilogue. (As the A operand the reshaped box went through
    registers every step; as B it stays in shared memory: benchmarks/NOTES.md, session 36.)
    ``w``: forward, the channels-last weight as a ``[C_dst, taps * C_src]`` descriptor (boxes
    ``[BLOCK_N, BLOCK_K]``; the launcher makes ``BLOCK_K`` divide ``C_src``, so no box
    straddles two taps); input gradient, as ``[taps, C_src, C_dst]`` (boxes ``[1, BLOCK_K,
    BLOCK_N]``; its ``C_src`` is the forward's output channels). Programs are persistent
    when the launcher's grid is smaller than the tile count: each walks tiles ``pid, pid +
    programs, ...``, grouped by ``GROUP_M`` rectangles so that consecutive tiles share weight
    columns in L2. ``FOUR_D`` (a one-deep problem): ``src`` and ``dst`` are ``[N, H, W, C]``
    descriptors (boxes ``[1, TH, TW, ...]``), and nothing counts depth. ``W_ROWS``: ``w`` is
    ``[C_dst, taps * C_src]`` rows in the input gradient too (a copy of the weight laid out
    ``[C_in, taps, C_out]``: fp32's TF32 products take only K-major tiles, and the
    ``[taps, C_src, C_dst]`` view's tile runs along its destination channels)."""
    BLOCK_M: tl.constexpr = TH * TW
    tw_tiles = tl.cdiv(W, TW)
    th_tiles = tl.cdiv(H, TH)
    m_tiles = N * D * th_tiles * tw_tiles
    n_tiles = tl.cdiv(C_dst, BLOCK_N)
    c_steps = tl.cdiv(C_src, BLOCK_K)
    for tile in tl.range(tl.program_id(0), m_tiles * n_tiles, tl.num_programs(0), flatten=True):
        width = GROUP_M * n_tiles
        first_m = (tile // width) * GROUP_M
        rows_here = tl.minimum(m_tiles - first_m, GROUP_M)
        pid_m = first_m + (tile % width) % rows_here
        n0 = ((tile % width) // rows_here) * BLOCK_N
        w0 = (pid_m % tw_tiles) * TW
        t = pid_m // tw_tiles
        h0 = (t % th_tiles) * TH
        t = t // th_tiles
        if FOUR_D:
            d0 = 0
            n = t
        else:
            d0 = t % D
            n = t // D
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        # the step's channel block and tap, counted from step to step (no division)
        cb = 0
        kw = 0
        kh = 0
        kd = 0
        for _ in range(taps * c_steps):
            sd = kd * dil_d - pad_d  # the tap's shift of the box's corner
            sh = kh * dil_h - pad_h
            sw = kw * dil_w - pad_w
            if TRANSPOSED:
                sd, sh, sw = -sd, -sh, -sw
            if FOUR_D:
                box = src.load([n, h0 + sh, w0 + sw, cb * BLOCK_K])
                tap = kh * KW + kw
            else:
                box = src.load([n, d0 + sd, h0 + sh, w0 + sw, cb * BLOCK_K])
                tap = (kd * KH + kh) * KW + kw
            x = box.reshape([BLOCK_M, BLOCK_K]).to(DOT_DTYPE)
            if TRANSPOSED and not W_ROWS:
                a = w.load([tap, cb * BLOCK_K, n0]).reshape([BLOCK_K, BLOCK_N]).to(DOT_DTYPE).T
            else:
                a = w.load([n0, tap * C_src + cb * BLOCK_K]).to(DOT_DTYPE)
            acc = tl.dot(a, x.T, acc)
            cb += 1
            wrap = cb == c_steps
            cb = tl.where(wrap, 0, cb)
            kw += wrap.to(tl.int32)
            wrap = kw == KW
            kw = tl.where(wrap, 0, kw)
            kh += wrap.to(tl.int32)
            if not FOUR_D:
                wrap = kh == KH
                kh = tl.where(wrap, 0, kh)
                kd += wrap.to(tl.int32)
        out = acc.T
        if HAS_BIAS:
            d = n0 + tl.arange(0, BLOCK_N)
            out += tl.load(bias_ptr + d, mask=d < C_dst, other=0).to(tl.float32)[None, :]
        if FOUR_D:
            dst.store([n, h0, w0, n0], out.to(dst.dtype).reshape([1, TH, TW, BLOCK_N]))
        else:
            dst.store([n, d0, h0, w0, n0], out.to(dst.dtype).reshape([1, 1, TH, TW, BLOCK_N]))


@triton.jit
def wgrad_tma_kernel(
    x,
    dy,
    out,
    N,
    D,
    H,
    W,
    C_in,
    C_out,
    KH,
    KW,
    pad_d,
    pad_h,
    pad_w,
    dil_d,
    dil_h,
    dil_w,
    per_split,
    DOT_DTYPE: tl.constexpr,
    TW: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    FLAT_DY: tl.constexpr,
    MASK_X: tl.constexpr,
):
    """The weight gradient of a stride-1 one-group convolution over dense channels-last
    tensors, every tile moved by TMA: ``dW[co, tap, ci] = sum over positions p of dy[p, co] *
    x[p shifted by the tap, ci]``, a GEMM per ``(co tile, ci tile, tap)`` reducing over *row
    boxes*, ``TW`` positions of one output row a step. ``dy`` and ``x`` are descriptors of the
    images as ``[N, D, H, W, C]`` (``D, H, W``: dy's sizes; a 1-D or 2-D problem is one deep and
    high) with boxes ``[1, 1, 1, TW, BLOCK_M]`` and ``[1, 1, 1, TW, BLOCK_N]``: ``x``'s at the
    row shifted by the tap (``+ k*dil - pad``), zero-filled outside the image (the padding;
    and where the row's box overhangs dy's width, dy's own zero fill cancels x's values). A
    box one row high views as ``[TW, channels]`` without moving, so both operands of
    ``dy^T . x`` feed the tensor cores from shared memory (two-row boxes sent wgmma's A
    operand through registers: benchmarks/NOTES.md, session 36). A step takes ``ROWS`` such
    boxes, rows ``h .. h + ROWS - 1`` (narrow rows: ResNet-50's 14 wide in 16-position boxes,
    four of them a step), one dot each; rows past dy's last are its zero fill. ``FLAT_DY``
    (rows exactly ``TW`` wide, ``H`` a multiple of ``ROWS``): ``dy`` is a descriptor of its
    positions as one row, ``[1, 1, 1, N*D*H*W, C_out]`` with boxes ``[1, 1, 1, ROWS*TW,
    BLOCK_M]`` (a step's rows are consecutive), and ``x``'s boxes ``[1, 1, ROWS, TW,
    BLOCK_N]`` (reshaped, wgmma's B operand still reads them from shared memory): one load
    of each and one dot a step.

    ``MASK_X`` (row boxes only): x's positions past dy's row, and the rows of a step past
    dy's last, are zeroed in registers before the product, so they add exactly nothing even
    where x holds an Inf or NaN there (without it dy's zero fill times such a value is NaN
    in dW, where the convolution never multiplies them); x's box then goes through
    registers on its way to the tensor cores.

    Program ``(tile, split)`` reduces steps ``[split * per_split, ...)`` and stores its
    fp32 tile through ``out``, a descriptor of ``[splits, C_out, taps, C_in]`` (boxes ``[1,
    BLOCK_M, 1, BLOCK_N]``: a tile overhanging ``C_out`` clips within its split): the
    launcher's partials, summed in split order (deterministic), or dW itself with one split.
    The row box's coordinates are divided once, before the loop, then counted."""
    ci_tiles = tl.cdiv(C_in, BLOCK_N)
    co_tiles = tl.cdiv(C_out, BLOCK_M)
    tile = tl.program_id(0)
    ci0 = (tile % ci_tiles) * BLOCK_N
    t = tile // ci_tiles
    co0 = (t % co_tiles) * BLOCK_M
    tap = t // co_tiles
    kw = tap % KW
    kh = (tap // KW) % KH
    kd = tap // (KW * KH)
    sd = kd * dil_d - pad_d  # the tap's shift of x's box
    sh = kh * dil_h - pad_h
    sw = kw * dil_w - pad_w
    w_tiles = tl.cdiv(W, TW)
    h_steps = tl.cdiv(H, ROWS)
    steps = N * D * h_steps * w_tiles
    split = tl.program_id(1)
    first = split * per_split
    last = tl.minimum(steps, first + per_split)
    wt = first % w_tiles
    r = first // w_tiles
    h = (r % h_steps) * ROWS
    r = r // h_steps
    d = r % D
    n = r // D
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for _ in range(first, last):
        w0 = wt * TW
        if FLAT_DY:  # dy's ROWS rows as one flat box, x's as one box of ROWS rows
            p = ((n * D + d) * H + h) * W + w0
            a = dy.load([0, 0, 0, p, co0]).reshape([ROWS * TW, BLOCK_M]).to(DOT_DTYPE)
            b = x.load([n, d + sd, h + sh, w0 + sw, ci0]).reshape([ROWS * TW, BLOCK_N])
            acc = tl.dot(a.T, b.to(DOT_DTYPE), acc)
        else:
            for i in tl.static_range(ROWS):  # (a row past dy's last: its zero fill)
                a = dy.load([n, d, h + i, w0, co0]).reshape([TW, BLOCK_M]).to(DOT_DTYPE)
                b = x.load([n, d + sd, h + i + sh, w0 + sw, ci0]).reshape([TW, BLOCK_N])
                if MASK_X:  # (dy's zero fill there: x's values must add nothing either)
                    inside = (w0 + tl.arange(0, TW) < W) & (h + i < H)
                    b = tl.where(inside[:, None], b, tl.zeros_like(b))
                acc = tl.dot(a.T, b.to(DOT_DTYPE), acc)
        wt += 1
        wrap = wt == w_tiles
        wt = tl.where(wrap, 0, wt)
        h += wrap.to(tl.int32) * ROWS
        wrap = h >= H
        h = tl.where(wrap, 0, h)
        d += wrap.to(tl.int32)
        wrap = d == D
        d = tl.where(wrap, 0, d)
        n += wrap.to(tl.int32)
    out.store([split, co0, tap, ci0], acc.to(out.dtype).reshape([1, BLOCK_M, 1, BLOCK_N]))
