"""Causal depthwise 1-D convolution (Mamba-family blocks): forward with bias and SiLU fused, and
the whole backward in one pass.

Every kernel takes ``x`` as ``(batch, dim, L_in)`` with any strides (channel-first memory, L
contiguous, or channel-last, dim contiguous), the weight ``(dim, WIDTH)`` by strides, and shift
the window by ``PAD`` (``WIDTH - 1`` for a causal convolution, 0 over an input that already
holds its history, as after ``initial_states``):

    z[b, d, l] = sum_k w[d, k] * x[b, d, l - PAD + k] + bias[d]     (x = 0 outside [0, L_in))
    y[b, d, l] = z or SiLU(z),    0 <= l < L_out = L_in - (WIDTH - 1) + PAD

The tile kernels (any width): a program owns a ``[BLOCK_D, BLOCK_L]`` tile of one sequence.
Per tap it loads the tile's x shifted by one position (or, ``X_ONCE``, gathers the shifts in
registers): neighbouring taps hit L1/L2, so DRAM sees each byte about once. For widths up to
4 (Mamba's), the rows kernel walks a channel-last sequence one row of channels at a time
(backward), and the segment kernels hold a channel-first sequence in aligned 8-position
segments, one a thread (forward and backward: sections below). Accumulation is in
``ACC_DTYPE`` (fp32 for fp16/bf16/fp32, fp64, int64 for integers, which wrap like PyTorch's
on the final cast).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from .._runtime import INTERPRETER

# Whether ``_divide`` takes fp32's approximate quotient: not under Triton's interpreter, which
# has no ``fast_dividef`` (a constexpr, not a choice between two functions: torch.compile
# copies a kernel's helpers by their own names, so an alias would not resolve there).
_FAST_QUOTIENT = tl.constexpr(not INTERPRETER)


@triton.jit
def _divide(a, b):
    """``a / b``; for fp32 on the GPU to about 2 ulps (``div.approx``: a reciprocal and a
    product; 0 where ``|b|`` passes 2**126, which a sigmoid's ``1 + exp`` reaches only where
    the quotient is 0 anyway)."""
    return libdevice.fast_dividef(a, b) if _FAST_QUOTIENT and b.dtype == tl.float32 else a / b


@triton.jit
def _one_plus_exp_neg(z):
    """``1 + exp(-z)``, the exponential as one ``ex2`` of ``-z * log2(e)`` (``tl.exp`` adds a
    denormal rescale: 3 more instructions for fp32 on sm_90)."""
    return 1.0 + tl.math.exp2(z * -1.4426950408889634)


@triton.jit
def _sigmoid(z):
    """``sigmoid(z)`` to a few fp32 ulps: 4 instructions where ``1 / (1 + tl.exp(-z))`` takes
    13 (sm_90), which made the SiLU backward instruction-bound (benchmarks/NOTES.md)."""
    return _divide(1.0, _one_plus_exp_neg(z))


@triton.jit
def _silu(z):
    """``SiLU(z) = z * sigmoid(z)``, as :func:`_sigmoid` (fp32 on the GPU: 0 in place of
    about -1e-36 for z in [-88.7, -87.3], where ``1 + exp(-z)`` passes 2**126)."""
    return _divide(z, _one_plus_exp_neg(z))


@triton.jit
def _tile(pid, L_in, D, BLOCK_D: tl.constexpr, BLOCK_L: tl.constexpr, INDEX_64: tl.constexpr):
    """(batch index, channels, positions) of program ``pid`` (axis 0: batch x position blocks,
    position blocks fastest; axis 1: channel blocks)."""
    l_blocks = tl.cdiv(L_in, BLOCK_L)
    b = pid // l_blocks
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    pos = (pid % l_blocks) * BLOCK_L + tl.arange(0, BLOCK_L)
    if INDEX_64:
        b = b.to(tl.int64)
        d = d.to(tl.int64)
        pos = pos.to(tl.int64)
    return b, d, pos


@triton.jit
def _pre_activation(
    x_base,
    x_sl,
    w_ptr,
    w_sd,
    w_sk,
    bias,
    d,
    d_ok,
    at,
    L_in,
    PAD: tl.constexpr,
    WIDTH: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    """z at output positions ``at``: the WIDTH taps over x (0 outside the sequence) plus bias."""
    z = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE) + bias[:, None]
    for k in tl.static_range(WIDTH):
        src = at - PAD + k
        ok = d_ok[:, None] & ((src >= 0) & (src < L_in))[None, :]
        xs = tl.load(x_base + src[None, :] * x_sl, mask=ok, other=0).to(ACC_DTYPE)
        wk = tl.load(w_ptr + d * w_sd + k * w_sk, mask=d_ok, other=0).to(ACC_DTYPE)
        z += xs * wk[:, None]
    return z


@triton.jit
def _output_grad(
    dy_base,
    dy_sl,
    x_base,
    x_sl,
    w_ptr,
    w_sd,
    w_sk,
    bias,
    d,
    d_ok,
    at,
    L_in,
    L_out,
    PAD: tl.constexpr,
    WIDTH: tl.constexpr,
    SILU: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    """g = dy * act'(z) at output positions ``at`` (0 outside ``[0, L_out)``); with SiLU,
    z is recomputed from x: SiLU'(z) = s * (1 + z * (1 - s)), s = sigmoid(z)."""
    at_ok = d_ok[:, None] & ((at >= 0) & (at < L_out))[None, :]
    g = tl.load(dy_base + at[None, :] * dy_sl, mask=at_ok, other=0).to(ACC_DTYPE)
    if SILU:
        z = _pre_activation(
            x_base, x_sl, w_ptr, w_sd, w_sk, bias, d, d_ok, at, L_in,
            PAD, WIDTH, ACC_DTYPE, BLOCK_D, BLOCK_L,
        )  # fmt: skip
        g = _silu_grad(g, z)
    return g


@triton.jit
def _silu_grad(g, z):
    """``g * SiLU'(z)``: SiLU'(z) = s * (1 + z * (1 - s)) = s + s * (z - z * s), s = sigmoid(z)
    (two fused multiply-adds and a product)."""
    s = _sigmoid(z)
    return g * (s + s * (z - z * s))


@triton.jit
def _grad_and_inputs(
    dy_base,
    dy_sl,
    x_base,
    x_sl,
    w_ptr,
    w_sd,
    w_sk,
    bias,
    d,
    d_ok,
    at,
    L_in,
    L_out,
    PAD: tl.constexpr,
    WIDTH: tl.constexpr,
    SILU: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    """:func:`_output_grad`, and for widths up to 4 the tap sets of x it read
    (``x[at - PAD + k]``; zeros for ``k >= WIDTH``, and all zeros above width 4), from which
    the weight gradient's products at positions ``at`` are formed without loading x again."""
    x0 = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE)
    x1 = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE)
    x2 = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE)
    x3 = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE)
    if WIDTH > 4:
        g = _output_grad(
            dy_base, dy_sl, x_base, x_sl, w_ptr, w_sd, w_sk, bias, d, d_ok, at, L_in, L_out,
            PAD, WIDTH, SILU, ACC_DTYPE, BLOCK_D, BLOCK_L,
        )  # fmt: skip
    else:
        at_ok = d_ok[:, None] & ((at >= 0) & (at < L_out))[None, :]
        g = tl.load(dy_base + at[None, :] * dy_sl, mask=at_ok, other=0).to(ACC_DTYPE)
        x0 = _x_at(x_base, x_sl, d_ok, at - PAD, L_in, ACC_DTYPE)
        if WIDTH > 1:
            x1 = _x_at(x_base, x_sl, d_ok, at - PAD + 1, L_in, ACC_DTYPE)
        if WIDTH > 2:
            x2 = _x_at(x_base, x_sl, d_ok, at - PAD + 2, L_in, ACC_DTYPE)
        if WIDTH > 3:
            x3 = _x_at(x_base, x_sl, d_ok, at - PAD + 3, L_in, ACC_DTYPE)
        if SILU:  # z summed as _pre_activation sums it: bias, then the taps in order
            z = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE) + bias[:, None]
            z += x0 * _tap_weight(w_ptr, w_sd, w_sk, d, d_ok, 0, ACC_DTYPE)[:, None]
            if WIDTH > 1:
                z += x1 * _tap_weight(w_ptr, w_sd, w_sk, d, d_ok, 1, ACC_DTYPE)[:, None]
            if WIDTH > 2:
                z += x2 * _tap_weight(w_ptr, w_sd, w_sk, d, d_ok, 2, ACC_DTYPE)[:, None]
            if WIDTH > 3:
                z += x3 * _tap_weight(w_ptr, w_sd, w_sk, d, d_ok, 3, ACC_DTYPE)[:, None]
            g = _silu_grad(g, z)
    return g, x0, x1, x2, x3


@triton.jit
def _tap_weight(w_ptr, w_sd, w_sk, d, d_ok, k: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """Tap ``k``'s weights of channels ``d``, in the accumulator dtype."""
    return tl.load(w_ptr + d * w_sd + k * w_sk, mask=d_ok, other=0).to(ACC_DTYPE)


@triton.jit
def _tap_weights(w_ptr, w_sd, w_sk, d, d_ok, WIDTH: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """The first four taps' weights of channels ``d`` (widths up to 4; zeros past the width),
    in the accumulator dtype."""
    w0 = _tap_weight(w_ptr, w_sd, w_sk, d, d_ok, 0, ACC_DTYPE)
    w1 = tl.zeros_like(w0)
    w2 = tl.zeros_like(w0)
    w3 = tl.zeros_like(w0)
    if WIDTH > 1:
        w1 = _tap_weight(w_ptr, w_sd, w_sk, d, d_ok, 1, ACC_DTYPE)
    if WIDTH > 2:
        w2 = _tap_weight(w_ptr, w_sd, w_sk, d, d_ok, 2, ACC_DTYPE)
    if WIDTH > 3:
        w3 = _tap_weight(w_ptr, w_sd, w_sk, d, d_ok, 3, ACC_DTYPE)
    return w0, w1, w2, w3


@triton.jit
def _add_products(a_bias, a0, a1, a2, a3, g, x0, x1, x2, x3, WIDTH: tl.constexpr):
    """The bias and weight gradients' elementwise sums, plus one block's ``g`` and
    ``g * x_k``."""
    a_bias += g
    a0 += g * x0
    if WIDTH > 1:
        a1 += g * x1
    if WIDTH > 2:
        a2 += g * x2
    if WIDTH > 3:
        a3 += g * x3
    return a_bias, a0, a1, a2, a3


@triton.jit
def _x_at(x_base, x_sl, d_ok, src, L_in, ACC_DTYPE: tl.constexpr):
    """x at input positions ``src`` (0 outside the sequence), in the accumulator dtype."""
    ok = d_ok[:, None] & ((src >= 0) & (src < L_in))[None, :]
    return tl.load(x_base + src[None, :] * x_sl, mask=ok, other=0).to(ACC_DTYPE)


@triton.jit
def _store_tap(dw_part_ptr, part, WIDTH: tl.constexpr, k: tl.constexpr, acc, d_ok):
    tl.store(dw_part_ptr + part * WIDTH + k, tl.sum(acc, 1), mask=d_ok)


@triton.jit
def _shifted(g_prev, g_cur, g_next, shift: tl.constexpr, BLOCK_D, BLOCK_L):
    """g at positions ``pos + shift`` for a block's positions ``pos``, gathered from the
    block's own tile ``g_cur`` and its neighbours' (``[BLOCK_D, BLOCK_L]`` each; the gathers
    keep source and index shapes equal, as Triton 3.6's warp-local gather layout needs);
    ``|shift| < BLOCK_L``."""
    out = g_cur
    if shift != 0:
        q = tl.broadcast_to((tl.arange(0, BLOCK_L) + shift)[None, :], [BLOCK_D, BLOCK_L])
        out = tl.gather(g_cur, tl.minimum(tl.maximum(q, 0), BLOCK_L - 1), 1)
        if shift > 0:
            side = tl.gather(g_next, tl.maximum(q - BLOCK_L, 0), 1)
            out = tl.where(q >= BLOCK_L, side, out)
        else:
            side = tl.gather(g_prev, tl.minimum(q + BLOCK_L, BLOCK_L - 1), 1)
            out = tl.where(q < 0, side, out)
    return out


@triton.jit
def causal_conv1d_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    D,
    L_in,
    L_out,
    x_sb,
    x_sd,
    x_sl,
    w_sd,
    w_sk,
    y_sb,
    y_sd,
    y_sl,
    PAD: tl.constexpr,
    WIDTH: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_L: tl.constexpr,
    INDEX_64: tl.constexpr,
    X_ONCE: tl.constexpr = False,
):
    """y = act(z) on one ``[BLOCK_D, BLOCK_L]`` tile (module docstring); position blocks tile
    ``L_in`` (at least ``L_out``), the store is masked to ``L_out``.

    ``X_ONCE`` (``PAD`` and ``WIDTH - 1 - PAD`` under ``BLOCK_L``): x is loaded once, at the
    block's own positions (block-aligned: vector loads), with the few positions the taps
    reach before and after it as tiles masked to those positions (:func:`_shifted`'s equal
    shapes); each tap's shifted set is gathered from the three in registers. Otherwise each
    tap loads its shifted set itself: addresses one element off the block's alignment, which
    the compiler cannot vectorise, and the neighbouring taps' loads hit L1. The same products
    are summed in the same order either way: integers are bit for bit the same, fp32 may
    differ in the last bit or two where the compiler fuses multiply-adds differently."""
    b, d, pos = _tile(tl.program_id(0), L_in, D, BLOCK_D, BLOCK_L, INDEX_64)
    d_ok = d < D
    bias = tl.zeros([BLOCK_D], dtype=ACC_DTYPE)
    if HAS_BIAS:
        bias = tl.load(b_ptr + d, mask=d_ok, other=0).to(ACC_DTYPE)
    x_base = x_ptr + b * x_sb + d[:, None] * x_sd
    if X_ONCE:
        x_cur = _x_at(x_base, x_sl, d_ok, pos, L_in, ACC_DTYPE)
        x_prev = x_cur
        x_next = x_cur
        offs = tl.arange(0, BLOCK_L)
        if PAD > 0:  # the last PAD positions of the block before (zeros before the start)
            before = pos - BLOCK_L
            reach = d_ok[:, None] & ((before >= 0) & (offs >= BLOCK_L - PAD))[None, :]
            x_prev = tl.load(x_base + before[None, :] * x_sl, mask=reach, other=0)
            x_prev = x_prev.to(ACC_DTYPE)
        if WIDTH - 1 - PAD > 0:  # the first positions of the block after (zeros past the end)
            after = pos + BLOCK_L
            reach = d_ok[:, None] & ((after < L_in) & (offs < WIDTH - 1 - PAD))[None, :]
            x_next = tl.load(x_base + after[None, :] * x_sl, mask=reach, other=0)
            x_next = x_next.to(ACC_DTYPE)
        z = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE) + bias[:, None]
        for k in tl.static_range(WIDTH):
            xs = _shifted(x_prev, x_cur, x_next, k - PAD, BLOCK_D, BLOCK_L)
            wk = tl.load(w_ptr + d * w_sd + k * w_sk, mask=d_ok, other=0).to(ACC_DTYPE)
            z += xs * wk[:, None]
    else:
        z = _pre_activation(
            x_base, x_sl, w_ptr, w_sd, w_sk, bias, d, d_ok, pos, L_in,
            PAD, WIDTH, ACC_DTYPE, BLOCK_D, BLOCK_L,
        )  # fmt: skip
    if SILU:
        z = _silu(z)
    y = y_ptr + b * y_sb + d[:, None] * y_sd + pos[None, :] * y_sl
    tl.store(y, z.to(y_ptr.dtype.element_ty), mask=d_ok[:, None] & (pos < L_out)[None, :])


@triton.jit
def causal_conv1d_backward_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    dy_ptr,
    dx_ptr,
    dw_part_ptr,
    db_part_ptr,
    D,
    L_in,
    L_out,
    chunk_blocks,
    x_sb,
    x_sd,
    x_sl,
    w_sd,
    w_sk,
    dy_sb,
    dy_sd,
    dy_sl,
    dx_sb,
    dx_sd,
    dx_sl,
    PAD: tl.constexpr,
    WIDTH: tl.constexpr,
    WIDTH_P2: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
    GRAD_INPUT: tl.constexpr,
    GRAD_PARAMS: tl.constexpr,
    G_ONCE: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_L: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """The backward in one pass. A program owns ``BLOCK_D`` channels of one sequence and a
    chunk of ``chunk_blocks`` consecutive ``BLOCK_L``-position blocks (axis 0: sequences x
    chunks, chunks fastest; axis 1: channel blocks), walked one block at a time.

    g = dy * act'(z) (:func:`_output_grad`). Input position ``i`` is read by output position
    ``i + PAD - k`` through tap ``k``, so with ``j = WIDTH - 1 - k``:
    ``dx[i] = sum_j w[WIDTH-1-j] * g[i + PAD - (WIDTH-1) + j]``: g at WIDTH shifted position sets.
    With ``G_ONCE`` g is computed once per block and the shifted sets are gathered in
    registers from its tile and its neighbours' (:func:`_shifted`); otherwise each set is
    recomputed from dy and x (WIDTH + 1 loads and a sigmoid per set: the first version, kept
    to compare). From g at the block's own positions
    the chunk's sums ``dw[d, k] = sum_l g[l] * x[l - PAD + k]`` and
    ``db[d] = sum_l g[l]`` accumulate in registers (widths up to 4: elementwise over the
    chunk, reduced once at the end, the products formed where g is computed, from the x tap
    sets its z read; per block above), stored once at partial index ``pid`` for a fixed-order
    sum afterwards (bitwise reproducible; no atomics)."""
    pid = tl.program_id(0)
    if INDEX_64:
        pid = pid.to(tl.int64)
    l_blocks = tl.cdiv(L_in, BLOCK_L)
    chunks = tl.cdiv(l_blocks, chunk_blocks)
    b = pid // chunks
    first_block = (pid % chunks) * chunk_blocks
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    if INDEX_64:
        d = d.to(tl.int64)
    d_ok = d < D
    x_base = x_ptr + b * x_sb + d[:, None] * x_sd
    dy_base = dy_ptr + b * dy_sb + d[:, None] * dy_sd
    bias = tl.zeros([BLOCK_D], dtype=ACC_DTYPE)
    if HAS_BIAS:
        bias = tl.load(b_ptr + d, mask=d_ok, other=0).to(ACC_DTYPE)
    taps = tl.arange(0, WIDTH_P2)
    dw_acc = tl.zeros([BLOCK_D, WIDTH_P2], dtype=ACC_DTYPE)  # widths above 4
    a_bias = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE)
    a0 = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE)
    a1 = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE)
    a2 = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE)
    a3 = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE)
    # With G_ONCE and dx wanted, g of the neighbouring blocks the shifts reach is carried
    # from one block to the next: each block's g is computed once (plus one block per chunk).
    AHEAD: tl.constexpr = G_ONCE and GRAD_INPUT and PAD > 0
    BEHIND: tl.constexpr = G_ONCE and GRAD_INPUT and PAD < WIDTH - 1
    offsets = tl.arange(0, BLOCK_L)
    if INDEX_64:
        offsets = offsets.to(tl.int64)
    g_prev = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE)
    g_cur = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE)
    if BEHIND:
        g_prev = _output_grad(
            dy_base, dy_sl, x_base, x_sl, w_ptr, w_sd, w_sk, bias, d, d_ok,
            (first_block - 1) * BLOCK_L + offsets, L_in, L_out,
            PAD, WIDTH, SILU, ACC_DTYPE, BLOCK_D, BLOCK_L,
        )  # fmt: skip
    # Widths up to 4: the weight gradient's products are formed where g is, from the x tap
    # sets g's recomputed z read (each x element loaded WIDTH times a block, not 2 * WIDTH).
    FUSED: tl.constexpr = GRAD_PARAMS and WIDTH <= 4
    last_block = tl.minimum(first_block + chunk_blocks, l_blocks) - 1
    if AHEAD:
        g_cur, f0, f1, f2, f3 = _grad_and_inputs(
            dy_base, dy_sl, x_base, x_sl, w_ptr, w_sd, w_sk, bias, d, d_ok,
            first_block * BLOCK_L + offsets, L_in, L_out,
            PAD, WIDTH, SILU, ACC_DTYPE, BLOCK_D, BLOCK_L,
        )  # fmt: skip
        if FUSED:  # the chunk's first block
            a_bias, a0, a1, a2, a3 = _add_products(
                a_bias, a0, a1, a2, a3, g_cur, f0, f1, f2, f3, WIDTH
            )
    for block in range(first_block, last_block + 1):
        pos = block * BLOCK_L + offsets
        # g at the block's own positions (as output positions)
        if not AHEAD:
            g_cur, c0, c1, c2, c3 = _grad_and_inputs(
                dy_base, dy_sl, x_base, x_sl, w_ptr, w_sd, w_sk, bias, d, d_ok, pos, L_in,
                L_out, PAD, WIDTH, SILU, ACC_DTYPE, BLOCK_D, BLOCK_L,
            )  # fmt: skip
            if FUSED:
                a_bias, a0, a1, a2, a3 = _add_products(
                    a_bias, a0, a1, a2, a3, g_cur, c0, c1, c2, c3, WIDTH
                )
        g_next = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE)
        if AHEAD:
            g_next, n0, n1, n2, n3 = _grad_and_inputs(
                dy_base, dy_sl, x_base, x_sl, w_ptr, w_sd, w_sk, bias, d, d_ok,
                pos + BLOCK_L, L_in, L_out, PAD, WIDTH, SILU, ACC_DTYPE, BLOCK_D, BLOCK_L,
            )  # fmt: skip
            if FUSED and block < last_block:  # (the next chunk's first block: not ours)
                a_bias, a0, a1, a2, a3 = _add_products(
                    a_bias, a0, a1, a2, a3, g_next, n0, n1, n2, n3, WIDTH
                )
        if GRAD_PARAMS and not FUSED:
            a_bias += g_cur
            for k in tl.static_range(WIDTH):
                xs = _x_at(x_base, x_sl, d_ok, pos - PAD + k, L_in, ACC_DTYPE)
                term = tl.sum(g_cur * xs, 1)
                dw_acc += tl.where(taps[None, :] == k, term[:, None], 0)
        if GRAD_INPUT:
            dx = tl.zeros([BLOCK_D, BLOCK_L], dtype=ACC_DTYPE)
            for j in tl.static_range(WIDTH):
                # g at pos + shift, shift = PAD - (WIDTH - 1) + j
                if G_ONCE:
                    shifted = _shifted(
                        g_prev, g_cur, g_next, PAD - (WIDTH - 1) + j, BLOCK_D, BLOCK_L
                    )
                elif j == WIDTH - 1 - PAD:
                    shifted = g_cur
                else:
                    shifted = _output_grad(
                        dy_base, dy_sl, x_base, x_sl, w_ptr, w_sd, w_sk, bias, d, d_ok,
                        pos + (PAD - (WIDTH - 1) + j), L_in, L_out,
                        PAD, WIDTH, SILU, ACC_DTYPE, BLOCK_D, BLOCK_L,
                    )  # fmt: skip
                wk = tl.load(w_ptr + d * w_sd + (WIDTH - 1 - j) * w_sk, mask=d_ok, other=0)
                dx += shifted * wk.to(ACC_DTYPE)[:, None]
            out = dx_ptr + b * dx_sb + d[:, None] * dx_sd + pos[None, :] * dx_sl
            ok = d_ok[:, None] & (pos < L_in)[None, :]
            tl.store(out, dx.to(dx_ptr.dtype.element_ty), mask=ok)
        if BEHIND:
            g_prev = g_cur
        if AHEAD:
            g_cur = g_next
    if GRAD_PARAMS:
        part = pid * D + d
        if WIDTH <= 4:
            _store_tap(dw_part_ptr, part, WIDTH, 0, a0, d_ok)
            if WIDTH > 1:
                _store_tap(dw_part_ptr, part, WIDTH, 1, a1, d_ok)
            if WIDTH > 2:
                _store_tap(dw_part_ptr, part, WIDTH, 2, a2, d_ok)
            if WIDTH > 3:
                _store_tap(dw_part_ptr, part, WIDTH, 3, a3, d_ok)
        else:
            dw_ok = d_ok[:, None] & (taps < WIDTH)[None, :]
            tl.store(dw_part_ptr + part[:, None] * WIDTH + taps[None, :], dw_acc, mask=dw_ok)
        tl.store(db_part_ptr + part, tl.sum(a_bias, 1), mask=d_ok)


@triton.jit
def _pick(v0, v1, v2, v3, i: tl.constexpr):
    """``(v0, v1, v2, v3)[i]`` for a compile-time ``i``."""
    if i == 0:
        out = v0
    elif i == 1:
        out = v1
    elif i == 2:
        out = v2
    else:
        out = v3
    return out


@triton.jit
def _row_at(base, stride, at, limit, d_ok, ACC_DTYPE: tl.constexpr):
    """One position ``at`` of a channel-last sequence: ``[BLOCK_D]`` channels (0 where ``at``
    is outside ``[0, limit)``), in the accumulator dtype."""
    at_d = at + tl.zeros_like(d_ok.to(tl.int32))  # (a tensor under the interpreter too)
    ok = d_ok & (at_d >= 0) & (at_d < limit)
    return tl.load(base + at * stride, mask=ok, other=0).to(ACC_DTYPE)


@triton.jit
def causal_conv1d_backward_rows_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    dy_ptr,
    dx_ptr,
    dw_part_ptr,
    db_part_ptr,
    D,
    L_in,
    L_out,
    chunk_blocks,
    x_sb,
    x_sd,
    x_sl,
    w_sd,
    w_sk,
    dy_sb,
    dy_sd,
    dy_sl,
    dx_sb,
    dx_sd,
    dx_sl,
    PAD: tl.constexpr,
    WIDTH: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
    GRAD_INPUT: tl.constexpr,
    GRAD_PARAMS: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_L: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """The backward of :func:`causal_conv1d_backward_kernel` (same arguments, partials and
    grid: axis 0 sequences x chunks of ``chunk_blocks`` blocks of ``BLOCK_L`` positions, axis
    1 channel blocks) for channel-last x and widths up to 4, one position at a time: a step
    loads one row of ``BLOCK_D`` channels of x and of dy (contiguous: vector loads), and the
    window's other rows are the previous steps' values, kept in registers. Every element of x
    and dy is loaded once (plus ``WIDTH - 1`` rows a chunk), g computed once, nothing
    gathered across threads.

    Step ``s`` loads ``x[s]``; its window ``x[s - WIDTH + 1 .. s]`` gives z, then g, at output
    position ``t = s + PAD - (WIDTH - 1)`` (dy[t]; g = 0 outside ``[0, L_out)``); the last
    ``WIDTH`` g (``g[t - WIDTH + 1 .. t]``) give dx at ``i = s - (WIDTH - 1)``:
    ``dx[i] = sum_j w[WIDTH-1-j] g[t - (WIDTH-1) + j]``, and ``dw[k] += g[t] x[t - PAD + k]``,
    ``db += g[t]`` for the chunk's own positions. Sums in the order of the block kernel's
    (bias then taps for z; j ascending for dx)."""
    pid = tl.program_id(0)
    if INDEX_64:
        pid = pid.to(tl.int64)
    l_blocks = tl.cdiv(L_in, BLOCK_L)
    chunks = tl.cdiv(l_blocks, chunk_blocks)
    b = pid // chunks
    p0 = (pid % chunks) * chunk_blocks * BLOCK_L  # the chunk's positions: [p0, p1)
    p1 = p0 + chunk_blocks * BLOCK_L
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    if INDEX_64:
        d = d.to(tl.int64)
    d_ok = d < D
    x_base = x_ptr + b * x_sb + d * x_sd
    dy_base = dy_ptr + b * dy_sb + d * dy_sd
    dx_base = dx_ptr + b * dx_sb + d * dx_sd
    bias = tl.zeros([BLOCK_D], dtype=ACC_DTYPE)
    if HAS_BIAS:
        bias = tl.load(b_ptr + d, mask=d_ok, other=0).to(ACC_DTYPE)
    zero = tl.zeros([BLOCK_D], dtype=ACC_DTYPE)
    w0, w1, w2, w3 = _tap_weights(w_ptr, w_sd, w_sk, d, d_ok, WIDTH, ACC_DTYPE)
    # x[s - 1], x[s - 2], x[s - 3] before step s = p0 (rows before the sequence: zeros)
    x1, x2, x3 = zero, zero, zero
    if WIDTH > 1:
        x1 = _row_at(x_base, x_sl, p0 - 1, L_in, d_ok, ACC_DTYPE)
    if WIDTH > 2:
        x2 = _row_at(x_base, x_sl, p0 - 2, L_in, d_ok, ACC_DTYPE)
    if WIDTH > 3:
        x3 = _row_at(x_base, x_sl, p0 - 3, L_in, d_ok, ACC_DTYPE)
    # g[t - 1], g[t - 2], g[t - 3]: read only by dx at positions before p0 (not stored) until
    # the steps have filled them
    g1, g2, g3 = zero, zero, zero
    a_bias, a0, a1, a2, a3 = zero, zero, zero, zero, zero
    # dx of the chunk's last position comes WIDTH - 1 steps after its x: steps [p0, p1 + W - 1)
    for s0 in range(p0, p1 + WIDTH - 1, BLOCK_L):
        for r in tl.static_range(BLOCK_L):
            s = s0 + r
            xs = _row_at(x_base, x_sl, s, L_in, d_ok, ACC_DTYPE)
            t = s + PAD - (WIDTH - 1)
            g = _row_at(dy_base, dy_sl, t, L_out, d_ok, ACC_DTYPE)
            if SILU:  # z summed as _pre_activation sums it: bias, then the taps in order
                z = bias
                for k in tl.static_range(WIDTH):  # tap k reads x[s - (WIDTH - 1 - k)]
                    z += _pick(xs, x1, x2, x3, WIDTH - 1 - k) * _pick(w0, w1, w2, w3, k)
                g = _silu_grad(g, z)
            if GRAD_PARAMS:
                t_d = t + tl.zeros_like(d)  # (a tensor under the interpreter too)
                gm = tl.where((t_d >= p0) & (t_d < p1), g, 0)
                a_bias += gm
                a0 += gm * _pick(xs, x1, x2, x3, WIDTH - 1)
                if WIDTH > 1:
                    a1 += gm * _pick(xs, x1, x2, x3, WIDTH - 2)
                if WIDTH > 2:
                    a2 += gm * _pick(xs, x1, x2, x3, WIDTH - 3)
                if WIDTH > 3:
                    a3 += gm * xs
            if GRAD_INPUT:
                i = s - (WIDTH - 1)
                dx = tl.zeros([BLOCK_D], dtype=ACC_DTYPE)
                for j in tl.static_range(WIDTH):  # g[t - (WIDTH - 1) + j]
                    gj = _pick(g, g1, g2, g3, WIDTH - 1 - j)
                    dx += gj * _pick(w0, w1, w2, w3, WIDTH - 1 - j)
                i_d = i + tl.zeros_like(d)
                ok = d_ok & (i_d >= p0) & (i_d < p1) & (i_d < L_in)
                tl.store(dx_base + i * dx_sl, dx.to(dx_ptr.dtype.element_ty), mask=ok)
            x3, x2, x1 = x2, x1, xs
            g3, g2, g1 = g2, g1, g
    if GRAD_PARAMS:
        part = pid * D + d
        tl.store(dw_part_ptr + part * WIDTH, a0, mask=d_ok)
        if WIDTH > 1:
            tl.store(dw_part_ptr + part * WIDTH + 1, a1, mask=d_ok)
        if WIDTH > 2:
            tl.store(dw_part_ptr + part * WIDTH + 2, a2, mask=d_ok)
        if WIDTH > 3:
            tl.store(dw_part_ptr + part * WIDTH + 3, a3, mask=d_ok)
        tl.store(db_part_ptr + part, a_bias, mask=d_ok)


# --------------------------------------------------------------------------------------------
# Widths up to 4: 8-position segments held whole by one thread (channel-first x; channel-last
# x with the rows channels-fastest)
# --------------------------------------------------------------------------------------------


@triton.jit
def _split8(t):
    """The 8 columns of a ``[ROWS, 8]`` tile, in order. A thread holds whole rows of a tile
    loaded along its contiguous columns (16-bit data: one 16-byte vector a row), so the
    splits move no data."""
    R: tl.constexpr = t.shape[0]
    even, odd = tl.split(tl.reshape(t, [R, 4, 2]))  # columns 2m, 2m + 1
    c04, c26 = tl.split(tl.reshape(even, [R, 2, 2]))  # columns 4m, 4m + 2
    c15, c37 = tl.split(tl.reshape(odd, [R, 2, 2]))  # columns 4m + 1, 4m + 3
    c0, c4 = tl.split(c04)
    c2, c6 = tl.split(c26)
    c1, c5 = tl.split(c15)
    c3, c7 = tl.split(c37)
    return c0, c1, c2, c3, c4, c5, c6, c7


@triton.jit
def _join8(c0, c1, c2, c3, c4, c5, c6, c7):
    """The ``[ROWS, 8]`` tile of 8 ``[ROWS]`` columns (:func:`_split8`'s inverse)."""
    R: tl.constexpr = c0.shape[0]
    even = tl.reshape(tl.join(tl.join(c0, c4), tl.join(c2, c6)), [R, 4])
    odd = tl.reshape(tl.join(tl.join(c1, c5), tl.join(c3, c7)), [R, 4])
    return tl.reshape(tl.join(even, odd), [R, 8])


@triton.jit
def _pick8(t, i: tl.constexpr):
    """Column ``i`` of a ``[ROWS, 8]`` tile, for a compile-time ``i``."""
    c0, c1, c2, c3, c4, c5, c6, c7 = _split8(t)
    return _pick(_pick(c0, c1, c2, c3, i % 4), _pick(c4, c5, c6, c7, i % 4), c0, c0, i // 4)


@triton.jit
def _column(before, own, after, c: tl.constexpr):
    """Column ``c`` (``-8 <= c < 16``) of three consecutive segments' tiles: ``before``'s
    columns are ``c < 0``, ``own``'s ``0..7``, ``after``'s ``8..15``."""
    if c < 0:
        out = _pick8(before, c + 8)
    elif c < 8:
        out = _pick8(own, c)
    else:
        out = _pick8(after, c - 8)
    return out


@triton.jit
def _segments(base, stride, start, limit, row_ok, ACC_DTYPE: tl.constexpr):
    """``[ROWS, 8]``: each row's 8 positions from ``start`` (``[ROWS]``; 0 outside
    ``[0, limit)``) of the sequence at ``base`` (``[ROWS]`` pointers), in the accumulator
    dtype. Segments start on multiples of 8: aligned vector loads."""
    at = start[:, None] + tl.arange(0, 8)[None, :]
    ok = row_ok[:, None] & (at >= 0) & (at < limit)
    return tl.load(base[:, None] + at * stride, mask=ok, other=0).to(ACC_DTYPE)


@triton.jit
def _z_column(x_before, x_own, x_after, w0, w1, w2, w3, bias, c: tl.constexpr,
              PAD: tl.constexpr, WIDTH: tl.constexpr):  # fmt: skip
    """z at column ``c`` of a segment: bias, then the taps in order (as
    :func:`_pre_activation` sums them)."""
    z = bias
    for k in tl.static_range(WIDTH):
        z += _column(x_before, x_own, x_after, c - PAD + k) * _pick(w0, w1, w2, w3, k)
    return z


@triton.jit
def _segment_rows(D, SEGMENTS: tl.constexpr, BLOCK_D: tl.constexpr, INDEX_64: tl.constexpr,
                  CHANNELS_FASTEST: tl.constexpr):  # fmt: skip
    """A segment program's rows (``BLOCK_D`` channels x ``SEGMENTS`` segments, segments
    fastest, or channels with ``CHANNELS_FASTEST``: the rows then run along channel-last
    memory, each thread's 8 rows one vector and its 8 columns 8 of them): each row's channel,
    whether it exists, and its segment's index in the block."""
    r = tl.arange(0, BLOCK_D * SEGMENTS)
    if CHANNELS_FASTEST:
        d = tl.program_id(1) * BLOCK_D + r % BLOCK_D
        seg = r // BLOCK_D
    else:
        d = tl.program_id(1) * BLOCK_D + r // SEGMENTS
        seg = r % SEGMENTS
    if INDEX_64:
        d = d.to(tl.int64)
        seg = seg.to(tl.int64)
    return d, d < D, seg


@triton.jit
def causal_conv1d_segments_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    D,
    L_in,
    L_out,
    x_sb,
    x_sd,
    x_sl,
    w_sd,
    w_sk,
    y_sb,
    y_sd,
    y_sl,
    PAD: tl.constexpr,
    WIDTH: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SEGMENTS: tl.constexpr,
    INDEX_64: tl.constexpr,
    CHANNELS_FASTEST: tl.constexpr = False,
):
    """The forward (:func:`causal_conv1d_kernel`'s arguments and grid, blocks of ``SEGMENTS``
    x 8 positions) for widths up to 4, with no data crossing threads: a program's rows are
    ``BLOCK_D`` channels x ``SEGMENTS`` aligned 8-position segments, each row one thread's
    (a warp covers 32 consecutive segments of a channel: 512 contiguous bytes of bf16; with
    ``CHANNELS_FASTEST``, for channel-last x, the rows run channels first, so a thread holds
    8 adjacent channels' segments and each of its 8 column loads is one 16-byte vector). A row
    loads its own 8 positions of x and, for the window's reach, the segment before's
    (``PAD > 0``) and after's (``PAD < WIDTH - 1``) as whole aligned vectors (the
    neighbouring threads' data: L1 hits), splits them into columns in registers, and forms
    its 8 outputs from them."""
    pid = tl.program_id(0)
    if INDEX_64:
        pid = pid.to(tl.int64)
    l_blocks = tl.cdiv(L_in, SEGMENTS * 8)
    b = pid // l_blocks
    d, d_ok, seg = _segment_rows(D, SEGMENTS, BLOCK_D, INDEX_64, CHANNELS_FASTEST)
    start = ((pid % l_blocks) * SEGMENTS + seg) * 8
    x_base = x_ptr + b * x_sb + d * x_sd
    bias = tl.zeros([BLOCK_D * SEGMENTS], dtype=ACC_DTYPE)
    if HAS_BIAS:
        bias = tl.load(b_ptr + d, mask=d_ok, other=0).to(ACC_DTYPE)
    w0, w1, w2, w3 = _tap_weights(w_ptr, w_sd, w_sk, d, d_ok, WIDTH, ACC_DTYPE)
    x_own = _segments(x_base, x_sl, start, L_in, d_ok, ACC_DTYPE)
    x_before = x_own
    x_after = x_own
    if PAD > 0:
        x_before = _segments(x_base, x_sl, start - 8, L_in, d_ok, ACC_DTYPE)
    if WIDTH - 1 - PAD > 0:
        x_after = _segments(x_base, x_sl, start + 8, L_in, d_ok, ACC_DTYPE)
    y0 = _z_column(x_before, x_own, x_after, w0, w1, w2, w3, bias, 0, PAD, WIDTH)
    y1 = _z_column(x_before, x_own, x_after, w0, w1, w2, w3, bias, 1, PAD, WIDTH)
    y2 = _z_column(x_before, x_own, x_after, w0, w1, w2, w3, bias, 2, PAD, WIDTH)
    y3 = _z_column(x_before, x_own, x_after, w0, w1, w2, w3, bias, 3, PAD, WIDTH)
    y4 = _z_column(x_before, x_own, x_after, w0, w1, w2, w3, bias, 4, PAD, WIDTH)
    y5 = _z_column(x_before, x_own, x_after, w0, w1, w2, w3, bias, 5, PAD, WIDTH)
    y6 = _z_column(x_before, x_own, x_after, w0, w1, w2, w3, bias, 6, PAD, WIDTH)
    y7 = _z_column(x_before, x_own, x_after, w0, w1, w2, w3, bias, 7, PAD, WIDTH)
    y = _join8(y0, y1, y2, y3, y4, y5, y6, y7)
    if SILU:
        y = _silu(y)
    at = start[:, None] + tl.arange(0, 8)[None, :]
    out = y_ptr + (b * y_sb + d * y_sd)[:, None] + at * y_sl
    tl.store(out, y.to(y_ptr.dtype.element_ty), mask=d_ok[:, None] & (at < L_out))


@triton.jit
def _g_column(x_before, x_own, x_after, dy_before, dy_own, dy_after, w0, w1, w2, w3, bias,
              c: tl.constexpr, PAD: tl.constexpr, WIDTH: tl.constexpr, SILU: tl.constexpr):  # fmt: skip
    """g = dy * act'(z) at column ``c`` of a segment (0 where dy is: outside ``[0, L_out)``)."""
    g = _column(dy_before, dy_own, dy_after, c)
    if SILU:
        g = _silu_grad(g, _z_column(x_before, x_own, x_after, w0, w1, w2, w3, bias, c, PAD, WIDTH))
    return g


@triton.jit
def _g_or_zero(x_before, x_own, x_after, dy_before, dy_own, dy_after, w0, w1, w2, w3, bias,
               c: tl.constexpr, LO: tl.constexpr, HI: tl.constexpr, PAD: tl.constexpr,
               WIDTH: tl.constexpr, SILU: tl.constexpr):  # fmt: skip
    """:func:`_g_column` at column ``c`` if ``LO <= c < HI``, else zeros (not computed)."""
    if c >= LO and c < HI:
        g = _g_column(x_before, x_own, x_after, dy_before, dy_own, dy_after, w0, w1, w2, w3,
                      bias, c, PAD, WIDTH, SILU)  # fmt: skip
    else:
        g = tl.zeros_like(bias)
    return g


@triton.jit
def _g_tile(x_before, x_own, x_after, dy_before, dy_own, dy_after, w0, w1, w2, w3, bias,
            FIRST: tl.constexpr, LO: tl.constexpr, HI: tl.constexpr, PAD: tl.constexpr,
            WIDTH: tl.constexpr, SILU: tl.constexpr):  # fmt: skip
    """``[ROWS, 8]``: g at columns ``FIRST .. FIRST + 7`` of a segment (``-8``: the segment
    before's, ``0`` its own, ``8`` the one after's), formed only at columns in
    ``[LO, HI)``, zeros elsewhere."""
    return _join8(
        _g_or_zero(x_before, x_own, x_after, dy_before, dy_own, dy_after, w0, w1, w2, w3, bias,
                   FIRST, LO, HI, PAD, WIDTH, SILU),
        _g_or_zero(x_before, x_own, x_after, dy_before, dy_own, dy_after, w0, w1, w2, w3, bias,
                   FIRST + 1, LO, HI, PAD, WIDTH, SILU),
        _g_or_zero(x_before, x_own, x_after, dy_before, dy_own, dy_after, w0, w1, w2, w3, bias,
                   FIRST + 2, LO, HI, PAD, WIDTH, SILU),
        _g_or_zero(x_before, x_own, x_after, dy_before, dy_own, dy_after, w0, w1, w2, w3, bias,
                   FIRST + 3, LO, HI, PAD, WIDTH, SILU),
        _g_or_zero(x_before, x_own, x_after, dy_before, dy_own, dy_after, w0, w1, w2, w3, bias,
                   FIRST + 4, LO, HI, PAD, WIDTH, SILU),
        _g_or_zero(x_before, x_own, x_after, dy_before, dy_own, dy_after, w0, w1, w2, w3, bias,
                   FIRST + 5, LO, HI, PAD, WIDTH, SILU),
        _g_or_zero(x_before, x_own, x_after, dy_before, dy_own, dy_after, w0, w1, w2, w3, bias,
                   FIRST + 6, LO, HI, PAD, WIDTH, SILU),
        _g_or_zero(x_before, x_own, x_after, dy_before, dy_own, dy_after, w0, w1, w2, w3, bias,
                   FIRST + 7, LO, HI, PAD, WIDTH, SILU),
    )  # fmt: skip


@triton.jit
def _dx_column(g_before, g_own, g_after, w0, w1, w2, w3, i: tl.constexpr, PAD: tl.constexpr,
               WIDTH: tl.constexpr):  # fmt: skip
    """dx at column ``i``: ``sum_j w[WIDTH-1-j] g[i + PAD - (WIDTH-1) + j]``, j ascending (as
    the block kernel sums)."""
    dx = tl.zeros_like(_column(g_before, g_own, g_after, i))
    for j in tl.static_range(WIDTH):
        shifted = _column(g_before, g_own, g_after, i + PAD - (WIDTH - 1) + j)
        dx += shifted * _pick(w0, w1, w2, w3, WIDTH - 1 - j)
    return dx


@triton.jit
def _g_products(g_own, x_before, x_own, x_after, p: tl.constexpr, k: tl.constexpr,
                PAD: tl.constexpr):  # fmt: skip
    """``g[p] * x[p - PAD + k]`` at column ``p``: tap ``k``'s weight-gradient product."""
    return _pick8(g_own, p) * _column(x_before, x_own, x_after, p - PAD + k)


@triton.jit
def _tap_sum(g_own, x_before, x_own, x_after, k: tl.constexpr, PAD: tl.constexpr):
    """A segment's ``sum_p g[p] x[p - PAD + k]`` over its 8 columns, in column order."""
    s = _g_products(g_own, x_before, x_own, x_after, 0, k, PAD)
    for p in tl.static_range(1, 8):
        s += _g_products(g_own, x_before, x_own, x_after, p, k, PAD)
    return s


@triton.jit
def causal_conv1d_backward_segments_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    dy_ptr,
    dx_ptr,
    dw_part_ptr,
    db_part_ptr,
    D,
    L_in,
    L_out,
    chunk_blocks,
    x_sb,
    x_sd,
    x_sl,
    w_sd,
    w_sk,
    dy_sb,
    dy_sd,
    dy_sl,
    dx_sb,
    dx_sd,
    dx_sl,
    PAD: tl.constexpr,
    WIDTH: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
    GRAD_INPUT: tl.constexpr,
    GRAD_PARAMS: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SEGMENTS: tl.constexpr,
    INDEX_64: tl.constexpr,
    CHANNELS_FASTEST: tl.constexpr = False,
    STAGES: tl.constexpr = 1,
):
    """The backward of :func:`causal_conv1d_backward_kernel` (same arguments, partials and
    grid; blocks of ``SEGMENTS`` x 8 positions) for widths up to 4, laid out as
    :func:`causal_conv1d_segments_kernel`: each row (one thread's) holds an aligned
    8-position segment of one channel and takes from the segments either side, as whole
    vectors, what the window reaches. g is formed at the segment's own columns and at the
    ``WIDTH - 1`` columns its dx reaches beyond them (recomputed there from x and dy rather
    than gathered from a neighbouring thread), dx at its 8 columns from those, and the
    weight and bias sums from g at its own columns, per row over the chunk's blocks, then
    over the program's segments (a fixed tree), stored at partial index ``pid``. ``STAGES`` > 1:
    Triton software-pipelines the walk over the chunk's blocks, the next blocks' loads
    issued (``cp.async`` to shared memory) while this one computes; 1 compiles to the plain
    loop (sm_90 SASS identical)."""
    pid = tl.program_id(0)
    if INDEX_64:
        pid = pid.to(tl.int64)
    BLOCK_L: tl.constexpr = SEGMENTS * 8
    ROWS: tl.constexpr = BLOCK_D * SEGMENTS
    # dx at column i reads g at columns i - BEHIND .. i + PAD
    BEHIND: tl.constexpr = WIDTH - 1 - PAD
    l_blocks = tl.cdiv(L_in, BLOCK_L)
    chunks = tl.cdiv(l_blocks, chunk_blocks)
    b = pid // chunks
    first_block = (pid % chunks) * chunk_blocks
    last_block = tl.minimum(first_block + chunk_blocks, l_blocks) - 1
    d, d_ok, seg = _segment_rows(D, SEGMENTS, BLOCK_D, INDEX_64, CHANNELS_FASTEST)
    x_base = x_ptr + b * x_sb + d * x_sd
    dy_base = dy_ptr + b * dy_sb + d * dy_sd
    bias = tl.zeros([ROWS], dtype=ACC_DTYPE)
    if HAS_BIAS:
        bias = tl.load(b_ptr + d, mask=d_ok, other=0).to(ACC_DTYPE)
    w0, w1, w2, w3 = _tap_weights(w_ptr, w_sd, w_sk, d, d_ok, WIDTH, ACC_DTYPE)
    zero = tl.zeros([ROWS], dtype=ACC_DTYPE)
    a_bias, a0, a1, a2, a3 = zero, zero, zero, zero, zero
    for block in tl.range(first_block, last_block + 1, num_stages=STAGES):
        start = (block * SEGMENTS + seg) * 8
        x_own = _segments(x_base, x_sl, start, L_in, d_ok, ACC_DTYPE)
        dy_own = _segments(dy_base, dy_sl, start, L_out, d_ok, ACC_DTYPE)
        x_before, x_after, dy_before, dy_after = x_own, x_own, dy_own, dy_own
        # x columns read: z at the g columns [-BEHIND, 8 + PAD) (dx) or [0, 8) reads x at
        # [-(WIDTH - 1), 8 + WIDTH - 1) or [-PAD, 8 + BEHIND)
        if (GRAD_INPUT and WIDTH > 1) or PAD > 0:
            x_before = _segments(x_base, x_sl, start - 8, L_in, d_ok, ACC_DTYPE)
        if (GRAD_INPUT and WIDTH > 1) or BEHIND > 0:
            x_after = _segments(x_base, x_sl, start + 8, L_in, d_ok, ACC_DTYPE)
        if GRAD_INPUT and BEHIND > 0:
            dy_before = _segments(dy_base, dy_sl, start - 8, L_out, d_ok, ACC_DTYPE)
        if GRAD_INPUT and PAD > 0:
            dy_after = _segments(dy_base, dy_sl, start + 8, L_out, d_ok, ACC_DTYPE)
        g_own = _g_tile(x_before, x_own, x_after, dy_before, dy_own, dy_after,
                        w0, w1, w2, w3, bias, 0, 0, 8, PAD, WIDTH, SILU)  # fmt: skip
        if GRAD_PARAMS:
            o0, o1, o2, o3, o4, o5, o6, o7 = _split8(g_own)
            a_bias += o0 + o1 + o2 + o3 + o4 + o5 + o6 + o7
            a0 += _tap_sum(g_own, x_before, x_own, x_after, 0, PAD)
            if WIDTH > 1:
                a1 += _tap_sum(g_own, x_before, x_own, x_after, 1, PAD)
            if WIDTH > 2:
                a2 += _tap_sum(g_own, x_before, x_own, x_after, 2, PAD)
            if WIDTH > 3:
                a3 += _tap_sum(g_own, x_before, x_own, x_after, 3, PAD)
        if GRAD_INPUT:
            # g at the columns either side that dx reaches, [-BEHIND, 0) and [8, 8 + PAD)
            g_before = g_own
            g_after = g_own
            if BEHIND > 0:
                g_before = _g_tile(x_before, x_own, x_after, dy_before, dy_own, dy_after,
                                   w0, w1, w2, w3, bias, -8, -BEHIND, 0, PAD, WIDTH, SILU)  # fmt: skip
            if PAD > 0:
                g_after = _g_tile(x_before, x_own, x_after, dy_before, dy_own, dy_after,
                                  w0, w1, w2, w3, bias, 8, 8, 8 + PAD, PAD, WIDTH, SILU)  # fmt: skip
            dx = _join8(
                _dx_column(g_before, g_own, g_after, w0, w1, w2, w3, 0, PAD, WIDTH),
                _dx_column(g_before, g_own, g_after, w0, w1, w2, w3, 1, PAD, WIDTH),
                _dx_column(g_before, g_own, g_after, w0, w1, w2, w3, 2, PAD, WIDTH),
                _dx_column(g_before, g_own, g_after, w0, w1, w2, w3, 3, PAD, WIDTH),
                _dx_column(g_before, g_own, g_after, w0, w1, w2, w3, 4, PAD, WIDTH),
                _dx_column(g_before, g_own, g_after, w0, w1, w2, w3, 5, PAD, WIDTH),
                _dx_column(g_before, g_own, g_after, w0, w1, w2, w3, 6, PAD, WIDTH),
                _dx_column(g_before, g_own, g_after, w0, w1, w2, w3, 7, PAD, WIDTH),
            )
            at = start[:, None] + tl.arange(0, 8)[None, :]
            out = dx_ptr + (b * dx_sb + d * dx_sd)[:, None] + at * dx_sl
            tl.store(out, dx.to(dx_ptr.dtype.element_ty), mask=d_ok[:, None] & (at < L_in))
    if GRAD_PARAMS:  # the program's segments of each channel summed (a fixed tree)
        dc = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
        if INDEX_64:
            dc = dc.to(tl.int64)
        dc_ok = dc < D
        part = pid * D + dc
        _store_segment_sum(
            dw_part_ptr, part * WIDTH, a0, dc_ok, BLOCK_D, SEGMENTS, CHANNELS_FASTEST
        )
        if WIDTH > 1:
            _store_segment_sum(
                dw_part_ptr, part * WIDTH + 1, a1, dc_ok, BLOCK_D, SEGMENTS, CHANNELS_FASTEST
            )
        if WIDTH > 2:
            _store_segment_sum(
                dw_part_ptr, part * WIDTH + 2, a2, dc_ok, BLOCK_D, SEGMENTS, CHANNELS_FASTEST
            )
        if WIDTH > 3:
            _store_segment_sum(
                dw_part_ptr, part * WIDTH + 3, a3, dc_ok, BLOCK_D, SEGMENTS, CHANNELS_FASTEST
            )
        _store_segment_sum(db_part_ptr, part, a_bias, dc_ok, BLOCK_D, SEGMENTS, CHANNELS_FASTEST)


@triton.jit
def _store_segment_sum(ptr, at, acc, ok, BLOCK_D: tl.constexpr, SEGMENTS: tl.constexpr,
                       CHANNELS_FASTEST: tl.constexpr):  # fmt: skip
    """Store at ``ptr + at`` (``[BLOCK_D]``) each channel's sum of a program's row
    accumulators (:func:`_segment_rows`' order)."""
    if CHANNELS_FASTEST:
        total = tl.sum(tl.reshape(acc, [SEGMENTS, BLOCK_D]), 0)
    else:
        total = tl.sum(tl.reshape(acc, [BLOCK_D, SEGMENTS]), 1)
    tl.store(ptr + at, total, mask=ok)
