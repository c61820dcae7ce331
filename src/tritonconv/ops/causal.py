"""Launchers of the causal depthwise conv1d (``kernels/causal.py``): forward, and the backward's
input, weight and bias gradients from one kernel pass.

Arguments arrive validated (``functional.causal_conv1d``): ``x`` ``(batch, dim, L_in)`` in the
weight's dtype, ``weight`` ``(dim, width)``, ``bias`` ``(dim,)`` dense or None, and the window
shift ``pad`` in ``[0, width - 1]``. Outputs and the input gradient are dense in ``x``'s
dimension order (channel-first x gives channel-first y, channel-last gives channel-last), as
PyTorch's convolutions keep a layout.

Which kernel: widths up to 4 (Mamba's) take the segment kernels for channel-first x (forward
and backward) and the rows kernel for channel-last x's backward; the 2-D tile kernels take the
rest. Tiles of the tile kernels: a program covers ``BLOCK_D`` channels x ``BLOCK_L``
positions, long along whichever axis is contiguous in memory (16 x 256 channel-first, 128 x 16
channel-last: the configurations a first probe of these kernels picked, benchmarks/NOTES.md),
never longer than the problem (powers of two, at least 16 on both axes so no reduction runs
over a thinner axis than the layout's lanes; NOTES.md, issue 9), and large under the
interpreter.
"""

from __future__ import annotations

import torch

from .._runtime import INTERPRETER, check_kernel_device
from ..geometry import TritonConvError
from ..kernels.causal import (
    causal_conv1d_backward_kernel,
    causal_conv1d_backward_rows_kernel,
    causal_conv1d_backward_segments_kernel,
    causal_conv1d_kernel,
    causal_conv1d_segments_kernel,
)
from ..launch import allocate, launch, launch_plan
from .common import (
    accumulator_dtype,
    cdiv,
    clamped_power_of_2,
    multiprocessor_count,
    needs_int64,
    next_power_of_2,
    partial_dtype,
    sum_partials,
)
from .crop import dim_order, empty_in_order

# Backward programs per SM the position chunks aim for (see ``_chunk_blocks``).
PROGRAMS_PER_SM = 4
# The backward computes g = dy * act'(z) once per block and gathers its shifted sets in
# registers (True, channel-first x), or recomputes each set from dy and x (False).
# benchmarks/probe_causal_backward.py compares the two.
G_ONCE = True
# The same for channel-last x (False: recompute). Its 16-position tiles made the gathers
# slower than the recompute in session 6 (H100), before the weight gradient's products were
# formed from z's loads; benchmarks/probe_causal_backward.py --tiles cl:... compares them.
G_ONCE_CHANNEL_LAST = False
# The forward loads x once per block (block-aligned, vector loads) and gathers each tap's
# shifted set in registers (True, channel-first x: positions contiguous), or loads each tap's
# set itself, one element off the alignment (False; always for channel-last x, whose tiles
# are 16 positions long). benchmarks/probe_causal_backward.py --forward compares the two.
X_ONCE = True
# Warps of a backward program: its tile holds g of three blocks, dx and (widths up to 4) five
# elementwise dW/db accumulators; eight warps keep that in registers.
BACKWARD_WARPS = 8
# (BLOCK_D, BLOCK_L) caps per layout: the long axis is the contiguous one. The backward's
# own (benchmarks/probe_causal_backward.py --tiles compares them): its gathers and carried
# tiles need about 250 registers a thread whatever the tile (ptxas, sm_90).
_TILES = {"channel_first": (16, 256), "channel_last": (128, 16)}
_BACKWARD_TILES = {"channel_first": (16, 256), "channel_last": (128, 16)}
_INTERPRETER_TILE = (64, 256)
# Channel-last x of width up to 4: the backward walks positions one row of channels at a
# time (``causal_conv1d_backward_rows_kernel``: x and dy loaded once, the window in
# registers) rather than in 2-D tiles that recompute g for every shifted set (False).
BACKWARD_ROWS = True
# Its (channels a program, positions a loop step), warps, and programs per SM the position
# chunks aim for (each program's registers are a few rows: many fit on an SM). Session 45
# (H200, bf16, batch 8, dim 2048, seqlen 4096, width 4, SiLU; probe_causal_backward.py
# --tiles, ms for dx, dW and db): 256 x 8 with 2 warps, 16 a SM 0.214 (1880 GB/s); 1 warp
# 0.242; 128 x 8, 1 warp, 32 a SM 0.212; 256 x 16 0.320; 512 x 8 0.274; 8 a SM 0.375; the
# tile kernel (128 x 16, 8 warps, recomputing g) 0.517.
ROWS_TILE = (256, 8)
ROWS_WARPS = 2
ROWS_PROGRAMS_PER_SM = 16
_INTERPRETER_ROWS_TILE = (64, 4)
# Channel-first x of width up to 4: forward and backward on 8-position segments, each held
# whole by one thread with the window's reach taken from the segments either side as whole
# vectors (``causal_conv1d_segments_kernel``, ``causal_conv1d_backward_segments_kernel``:
# no gathers across threads), rather than on the 2-D tiles (False).
FORWARD_SEGMENTS = True
BACKWARD_SEGMENTS = True
# Their (channels, segments) a program (at least 16 segments: the weight gradient's sum
# over them must not run over an axis thinner than the layout's lanes, NOTES.md, issue 9),
# forward and backward, warps, and the backward's programs per SM. Session 46 (H200, bf16,
# batch 8, dim 2048, seqlen 4096, width 4, SiLU; probe_causal_backward.py, ms): forward
# 8 x 32 0.0767 (3502 GB/s), 16 x 16 0.0783, 4 x 32 0.0839, 8 x 32 with 8 warps 0.0848, the
# tile kernel 0.1130; backward (dx, dW, db) 4 x 32 0.1497 (2689 GB/s; 8 or 32 programs an SM
# the same), 2 x 32 with 2 warps 0.1495, 8 x 32 0.1799, the tile kernel 0.2826.
SEGMENTS_TILE = (8, 32)
BACKWARD_SEGMENTS_TILE = (4, 32)
SEGMENTS_WARPS = 4
SEGMENTS_PROGRAMS_PER_SM = 16
# The backward's walk over a program's blocks software-pipelined this many stages deep (1:
# the plain loop; 2-3: the next blocks' loads as cp.async into shared memory). Session 47
# (H200, the shape above, 4 x 32): 1 0.1439 ms, 2 0.1503, 3 0.1418 (2 x 32 / 2 warps at 2:
# 0.1485; 32 programs an SM at 2: 0.1480): load latency is not what holds it at 58 % of HBM.
BACKWARD_SEGMENTS_STAGES = 1
_INTERPRETER_SEGMENTS_TILE = (16, 16)
# Channel-last x on the same kernels, rows channels-fastest (``CHANNELS_FASTEST``: a thread's 8
# rows are 8 adjacent channels, one 16-byte vector, and its 8 columns 8 positions): the
# forward, and the backward off (slower, measured before the 4-instruction sigmoid, when it
# spilled at 255 registers; since then 137-161 registers and no spills offline, not yet
# measured). Tiles (channels, segments) and warps. Session 47 (H200, the shape above,
# channel-last, ms), before the sigmoid change: forward 128 x 4 with 2 warps 0.0917 (2927
# GB/s), 256 x 2 / 2 warps 0.1018, 256 x 4 / 4 0.1036, 512 x 2 / 4 0.1032, 256 x 8 / 8
# 0.1093, the tile kernel 0.1043; backward 256 x 2 / 2 0.2643 (the best of five tiles)
# against the rows kernel's 0.2157; after it: forward 128 x 4 / 2 0.0731 (3671 GB/s), 128 x
# 2 / 1 0.0733, 128 x 8 / 4 0.0742, 64 x 4 / 1 0.0792, 64 x 8 / 2 0.0794.
FORWARD_SEGMENTS_CHANNEL_LAST = True
BACKWARD_SEGMENTS_CHANNEL_LAST = False
SEGMENTS_TILE_CHANNEL_LAST = (128, 4)
SEGMENTS_WARPS_CHANNEL_LAST = 2


def output_length(length: int, width: int, pad: int) -> int:
    """Output positions of a window of ``width`` shifted by ``pad`` over ``length`` inputs."""
    return max(0, length - (width - 1) + pad)


def _channel_last(x: torch.Tensor, dim: int) -> bool:
    """Whether x's channels are innermost (a one-channel x counts as channel-first)."""
    return x.stride(1) == 1 and dim > 1


def _tiles(x: torch.Tensor, dim: int, length: int, caps: dict = _TILES) -> tuple[int, int]:
    if INTERPRETER:
        cap_d, cap_l = _INTERPRETER_TILE
    else:
        cap_d, cap_l = caps["channel_last" if _channel_last(x, dim) else "channel_first"]
    return clamped_power_of_2(dim, 16, cap_d), clamped_power_of_2(length, 16, cap_l)


def _segments(dim: int, length: int, backward: bool = False, channel_last: bool = False):
    """(channels, 8-position segments) of a segment kernel's program."""
    if INTERPRETER:
        cap_d, cap_s = _INTERPRETER_SEGMENTS_TILE
        return clamped_power_of_2(dim, 1, cap_d), clamped_power_of_2(cdiv(length, 8), 1, cap_s)
    if channel_last:  # (a warp's lanes along the channels: at least 256 rows of them)
        cap_d, cap_s = SEGMENTS_TILE_CHANNEL_LAST
        return clamped_power_of_2(dim, 1, cap_d), clamped_power_of_2(cdiv(length, 8), 1, cap_s)
    cap_d, cap_s = BACKWARD_SEGMENTS_TILE if backward else SEGMENTS_TILE
    return clamped_power_of_2(dim, 1, cap_d), clamped_power_of_2(cdiv(length, 8), 16, cap_s)


def _on_segments(channel_last: bool, width: int, backward: bool) -> bool:
    """Whether a call runs the segment kernels (widths up to 4; each layout's switch)."""
    if channel_last:
        wanted = BACKWARD_SEGMENTS_CHANNEL_LAST if backward else FORWARD_SEGMENTS_CHANNEL_LAST
    else:
        wanted = BACKWARD_SEGMENTS if backward else FORWARD_SEGMENTS
    return wanted and width <= 4


def _check(x, weight, pad: int) -> None:
    """What the kernels assume (the public functions guarantee it; the ops are reachable
    directly through ``torch.ops.tritonconv``): a window shift inside the window, matching
    channels and dtypes."""
    width = weight.shape[1] if weight.dim() == 2 else 0
    if x.dim() != 3 or weight.dim() != 2 or width < 1 or x.shape[1] != weight.shape[0]:
        raise TritonConvError(
            f"causal_conv1d op: x must be (batch, dim, L) and weight (dim, width >= 1), got "
            f"{tuple(x.shape)} and {tuple(weight.shape)}"
        )
    if not 0 <= pad <= width - 1:
        raise TritonConvError(f"causal_conv1d op: pad must be in [0, {width - 1}], got {pad}")
    if x.dtype != weight.dtype:
        raise TritonConvError(f"causal_conv1d op: x is {x.dtype} but weight is {weight.dtype}")


def _chunk_blocks(batch: int, l_blocks: int, d_blocks: int, device, per_sm=PROGRAMS_PER_SM) -> int:
    """Position blocks per backward program: as many as keep about ``per_sm`` programs
    per SM busy, so the weight and bias partials (one per program and channel) stay few and
    their fixed-order sum short. Under the interpreter every sequence's blocks in two chunks
    (fewer Python-level programs; two partials, so the sum is exercised)."""
    if INTERPRETER:
        return max(1, cdiv(l_blocks, 2))
    wanted = cdiv(per_sm * multiprocessor_count(device), batch * d_blocks)
    return cdiv(l_blocks, max(1, min(l_blocks, wanted)))


@launch_plan
def causal_conv1d(x, weight, bias, pad: int, silu: bool) -> torch.Tensor:
    """``y[b, d, l] = act(sum_k w[d, k] x[b, d, l - pad + k] + bias[d])``, ``l < L_out``."""
    for name, t in (("x", x), ("weight", weight), ("bias", bias)):
        if t is not None:
            check_kernel_device(t, name)
    _check(x, weight, pad)
    batch, dim, length = x.shape
    width = weight.shape[1]
    y = empty_in_order(x, (batch, dim, output_length(length, width, pad)), dim_order(x))
    if y.numel() == 0:
        return y
    channel_last = _channel_last(x, dim)
    common = (x, weight, bias if bias is not None else weight, y, dim, length, y.shape[2],
              *x.stride(), *weight.stride(), *y.stride())  # fmt: skip
    shapes = dict(
        PAD=pad, WIDTH=width, HAS_BIAS=bias is not None, SILU=silu,
        ACC_DTYPE=accumulator_dtype(x.dtype), INDEX_64=needs_int64(x, y),
    )  # fmt: skip
    if _on_segments(channel_last, width, backward=False):
        block_d, segments = _segments(dim, length, channel_last=channel_last)
        grid = (batch * cdiv(length, segments * 8), cdiv(dim, block_d))
        launch(
            causal_conv1d_segments_kernel, grid, *common, **shapes,
            BLOCK_D=block_d, SEGMENTS=segments, CHANNELS_FASTEST=channel_last,
            num_warps=SEGMENTS_WARPS_CHANNEL_LAST if channel_last else SEGMENTS_WARPS,
        )  # fmt: skip
        return y
    block_d, block_l = _tiles(x, dim, length)
    x_once = X_ONCE and not channel_last and max(pad, width - 1 - pad) < block_l
    launch(
        causal_conv1d_kernel, (batch * cdiv(length, block_l), cdiv(dim, block_d)), *common,
        **shapes, BLOCK_D=block_d, BLOCK_L=block_l, X_ONCE=x_once, num_warps=4,
    )  # fmt: skip
    return y


@launch_plan
def causal_conv1d_backward(grad_output, x, weight, bias, pad: int, silu: bool, output_mask):
    """(grad_x, grad_weight, grad_bias) of :func:`causal_conv1d`; a gradient ``output_mask``
    leaves out (or the bias's, without a bias) is an empty tensor. One kernel pass computes
    what is asked for; the weight and bias gradients are per-tile partial sums reduced in a
    fixed order (bitwise reproducible)."""
    for name, t in (("grad_output", grad_output), ("x", x), ("weight", weight)):
        check_kernel_device(t, name)
    _check(x, weight, pad)
    batch, dim, length = x.shape
    expected = (batch, dim, output_length(length, weight.shape[1], pad))
    if tuple(grad_output.shape) != expected:
        raise TritonConvError(
            f"causal_conv1d op: grad_output must be {expected}, got {tuple(grad_output.shape)}"
        )
    width = weight.shape[1]
    want_x, want_w, want_b = output_mask
    want_b = want_b and bias is not None
    nothing = x.numel() == 0 or grad_output.numel() == 0  # no gradient flows: zeros
    if want_x:
        grad_x = empty_in_order(x, x.shape, dim_order(x), zero=nothing)
    else:
        grad_x = allocate((0,), x.dtype, x.device)
    grad_w = allocate(weight.shape if want_w else (0,), weight.dtype, x.device, zero=nothing)
    grad_b = allocate((dim,) if want_b else (0,), weight.dtype, x.device, zero=nothing)
    params = want_w or want_b
    if nothing or not (want_x or params):
        return grad_x, grad_w, grad_b
    channel_last = _channel_last(x, dim)
    # each kernel's tile: what it takes beside BLOCK_D (``tile``), and its positions a block
    if _on_segments(channel_last, width, backward=True):
        kernel = causal_conv1d_backward_segments_kernel
        block_d, count = _segments(dim, length, backward=True, channel_last=channel_last)
        block_l = count * 8
        tile = dict(SEGMENTS=count, CHANNELS_FASTEST=channel_last, STAGES=BACKWARD_SEGMENTS_STAGES)
        warps = SEGMENTS_WARPS_CHANNEL_LAST if channel_last else SEGMENTS_WARPS
        per_sm = SEGMENTS_PROGRAMS_PER_SM
    elif BACKWARD_ROWS and channel_last and width <= 4:
        kernel = causal_conv1d_backward_rows_kernel
        cap_d, block_l = _INTERPRETER_ROWS_TILE if INTERPRETER else ROWS_TILE
        block_d, tile = clamped_power_of_2(dim, 16, cap_d), dict(BLOCK_L=block_l)
        warps, per_sm = ROWS_WARPS, ROWS_PROGRAMS_PER_SM
    else:
        kernel = causal_conv1d_backward_kernel
        # g once per block pays along positions (256-long tiles); channel-last tiles are 16
        # positions long, where the gathers' layout conversions cost more than recomputing g
        # (H100, benchmarks/NOTES.md); the shifts must stay within one block either side.
        block_d, block_l = _tiles(x, dim, length, _BACKWARD_TILES)
        g_once = G_ONCE and width - 1 < block_l and (G_ONCE_CHANNEL_LAST or not channel_last)
        tile = dict(BLOCK_L=block_l, WIDTH_P2=next_power_of_2(width), G_ONCE=g_once)
        warps, per_sm = BACKWARD_WARPS, PROGRAMS_PER_SM
    l_blocks = cdiv(length, block_l)
    chunk_blocks = _chunk_blocks(batch, l_blocks, cdiv(dim, block_d), x.device, per_sm)
    programs = batch * cdiv(l_blocks, chunk_blocks)
    part = partial_dtype(weight.dtype)
    dw_part = allocate((programs, dim, width) if params else (0,), part, x.device)
    db_part = allocate((programs, dim) if params else (0,), part, x.device)
    launch(
        kernel,
        (programs, cdiv(dim, block_d)),
        x,
        weight,
        bias if bias is not None else weight,
        grad_output,
        grad_x if want_x else x,
        dw_part,
        db_part,
        dim,
        length,
        grad_output.shape[2],
        chunk_blocks,
        *x.stride(),
        *weight.stride(),
        *grad_output.stride(),
        *(grad_x if want_x else x).stride(),
        PAD=pad, WIDTH=width, HAS_BIAS=bias is not None, SILU=silu, GRAD_INPUT=want_x,
        GRAD_PARAMS=params, ACC_DTYPE=accumulator_dtype(x.dtype), BLOCK_D=block_d, **tile,
        INDEX_64=needs_int64(x, grad_output, grad_x, dw_part), num_warps=warps,
    )  # fmt: skip
    if want_w:
        sum_partials(dw_part, grad_w)
    if want_b:
        sum_partials(db_part, grad_b)
    return grad_x, grad_w, grad_b
