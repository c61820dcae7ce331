"""Depthwise convolution launchers (groups == C_in, C_out = multiplier * C_in): forward, input
gradient and weight gradient.

Which kernel (``kernels/depthwise.py``) runs, the first that takes the call:

* kernels of ``WINDOW_MIN_TAPS`` taps and more, up to ``WINDOW_MAX_KW`` wide, any dtype: the
  sliding-window kernels (forward, stride-1 input gradient, weight gradient), which load each
  source column once for every output column it meets (:func:`_window_axes`).
* fp16/bf16/fp32 with ``KW >= BAND_MIN_KW`` (``BAND_MIN_KW_CHANNELS_LAST`` for channels-last
  tensors): the banded tensor-core kernels (forward, stride-1 input gradient, weight
  gradient). Their redundant multiplies are about ``BLOCK_J / KW``.
* otherwise (small kernels, fp64, integers): the FMA kernels, taps unrolled up to
  ``SMALL_MAX_TAPS``.
* the input gradient of a strided depthwise convolution is not one convolution of ``dy`` but
  one per *phase* (input positions with the same remainders by the stride): each phase's
  taps only, walked with a negative dilation, by the same kernels (:func:`_phases`); kernels
  wide enough for the band kernels in a phase go to the general direct kernel
  (``ops/direct.py``, ``TRANSPOSED``).

The stride-1 input gradient is the forward kernel run on ``dy`` with the weight walked
backwards and padding ``dil*(K-1) - pad``; the multiplier's channels are summed in the kernel.
Weight gradients are per-tile partial sums added by ``sum_partials``: a fixed order, so
reruns are bitwise equal.
"""

from __future__ import annotations

import functools
import math

import torch

from .._runtime import INTERPRETER, check_kernel_device
from ..geometry import Geometry, make_geometry
from ..kernels.depthwise import (
    depthwise_band_grad_weight_kernel,
    depthwise_band_kernel,
    depthwise_kernel,
    depthwise_small_grad_weight_kernel,
    depthwise_small_kernel,
    depthwise_window_grad_weight_kernel,
    depthwise_window_kernel,
)
from ..launch import allocate, launch, launch_plan
from ..precision import dot_precision
from . import direct
from .common import (
    accumulator_dtype,
    batch_splits,
    cdiv,
    clamped_power_of_2,
    empty_like_format,
    is_channels_last,
    multiprocessor_count,
    needs_int64,
    partial_dtype,
    sum_partials,
)

# Kernel width from which the banded tensor-core kernels replace the FMA kernels (a reasoned
# choice: at KW = 7 a 32-column band does ~4.6x redundant multiplies on tensor cores that are
# ~8-16x faster than FMAs). Since the window kernels, which are asked first, the band kernels
# run only what those do not take: kernels wider than ``WINDOW_MAX_KW``, widely strided ones.
BAND_MIN_KW = 7

# Launch configuration of the small-kernel FMA kernels (``depthwise_small_kernel``, forward and
# stride-1 dX; ``depthwise_small_grad_weight_kernel``, dW), per memory format. ``block_c`` is
# the channel block (channels-last; NCHW uses 1), ``block_h`` x ``block_w`` the spatial tile;
# dW also splits the batch until about ``target_programs`` programs run. Picked from
# ``benchmarks/sweep_depthwise.py`` on the GPU; under the interpreter tiles are made large.
# From benchmarks/sweep_depthwise.py on the H100 (dw3x3_56 fp32): fwd NCHW 8x64 67 µs (16x64:
# 73), dX 70; channels-last 32ch x 8x8 fwd 68 / dX 68 (32 x 4x8: 79 / 85); dW NCHW 8x64 125 µs
# (16x64: 167), channels-last 32 x 4x8 136 µs. 8 warps was slower everywhere.
DEPTHWISE_CONFIG = {
    "fwd_nchw": dict(block_h=8, block_w=64, num_warps=4),
    "fwd_channels_last": dict(block_c=32, block_h=8, block_w=8, num_warps=4),
    "wgrad_nchw": dict(block_h=8, block_w=64, num_warps=4, target_programs=4096),
    "wgrad_channels_last": dict(
        block_c=32, block_h=4, block_w=8, num_warps=4, target_programs=4096
    ),
}
# Largest kernels (in taps) for which the forward/dX unrolls its taps at compile time; dW's
# unrolled kernel covers up to 3x3 (one accumulator tile per tap).
SMALL_MAX_TAPS = 25

# Kernels from this many taps take the sliding-window kernels (forward and stride-1 dX:
# ``depthwise_window_kernel``; dW: ``depthwise_window_grad_weight_kernel``) where they fit
# (:func:`_window_axes`), before the band kernels: they load each source column of a kernel
# row once for all the output columns it meets, where the other FMA kernels load one shifted
# tile per tap. H100, benchmarks/probe_depthwise_window.py (kernel ms, bf16 channels-last,
# before -> window): ConvNeXt 7x7 forward 0.251 -> 0.058 (cuDNN 0.095), fwd+bwd 0.899 ->
# 0.188; MobileNet 3x3 (the unrolled small kernel before) 0.062 -> 0.038, 5x5 0.034 ->
# 0.013; RepLK 31x31 (the band kernel before) 2.21 -> 0.69; fp32 NCHW 7x7 (band) 0.799 ->
# 0.068, 31x31 (band) 2.82 -> 1.77 (RESULTS.md, session 8).
WINDOW_MIN_TAPS = 9
# Widest kernel (along the sliding axis) the window kernels unroll (31: RepLK's; measured
# faster than the band kernels there; wider ones keep the band kernels).
WINDOW_MAX_KW = 31
# Tiles of the window kernels: ``block_w`` output columns a program (unrolled, any count),
# each a ``block_c`` x ``block_h`` tile; NCHW slides along the height instead and tiles the
# width (``block_h`` then runs along the width, ``block_c`` planes). A forward kernel of at
# most ``rows`` rows, for the first ``(rows, tile rows, straddle)`` of ``unrolled`` that
# takes it, also unrolls its rows (every row's loads in flight together) over that many tile
# rows; with ``straddle`` its channel blocks keep ``block_c`` where that does not divide the
# channels (the last block partly masked) instead of being halved until it does. dW splits
# the batch until about ``target_programs`` programs run. From probe_depthwise_window.py on
# the H100 (RESULTS.md, session 8):
# channels-last forward 32 x 8 x 8 (7x7: 32 x 16 with rows unrolled is 27 % slower), and for
# 3x3/5x5 rows unrolled over 32 x 16 x 8 (MobileNet 3x3 bf16 0.041 -> 0.032 ms, 5x5 0.016 ->
# 0.014; EfficientNet and C256 3x3 unchanged); fwd+bwd with dW 32 x 8 x 16 (32 x 8 x 8: 1.02x
# the time, 32 x 4 x 16: 1.15x); NCHW 4 planes x 64 x 8 best everywhere (one plane a program:
# 2.6x slower forward, half its threads idle on a 64-wide tile; rows unrolled: within 5 %).
# Session 32, channels-last forward ms, a 3x3 over 8 unrolled tile rows in 32-channel
# blocks that may straddle, against 16 rows in blocks halved to divide: MobileNet's 144
# channels bf16 0.0314 -> 0.0281 (76 % of the copy's bandwidth), fp32 0.0539 -> 0.0485; 256
# channels bf16 0.0498 -> 0.0474, fp32 0.0916 -> 0.0795; EfficientNet's 3x3 s2 bf16 0.0407 ->
# 0.0387. A 5x5 keeps 16 rows (0.0138 against 0.0152 at 8) and exact blocks (240 channels
# s2, straddled: bf16 0.0124 -> 0.0135, fp32 0.0181 -> 0.0289).
# A dW program takes as many kernel rows as keep it to ``max_taps`` accumulator tiles (rows
# split evenly between programs): each row's source tile is the previous one's shifted by a
# row, an L1 hit in one program; with a program a kernel row, each brought ``dy`` and ``x``
# through L2 again (MobileNet's 3x3 bf16 dW: L2 83 % busy, DRAM 31 %, L1 hits 6 %; ncu).
# 9 taps: 3x3 only. Fwd+bwd ms, rows one a program -> all (session 32, benchmarks/NOTES.md):
# MobileNet 3x3 bf16 0.123 -> 0.112, 3x3 at 256 channels 0.178 -> 0.159, fp32 NCHW 0.147 ->
# 0.146; from 5x5 all rows lose (5x5 0.050 -> 0.061, ConvNeXt 7x7 0.187 -> 0.206): a fifth
# of the programs, each holding 25-49 accumulator tiles.
WINDOW_CONFIG = {
    "fwd_channels_last": dict(
        block_c=32,
        block_h=8,
        block_w=8,
        num_warps=4,
        unrolled=((3, 8, True), (5, 16, False)),
    ),
    "fwd_nchw": dict(block_c=4, block_h=64, block_w=8, num_warps=4, unrolled=()),
    "wgrad_channels_last": dict(
        block_c=32, block_h=8, block_w=16, num_warps=4, target_programs=4096, max_taps=9
    ),
    "wgrad_nchw": dict(
        block_c=4, block_h=64, block_w=8, num_warps=4, target_programs=4096, max_taps=9
    ),
}


# The same threshold for channels-last tensors. The band kernels tile one (n, c) plane, so in
# channels-last memory consecutive elements of a tile are C apart: a 32-byte sector fetched per
# 2- or 4-byte element, the likely cause of the 0.11-0.14x cuDNN issue 13 measured on ConvNeXt's
# 7x7 bf16 channels-last layers. The FMA kernels tile a block of contiguous channels there, so
# they took channels-last kernels up to 13 wide; from 15 wide the tensor cores' share of the
# work outweighed the strided reads (31x31 bf16 channels-last: 2.7-4.2x cuDNN with the band).
# The window kernels now take both up to WINDOW_MAX_KW (31x31: 9x cuDNN, 3.2x the band).
BAND_MIN_KW_CHANNELS_LAST = 15


def uses_band(geometry: Geometry, *tensors: torch.Tensor) -> bool:
    """Whether the banded tensor-core kernels would run a depthwise call over ``tensors``
    (the ones the kernel reads and writes) that the window kernels do not take (they are
    asked first: :func:`_window_axes`): floating point, and a kernel at least ``BAND_MIN_KW``
    wide, or ``BAND_MIN_KW_CHANNELS_LAST`` when one of them is channels-last."""
    channels_last = any(is_channels_last(t) for t in tensors)
    min_kw = BAND_MIN_KW_CHANNELS_LAST if channels_last else BAND_MIN_KW
    return direct.uses_dot(tensors[0].dtype, 16) and geometry.kernel[1] >= min_kw


def _is_channels_last(t: torch.Tensor) -> bool:
    return t.shape[1] > 1 and t.stride(1) == 1


def _fma_tiles(t: torch.Tensor, height: int, width: int):
    """(BLOCK_C, BLOCK_H, BLOCK_W): rows of one plane for NCHW, a channel block for
    channels-last, so that the tile's fastest axis is the one contiguous in memory."""
    elements = 4096 if INTERPRETER else 512
    if _is_channels_last(t):
        channels = t.shape[1]
        block_c = 32 if channels % 32 == 0 else clamped_power_of_2(channels, 1, 16)
        block_w = clamped_power_of_2(width, 1, 8)
        return (
            block_c,
            clamped_power_of_2(height, 1, max(1, elements // (block_c * block_w))),
            block_w,
        )
    block_w = clamped_power_of_2(width, 1, 64)
    return 1, clamped_power_of_2(height, 1, max(1, elements // block_w)), block_w


def _channel_block(channels: int, limit: int, straddle: bool = False) -> int:
    """A power-of-two block of at most ``limit`` channels, halved (down to 8) until it
    divides ``channels``, so that no block straddles the end of the channels (unless
    ``straddle``: the last block then runs partly masked)."""
    block_c = clamped_power_of_2(channels, 1, limit)
    while not straddle and block_c > 8 and channels % block_c:
        block_c //= 2
    return block_c


def _small_tiles(t: torch.Tensor, height: int, width: int, config: dict):
    """(BLOCK_C, BLOCK_H, BLOCK_W) of the small-kernel kernels from a DEPTHWISE_CONFIG entry."""
    block_h, block_w = config["block_h"], config["block_w"]
    block_c = _channel_block(t.shape[1], config["block_c"]) if _is_channels_last(t) else 1
    if INTERPRETER:
        block_h, block_w = 32, 64
        block_c = min(block_c, 4)
    return block_c, clamped_power_of_2(height, 1, block_h), clamped_power_of_2(width, 1, block_w)


def _weight_walk(weight: torch.Tensor, flip: bool):
    """(base, channel stride, kh stride, kw stride) of the weight, walked backwards if ``flip``."""
    s_c, _, s_kh, s_kw = weight.stride()
    if not flip:
        return 0, s_c, s_kh, s_kw
    KH, KW = weight.shape[2:]
    return (KH - 1) * s_kh + (KW - 1) * s_kw, s_c, -s_kh, -s_kw


@launch_plan
def _launch(src, weight, bias, dst, geometry: Geometry, R: int, DIV: int, walk: tuple, base=None):
    """dst[n, c] = sum over r < R of conv(src[n, (c*R + r) // DIV], w[c*R + r]) (+ bias[c]),
    the weight's taps walked as ``walk`` says (:func:`_weight_walk`, :func:`_phases`).
    ``base``: the tensor ``dst`` views, which the kernel is given instead (with ``dst``'s
    offset in it, sizes and strides), so that a traced launch writes no view."""
    N, C_dst, DH, DW = dst.shape
    target = dst if base is None else base
    common = (
        src,
        weight,
        bias if bias is not None else weight,
        target,
        C_dst,
        *src.shape[2:],
        DH,
        DW,
        *geometry.kernel,
        R,
        DIV,
        *geometry.stride,
        *geometry.pad_before,
        *geometry.dilation,
        *src.stride(),
        *dst.stride(),
        dst.storage_offset() - target.storage_offset(),
        *walk,
    )
    index_64 = needs_int64(src, target, weight)
    axes = _window_axes(geometry, dst, "fwd")
    if axes is not None:
        assert base is None, "the window kernel writes dst itself"
        _launch_window(src, weight, bias, dst, geometry, R, DIV, walk, axes, index_64)
        return
    if uses_band(geometry, src, dst):
        block_h, block_w = clamped_power_of_2(DH, 16, 32), clamped_power_of_2(DW, 16, 32)
        grid = (N * C_dst, cdiv(DH, block_h) * cdiv(DW, block_w))
        launch(
            depthwise_band_kernel,
            grid,
            *common,
            HAS_BIAS=bias is not None,
            DOT_PRECISION=dot_precision(src.dtype),
            DOT_DTYPE=direct.dot_dtype(src.dtype),
            BLOCK_H=block_h,
            BLOCK_W=block_w,
            BLOCK_J=direct.tf32x3_block(32, src.dtype),
            INDEX_64=index_64,
            num_warps=4,
        )
        return
    KH, KW = geometry.kernel
    if KH * KW <= SMALL_MAX_TAPS:
        key = "fwd_channels_last" if _is_channels_last(dst) else "fwd_nchw"
        config = DEPTHWISE_CONFIG[key]
        block_c, block_h, block_w = _small_tiles(dst, DH, DW, config)
        grid = (N * cdiv(C_dst, block_c), cdiv(DH, block_h) * cdiv(DW, block_w))
        launch(
            depthwise_small_kernel,
            grid,
            *common[:9],
            *common[11:],
            KH=KH,
            KW=KW,
            HAS_BIAS=bias is not None,
            ACC_DTYPE=accumulator_dtype(src.dtype),
            BLOCK_C=block_c,
            BLOCK_H=block_h,
            BLOCK_W=block_w,
            INDEX_64=index_64,
            FOLD_Y=False,  # (launch folds a grid too tall for CUDA)
            num_warps=config["num_warps"],
        )
        return
    block_c, block_h, block_w = _fma_tiles(dst, DH, DW)
    grid = (N * cdiv(C_dst, block_c), cdiv(DH, block_h) * cdiv(DW, block_w))
    launch(
        depthwise_kernel,
        grid,
        *common,
        HAS_BIAS=bias is not None,
        ACC_DTYPE=accumulator_dtype(src.dtype),
        BLOCK_C=block_c,
        BLOCK_H=block_h,
        BLOCK_W=block_w,
        INDEX_64=index_64,
        num_warps=4,
    )


def _window_axes(geometry: Geometry, t: torch.Tensor, op: str):
    """(tile axis, sliding axis, WINDOW_CONFIG entry) of the window kernel of ``op`` ("fwd"
    or "wgrad") over ``t`` (the tensor whose layout sets the tiles), as spatial axis
    indices, or None where it does not run: fewer than ``WINDOW_MIN_TAPS`` taps, a
    sliding-axis kernel wider than ``WINDOW_MAX_KW``, a negative dilation (the strided dX's
    phases), or a stride and dilation so large that the window's columns are not shared
    between output columns. Channels-last slides along the width (tiles of channels x rows),
    other layouts along the height (tiles along the width, which is the contiguous axis)."""
    if geometry.kernel[0] * geometry.kernel[1] < WINDOW_MIN_TAPS:
        return None
    channels_last = _is_channels_last(t)
    tile, slide = (0, 1) if channels_last else (1, 0)
    config = WINDOW_CONFIG[f"{op}_{'channels_last' if channels_last else 'nchw'}"]
    kw, stride, dil = geometry.kernel[slide], geometry.stride[slide], geometry.dilation[slide]
    columns = (config["block_w"] - 1) * stride + (kw - 1) * dil + 1
    if kw > WINDOW_MAX_KW or dil < 1 or columns >= config["block_w"] * kw:
        return None
    return tile, slide, config


def _window_tiles(t: torch.Tensor, C: int, rows: int, columns: int, config: dict):
    """(BLOCK_C, BLOCK_H, BLOCK_W) of a window kernel: ``rows`` along the tile axis,
    ``columns`` along the sliding one (``BLOCK_W`` need not be a power of two)."""
    block_c = _channel_block(C, config["block_c"], config.get("straddle", False))
    block_h = config["block_h"]
    if INTERPRETER:  # few programs; still several row tiles on the tests' small tensors
        block_c, block_h = min(block_c, 4), 16
    return block_c, clamped_power_of_2(rows, 1, block_h), min(config["block_w"], columns)


def _launch_window(src, weight, bias, dst, geometry, R, DIV, walk, axes, index_64):
    """``depthwise_window_kernel`` over ``axes`` (:func:`_window_axes`): the kernel's height
    is the tile axis and its width the sliding one, so NCHW passes the two spatial axes
    swapped (sizes, geometry, strides and the weight's tap strides alike)."""
    t, s, config = axes
    N, C_dst = dst.shape[:2]
    DT, DS = dst.shape[2 + t], dst.shape[2 + s]
    unrolled = [u for u in config["unrolled"] if geometry.kernel[t] <= u[0]]
    if unrolled:
        config = dict(config, block_h=unrolled[0][1], straddle=unrolled[0][2])
    block_c, block_h, block_w = _window_tiles(dst, C_dst, DT, DS, config)
    grid = (N * cdiv(C_dst, block_c), cdiv(DT, block_h) * cdiv(DS, block_w))
    launch(
        depthwise_window_kernel,
        grid,
        src,
        weight,
        bias if bias is not None else weight,
        dst,
        C_dst,
        src.shape[2 + t],
        src.shape[2 + s],
        DT,
        DS,
        geometry.kernel[t],
        R,
        DIV,
        geometry.stride[t],
        geometry.pad_before[t],
        geometry.pad_before[s],
        geometry.dilation[t],
        src.stride(0),
        src.stride(1),
        src.stride(2 + t),
        src.stride(2 + s),
        dst.stride(0),
        dst.stride(1),
        dst.stride(2 + t),
        dst.stride(2 + s),
        walk[0],
        walk[1],
        walk[2 + t],
        walk[2 + s],
        KW=geometry.kernel[s],
        STRIDE_W=geometry.stride[s],
        DIL_W=geometry.dilation[s],
        UNROLL_KH=geometry.kernel[t] if unrolled else 0,
        HAS_BIAS=bias is not None,
        ACC_DTYPE=accumulator_dtype(src.dtype),
        BLOCK_C=block_c,
        BLOCK_H=block_h,
        BLOCK_W=block_w,
        INDEX_64=index_64,
        FOLD_Y=False,  # (launch folds a grid too tall for CUDA)
        num_warps=config["num_warps"],
    )


def window_rows(kernel_rows: int, kernel_columns: int, max_taps: int) -> int:
    """Kernel rows a window dW program takes: the rows split evenly into as few groups as
    keep each to ``max_taps`` taps (at least one row)."""
    per_group = max(1, max_taps // kernel_columns)
    return cdiv(kernel_rows, cdiv(kernel_rows, per_group))


def _launch_window_grad_weight(grad_out, x, geometry, axes, bias_grad: bool, acc_dtype):
    """``depthwise_window_grad_weight_kernel`` over ``axes`` (swapped as in
    :func:`_launch_window`); returns its partials (rows of taps, then the bias sums if
    ``bias_grad``), for ``sum_partials``."""
    t, s, config = axes
    N, C_out = grad_out.shape[:2]
    C_in = x.shape[1]
    OT, OS = grad_out.shape[2 + t], grad_out.shape[2 + s]
    KT, KS = geometry.kernel[t], geometry.kernel[s]
    block_c, block_h, block_w = _window_tiles(grad_out, C_out, OT, OS, config)
    rows = window_rows(KT, KS, config["max_taps"])
    blocks = cdiv(KT, rows) * cdiv(C_out, block_c) * cdiv(OT, block_h)
    # Two splits under the interpreter: cheap, and the split bookkeeping gets tested.
    splits, samples_per_split = batch_splits(
        N, 2 if INTERPRETER else cdiv(config["target_programs"], blocks)
    )
    taps = KT * KS
    partial = allocate(
        (splits * cdiv(OT, block_h), C_out * (taps + bias_grad)), acc_dtype, x.device
    )
    # where tap (kt, ks) lands in the (KH, KW) weight: row-major in the unswapped axes
    tap_strides = (geometry.kernel[1], 1) if t == 0 else (1, geometry.kernel[1])
    launch(
        depthwise_window_grad_weight_kernel,
        (blocks, splits),
        grad_out,
        x,
        partial,
        samples_per_split,
        N,
        C_out,
        x.shape[2 + t],
        x.shape[2 + s],
        OT,
        OS,
        KT,
        taps,
        C_out // C_in,
        geometry.stride[t],
        geometry.pad_before[t],
        geometry.pad_before[s],
        geometry.dilation[t],
        grad_out.stride(0),
        grad_out.stride(1),
        grad_out.stride(2 + t),
        grad_out.stride(2 + s),
        x.stride(0),
        x.stride(1),
        x.stride(2 + t),
        x.stride(2 + s),
        *tap_strides,
        KW=KS,
        STRIDE_W=geometry.stride[s],
        DIL_W=geometry.dilation[s],
        BIAS_GRAD=bias_grad,
        ACC_DTYPE=accumulator_dtype(x.dtype),
        ROWS=rows,
        BLOCK_C=block_c,
        BLOCK_H=block_h,
        BLOCK_W=block_w,
        INDEX_64=needs_int64(grad_out, x, partial),
        num_warps=config["num_warps"],
    )
    return partial


def describe(geometry: Geometry, x: torch.Tensor, weight: torch.Tensor) -> str:
    """Which kernels a 2-D depthwise convolution of ``x`` by ``weight`` runs, forward, input
    gradient and weight gradient, and why (for :func:`tritonconv.explain`)."""
    taps = geometry.kernel[0] * geometry.kernel[1]

    def family(op: str) -> str:
        if _window_axes(geometry, x, op) is not None:
            along = "width" if _is_channels_last(x) else "height"
            return f"sliding window along the {along} ({taps} taps, each column loaded once)"
        if uses_band(geometry, x):
            return "banded tensor-core (wider than the window kernels take)"
        if op == "wgrad":
            return "FMA, one accumulator per tap in 3x3 tap blocks"
        if taps <= SMALL_MAX_TAPS:
            return "FMA, taps unrolled"
        return "FMA, general"

    if any(s != 1 for s in geometry.stride):
        dx = "one stride-1 FMA convolution per stride phase (only the taps that reach it)"
        if _phases(geometry, geometry.input, weight) is None:
            dx = "general direct kernel (a phase wide enough for the band kernels)"
    else:
        dx = family("fwd") + ", taps flipped"
    return f"forward: {family('fwd')}; dX: {dx}; dW: {family('wgrad')}"


def depthwise_forward(x, weight, bias, geometry: Geometry) -> torch.Tensor:
    """y = conv2d(x, weight, bias, groups=C_in) for a batched input, in x's memory format."""
    check_kernel_device(x, "input")
    C_in, C_out = x.shape[1], weight.shape[0]
    out = empty_like_format((x.shape[0], C_out, *geometry.output), x)
    if out.numel() == 0:
        return out
    _launch(x, weight, bias, out, geometry, 1, C_out // C_in, _weight_walk(weight, False))
    return out


def depthwise_grad_input(grad_out, weight, like, geometry: Geometry, shape=None) -> torch.Tensor:
    """dx of a depthwise convolution; ``like`` gives dtype and memory format, and the shape
    unless ``shape`` does (a transposed convolution's output)."""
    check_kernel_device(grad_out, "grad_output")
    shape = tuple(like.shape) if shape is None else tuple(shape)
    C_in = shape[1]
    multiplier = weight.shape[0] // C_in
    if any(s != 1 for s in geometry.stride):
        # Each phase's launch is given the whole dx and the phase's place in it, never a
        # strided view (kernels/depthwise.py says why). Symbolic sizes (dynamic=True) keep
        # the gather kernel: the phases are worked out once per concrete geometry.
        phases = None
        if _concrete(geometry, shape):
            phases = _phases(geometry, shape[2:], weight)
        if phases is None:  # symbolic, or a phase's kernel wide enough for the band kernels
            return direct.conv2d_grad_input(grad_out, weight, like, geometry, C_in, shape)
        # positions no tap reaches are zeros: allocated so (a launch plan replays that)
        zeros = _phases_without_taps(geometry, shape[2:], phases)
        grad_in = empty_like_format(shape, like, zero=zeros)
        if grad_in.numel() == 0:
            return grad_in
        for (rh, rw), phase in phases.items():
            view = grad_in[:, :, rh :: geometry.stride[0], rw :: geometry.stride[1]]
            if view.numel():
                _launch(grad_out, weight, None, view, phase[0], multiplier, 1, phase[1], grad_in)
        return grad_in
    grad_in = empty_like_format(shape, like)
    if grad_in.numel() == 0:
        return grad_in
    pads = tuple(
        d * (k - 1) - p for d, k, p in zip(geometry.dilation, geometry.kernel, geometry.pad_before)
    )
    flipped = make_geometry(geometry.output, geometry.kernel, (1, 1), pads, pads, geometry.dilation)
    _launch(grad_out, weight, None, grad_in, flipped, multiplier, 1, _weight_walk(weight, True))
    return grad_in


def _concrete(geometry: Geometry, shape) -> bool:
    """Whether every size of a call is a plain int (not a symbolic size while tracing)."""
    sizes = (*geometry.input, *geometry.output, *shape)
    return all(type(v) is int for v in sizes)


def _phase_axis(r: int, pad: int, dil: int, stride: int, K: int):
    """For input positions ``r + stride*q`` along one axis, the taps that reach them,
    ``k = k0 + j*kstep`` (``j < taps``), and where: ``dy[q + base - j*step]``. None when no
    tap does. (``kstep * dil`` is the least common multiple of stride and dilation, so
    ``step`` and ``base`` are exact.)"""
    kstep = stride // math.gcd(stride, dil)
    k0 = next((k for k in range(min(kstep, K)) if (r + pad - k * dil) % stride == 0), K)
    if k0 >= K:
        return None
    taps = (K - k0 + kstep - 1) // kstep
    return k0, kstep, taps, (r + pad - k0 * dil) // stride, kstep * dil // stride


def _phases(geometry: Geometry, input_size, weight: torch.Tensor):
    """The input gradient of a strided depthwise convolution as one stride-1 convolution per
    *phase* ``(rh, rw)`` (the input positions ``(rh + sh*qh, rw + sw*qw)``): over ``dy``, with
    the phase's taps only (no multiply by a zero), walked with a negative dilation. By phase
    that some tap reaches (at most ``KH * KW`` of the ``sh * sw``; the others are zeros):
    ``(geometry, weight walk)`` for ``_launch``. None altogether when a phase's kernel would
    take the band kernels (they walk forwards only). Worked out once per geometry, input size
    and weight strides."""
    return _phases_of(geometry, tuple(input_size), weight.stride())


def _reached(size: int, pad: int, dil: int, stride: int, K: int) -> dict:
    """Along one axis: ``{r: _phase_axis(r, ...)}`` for the phases ``r < min(stride, size)``
    that some tap reaches (tap ``k`` reaches ``(k*dil - pad) mod stride``): at most ``K``,
    found without visiting the others (a stride of 32765 has as many)."""
    residues = sorted({(k * dil - pad) % stride for k in range(K)})
    return {r: _phase_axis(r, pad, dil, stride, K) for r in residues if r < size}


def _phases_without_taps(geometry: Geometry, input_size, phases: dict) -> bool:
    """Whether some of the strided input gradient's phases are reached by no tap (``phases``:
    :func:`_phases`'s), so that dx has positions no launch writes."""
    (sh, sw), (h, w) = geometry.stride, input_size
    return len(phases) < min(sh, h) * min(sw, w)


@functools.lru_cache(maxsize=1024)
def _phases_of(geometry: Geometry, input_size: tuple, weight_strides: tuple):
    (sh, sw), (KH, KW) = geometry.stride, geometry.kernel
    s_c, _, s_kh, s_kw = weight_strides  # (channels, 1, KH, KW): dimension 1 has size 1
    pad, dil = geometry.pad_before, geometry.dilation
    rows = _reached(input_size[0], pad[0], dil[0], sh, KH)
    cols = _reached(input_size[1], pad[1], dil[1], sw, KW)
    phases = {}
    for rh, h in rows.items():
        for rw, w in cols.items():
            pads, steps = (-h[3], -w[3]), (-h[4], -w[4])
            phase = make_geometry(geometry.output, (h[2], w[2]), (1, 1), pads, pads, steps)
            if phase.kernel[1] >= BAND_MIN_KW:
                return None
            walk = (h[0] * s_kh + w[0] * s_kw, s_c, h[1] * s_kh, w[1] * s_kw)
            phases[rh, rw] = (phase, walk)
    return phases


def depthwise_grad_weight(
    grad_out, x, weight_shape, geometry: Geometry, bias_grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(dW, db) of a depthwise convolution: per-tile partials summed in a fixed order. ``db``
    (the bias gradient) is None unless asked for by ``bias_grad`` and fused: the FMA kernel
    sums ``dy`` per channel beside the weight gradient, reduced by the same launch."""
    check_kernel_device(x, "input")
    N, C_in = x.shape[:2]
    C_out = weight_shape[0]
    KH, KW = geometry.kernel
    OH, OW = geometry.output
    if N == 0:
        return allocate(weight_shape, x.dtype, x.device, zero=True), None
    geometry_args = (*geometry.stride, *geometry.pad_before, *geometry.dilation)
    strides = (*grad_out.stride(), *x.stride())
    acc_dtype = partial_dtype(x.dtype)  # int64 for integers: exact
    fused_bias = False
    if (axes := _window_axes(geometry, grad_out, "wgrad")) is not None:
        partial = _launch_window_grad_weight(grad_out, x, geometry, axes, bias_grad, acc_dtype)
        fused_bias = bias_grad
    elif uses_band(geometry, x, grad_out):
        block_kh, block_kw = clamped_power_of_2(KH, 16, 32), clamped_power_of_2(KW, 16, 32)
        tap_tiles = cdiv(KH, block_kh) * cdiv(KW, block_kw)
        if INTERPRETER:  # two splits, so the split reduction is tested on CPU too
            splits, samples_per_split = batch_splits(N, 2)
        else:
            target = 2 * direct.WGRAD_PROGRAMS_PER_SM * multiprocessor_count(x.device)
            splits, samples_per_split = batch_splits(N, cdiv(target, C_out * tap_tiles))
        partial = allocate((splits, C_out, KH, KW), acc_dtype, x.device)
        launch(
            depthwise_band_grad_weight_kernel,
            (C_out * tap_tiles, splits),
            grad_out,
            x,
            partial,
            samples_per_split,
            N,
            C_out,
            *geometry.input,
            OH,
            OW,
            KH,
            KW,
            C_out // C_in,
            *geometry_args,
            *strides,
            DOT_PRECISION=dot_precision(x.dtype),
            DOT_DTYPE=direct.dot_dtype(x.dtype),
            BLOCK_KH=block_kh,
            BLOCK_KW=block_kw,
            BLOCK_K=direct.tf32x3_block(64, x.dtype),
            INDEX_64=needs_int64(grad_out, x, partial),
            num_warps=4,
        )
    else:
        key = "wgrad_channels_last" if _is_channels_last(grad_out) else "wgrad_nchw"
        config = DEPTHWISE_CONFIG[key]
        block_c, block_h, block_w = _small_tiles(grad_out, OH, OW, config)
        # taps in blocks of up to 3 x 3, one block a program (one accumulator tile per tap)
        bkh, bkw = min(KH, 3), min(KW, 3)
        tap_blocks = cdiv(KH, bkh) * cdiv(KW, bkw)
        tiles = cdiv(OH, block_h) * cdiv(OW, block_w)
        blocks = tap_blocks * cdiv(C_out, block_c) * tiles
        # Two splits under the interpreter: cheap, and the split bookkeeping gets tested.
        splits, samples_per_split = batch_splits(
            N, 2 if INTERPRETER else cdiv(config["target_programs"], blocks)
        )
        fused_bias = bias_grad
        partial = allocate((splits * tiles, C_out * (KH * KW + bias_grad)), acc_dtype, x.device)
        launch(
            depthwise_small_grad_weight_kernel,
            (blocks, splits),
            grad_out,
            x,
            partial,
            samples_per_split,
            N,
            C_out,
            *geometry.input,
            OH,
            OW,
            C_out // C_in,
            *geometry_args,
            *strides,
            KH,
            KW,
            BKH=bkh,
            BKW=bkw,
            BIAS_GRAD=bias_grad,
            ACC_DTYPE=accumulator_dtype(x.dtype),
            BLOCK_C=block_c,
            BLOCK_H=block_h,
            BLOCK_W=block_w,
            INDEX_64=needs_int64(grad_out, x, partial),
            num_warps=config["num_warps"],
        )
    grad_weight = allocate(weight_shape, x.dtype, x.device)
    # the partials' rows end with the bias sums when the small kernel fused them
    grad_bias = allocate((C_out,), x.dtype, x.device) if fused_bias else None
    sum_partials(partial, grad_weight, grad_bias)
    return grad_weight, grad_bias
