"""Implicit-GEMM launchers: forward, input gradient and weight gradient, any spatial rank 1-3.

The kernels (``kernels/implicit_gemm.py``) are written over three spatial axes; a 2-D (or 1-D)
problem is passed as a 3-D one with leading size-1 axes (unit kernel, stride and dilation, no
padding). float16, bfloat16 and float32 run on tensor cores (:data:`DOT_DTYPES`); fp32 obeys
``torch.backends.cudnn.allow_tf32`` (TF32, or when False ``precision.TF32_OFF_PRECISION``:
three TF32 products at fp32 accuracy, ``tf32x3_rn``, or fp32 products and sums, ``ieee``),
except fp32 weight gradients, which compute products of bfloat16 pieces, pairs with TF32
allowed (:data:`WGRAD_TF32_PRECISION`), triples with it off (:data:`WGRAD_TF32_OFF_PRECISION`),
and fp32 products (``ieee``) for programs under 32 channels a side either way
(:func:`wgrad_precision`). float64 and the integer dtypes take the
kernels' exact outer-product path (int64 accumulation, wrapping like PyTorch), so every real
dtype has a convolution of any rank.

The weight tile is read along its reduction channels (input channels forward, output channels
for the input gradient) or along the other channel axis: a channels-last weight (input channels
innermost) is read as it is both ways, except by an fp32 input gradient with TF32 products
(``precision.TF32_PRODUCTS``), which take only tiles along the reduction; a weight with neither
channel axis innermost (NCHW with a kernel wider than 1x1) is first copied with the reduction
channels innermost (``crop_into``).

Tile configurations are a :class:`Config`; :func:`forward_config`, :func:`wgrad_config` choose
one per shape class (the heuristic, from the sweep recorded in ``benchmarks/NOTES.md``); any
launcher also takes an explicit one. The interpreter gets small pipelines and large tiles.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch

from .._runtime import INTERPRETER, check_kernel_device
from ..geometry import FLOAT_DTYPES, INT_DTYPES, Geometry, make_geometry
from ..kernels.implicit_gemm import (
    conv_igemm_kernel,
    conv_igemm_wgrad_kernel,
    pointwise_tma_kernel,
    wgrad_tma_kernel,
    window_tma_kernel,
)
from ..launch import (
    TensorDescriptor,
    allocate,
    call,
    launch,
    launch_plan,
    needs_aligned,
    takes_descriptors,
    tracing,
)
from ..precision import TF32_PRODUCTS, TF32X3_PRECISIONS, dot_precision
from .common import (
    accumulator_dtype,
    cdiv,
    clamped_power_of_2,
    dense_strides,
    empty_like_format,
    laid_out,
    multiprocessor_count,
    needs_int64,
    partial_dtype,
    same_layout,
    sum_partials,
)
from .crop import crop_into, empty_in_order
from .direct import dot_dtype, tf32x3_block

#: dtypes computed on tensor cores (fp32 accumulation).
DOT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Every dtype this algorithm takes.
DTYPES = FLOAT_DTYPES + INT_DTYPES

# Programs per SM the weight gradient aims for when choosing its split count: 2 measured
# better than 4 on most dense layers (fewer, longer splits; session 9, sweep_backward.py).
WGRAD_PROGRAMS_PER_SM = 2
# Cap on the weight gradient's fp32 partial sums, in elements (splits x weight numel).
WGRAD_PARTIAL_LIMIT = 1 << 24

# The forward and the input gradient split their reduction (fp32 partials, then
# ``sum_partials``) when their tiles fill less than one wave of the GPU and each program would
# reduce at least SPLIT_K_MIN_REDUCTION elements alone: r2plus1d's 921-channel layers on 7x7
# frames at batch 2 (196 output rows, 32 programs for 132 multiprocessors, each 2763 long)
# ran at 0.05x cuDNN. Each split keeps at least SPLIT_K_MIN_STEPS reduction steps; the
# partials are capped like the weight gradient's. Shorter reductions do not split: a second
# launch and an allocation cost more host time than a small kernel's idle multiprocessors.
SPLIT_K_MIN_REDUCTION = 2048
SPLIT_K_MIN_STEPS = 4
# Multiprocessors the split rule assumes under the interpreter (no GPU to ask): 0 splits
# nothing there; the split tests raise it.
INTERPRETER_MULTIPROCESSORS = 0


class Config(NamedTuple):
    """One tile configuration of an implicit-GEMM kernel. ``block_n2`` (forward/input-gradient
    kernel only): a second accumulator's columns, the column tile ``block_n + block_n2`` wide
    (:func:`tail_columns`)."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    block_n2: int = 0

    def __str__(self) -> str:
        m, n, k, w, s, n2 = self
        columns = f"({n}+{n2})" if n2 else f"{n}"
        return f"{m}x{columns}x{k} w{w} s{s}"

    @property
    def columns(self) -> int:
        """Destination channels one program computes."""
        return self.block_n + self.block_n2


def _k_block(dtype: torch.dtype, channels: int) -> int:
    """Reduction step over ``channels`` per tap: the block of 16, 32 or 64 (fp32: 16 or 32)
    channels that pads them least, the largest of equals (fewer, longer steps); 32 rather than
    16 when it pads them by at most an eighth (session 12, ``probe_small_wave.py --odd``: 144
    channels in 16-channel steps took 164 µs where 32-channel steps, 160 padded, took 122)."""
    blocks = (16, 32) if dtype == torch.float32 else (16, 32, 64)
    block = min(reversed(blocks), key=lambda b: cdiv(channels, b) * b)
    if block == 16 and cdiv(channels, 32) * 32 * 8 <= channels * 9:
        block = 32
    return block


# Reduction length (taps x channels per group) from which a 16-bit layer under one wave of
# 128-row tiles takes 128-channel reduction steps (:func:`forward_config`).
SMALL_WAVE_LONG_REDUCTION = 4096
#: Whether a 16-bit layer under one wave of 128 x 128 tiles with a long reduction takes
#: 128 x 64 tiles where those fill a wave (:func:`forward_config`, session 35)
SMALL_WAVE_TALL_TILES = True


def forward_config(
    dtype, rows, src_per_group, dst_per_group, groups, device, taps=1, packed=False
) -> Config:
    """The heuristic tile configuration of ``conv_igemm_kernel`` for a GEMM of ``rows`` rows
    per group, reducing ``src_per_group`` channels per tap over ``taps`` taps into
    ``dst_per_group`` columns (``packed``: groups packed into these, which take no second
    accumulator). Fitted to the H100 sweep of ``benchmarks/sweep_igemm.py`` and
    ``benchmarks/probe_small_wave.py`` (benchmarks/NOTES.md). fp32 with ``tf32x3`` products
    steps at most ``direct.TF32X3_K_BLOCK`` channels (:func:`tf32x3_step`)."""
    config = _forward_config(dtype, rows, src_per_group, dst_per_group, groups, device, taps,
                             packed)  # fmt: skip
    return tf32x3_step(config, dtype)


# 16-bit windowed reductions of at least this many channels a tap, which 32-channel steps pad
# least, take 64-channel steps in 128 x 64 tiles (:func:`long_steps`).
LONG_STEPS_MIN_CHANNELS = 128


def long_steps(channels: int, block_k: int, taps: int, block_n: int) -> bool:
    """Whether a 16-bit reduction over ``taps`` taps of ``channels`` each, which
    :func:`_k_block` steps 32 at a time, runs 64-channel steps instead in its 128-row tiles
    of ``block_n`` columns (:func:`forward_config`): fewer steps for more padding (at most a
    fifth more from 128 channels on: 160 -> 192 for 144 or 160). Session 42 (H200, bf16
    channels-last, ``benchmarks/probe_layer_tiles.py``): r2plus1d's 3x1x1 144 -> 64 forward
    at 16x56², batch 8, 112.7 µs in 32-channel steps of 4 stages (5 steps a tap) against
    97.6 in 64-channel steps of 3 (3 steps; cuDNN 81.6), the best of 19 tiles; its 1x3x3
    64 -> 144's input gradient (144 channels into 64) 210.2 -> 212.1, unchanged. Only what
    was measured: windows (more than one tap) into 64-column tiles; 1x1 layers (MobileNet's
    and EfficientNet's 144 -> 24, 240 -> 40) and narrower tiles keep 32-channel steps."""
    return block_k == 32 and channels >= LONG_STEPS_MIN_CHANNELS and taps > 1 and block_n == 64


def tf32x3_step(config: Config, dtype) -> Config:
    """``config`` with its reduction step capped where fp32 takes ``tf32x3`` products
    (``direct.tf32x3_block``): the heuristic's tiles, benchmark mode's candidates and whatever
    a launch is handed (a tuned choice made under another precision) alike. Session 27: the
    models suite's accuracy phase runs with ``cudnn.benchmark`` on, so tritonconv measured
    its tiles there and took 32- and 64-deep ones, which this cap did not reach then."""
    return config._replace(block_k=tf32x3_block(config.block_k, dtype))


def _forward_config(
    dtype, rows, src_per_group, dst_per_group, groups, device, taps, packed
) -> Config:
    if dtype not in DOT_DTYPES:  # outer products, one channel per step
        rows_per_program = 1024 if INTERPRETER else 64  # the interpreter: fewer Python steps
        return Config(rows_per_program, clamped_power_of_2(dst_per_group, 1, 32), 1, 4, 1)
    block_k = _k_block(dtype, src_per_group)
    block_n = clamped_power_of_2(dst_per_group, 16, 128)
    if INTERPRETER:
        return Config(128, block_n, block_k, 4, 1)
    fp32 = dtype == torch.float32
    tiles = cdiv(rows, 128) * cdiv(dst_per_group, block_n) * groups  # of 128 rows
    sms = multiprocessor_count(device)
    if TF32X3_TILES and fp32 and not packed and dot_precision(dtype) in TF32X3_PRECISIONS:
        config = _tf32x3_config(tiles, src_per_group, block_n, taps, sms)
        if config is not None:
            return config
    if tiles < sms:
        # Under one wave of 128-row tiles: small tiles (more programs). 16-bit reductions up
        # to SMALL_WAVE_LONG_REDUCTION long run 64-channel steps in 4 stages, longer ones
        # 128-channel steps in 3 (session 12's probe, bf16 ResNet-50 layers at batch 32:
        # 3x3 256 at 14x14 29.8 -> 22.8 µs forward, 1x1 1024 -> 256 15.9 -> 11.4; 3x3 512 at
        # 7x7 27.4 against 30.8 with 64-channel steps).
        if src_per_group >= 128:
            long = taps * src_per_group >= SMALL_WAVE_LONG_REDUCTION
            tall = cdiv(rows, 128) * cdiv(dst_per_group, 64) * groups  # 128 x 64 tiles
            if SMALL_WAVE_TALL_TILES and long and not fp32 and tall >= sms:
                # 128 x 64 tiles where they still fill a wave, so twice the rows share each
                # weight tile (session 35, H200, probe_small_wave.py --unet, bf16 batch 8, µs
                # against 64 x 64 x 128: UNet's 3x3 1024 at 16x16 forward 97.4 -> 76.5, input
                # gradient 106.1 -> 76.6; 512 -> 1024 at 16x16 forward 53.5 -> 40.9; 256 ->
                # 512 at 32x32 input gradient 57.1 -> 40.2; cuDNN 62.6 / 51.5, 42.1, 28.2).
                # Where they do not (ResNet-50's 3x3 512 at 7x7: 104 of them), 64 x 64 won
                # (session 12).
                return Config(128, 64, 64, 4, 4)
            if fp32 and not long and dot_precision(dtype) == "tf32":
                # TF32, measured (session 22, benchmarks/probe_tf32_tiles.py, H100): ResNet-50's
                # 3x3 256 at 14x14 55.8 -> 41.5 µs in 32-channel steps of 4 stages (cuDNN
                # 30.4); its 3x3 512 at 7x7 (a long reduction) keeps 64-channel steps
                return Config(64, 64, 32, 4, 4)
            if fp32 or long:
                return Config(64, 64, 64 if fp32 else 128, 4, 3)
            return Config(64, 64, 64, 4, 4)
        return Config(64, min(block_n, 64), block_k, 4, 4)
    if block_n < 128:
        # 16-bit 64-channel steps in 3 stages (72 KB: three programs an SM) rather than 4
        # (96 KB: two). Session 18's probe (probe_swap_tiles.py, H100, bf16 channels-last):
        # UNet's 3x3 64 -> 64 at 256x256 133.9 -> 118.9 µs forward, 136.2 -> 120.2 input
        # gradient; ResNet-50's 3x3 64 -> 64 at 56x56 27.0 -> 24.9 / 27.0 -> 25.5.
        if not fp32 and long_steps(src_per_group, block_k, taps, block_n):
            block_k = 64
        stages = 3 if not fp32 and block_k == 64 else 4
        return Config(128, block_n, block_k, 4, stages)
    if not fp32 and block_k == 64 and taps * cdiv(src_per_group, block_k) <= 2:
        # A reduction of one or two steps (1x1 convolutions of 64-128 channels): nothing to
        # pipeline, so the 256-row tiles' 3 stages (147 KB, one program an SM) only keep
        # programs apart; 128x128 in 2 stages (64 KB) lets three share an SM and overlap one's
        # stores with another's loads. Session 18: ResNet-50's 1x1 64 -> 256 at 56x56
        # 39.2 -> 34.7 µs.
        return Config(128, 128, 64, 8, 2)
    block_n2 = 0 if packed else tail_columns(dtype, dst_per_group)
    if block_n2:
        steps = taps * cdiv(src_per_group, block_k)
        programs = cdiv(rows, 128) * cdiv(dst_per_group, 128 + block_n2) * groups
        if steps >= TAIL_MIN_STEPS and programs >= TAIL_MIN_WAVES * multiprocessor_count(device):
            return Config(128, 128, block_k, 8, 3 if block_k == 64 else 4, block_n2)
    if cdiv(dst_per_group, 128) * 128 * 8 > cdiv(dst_per_group, 64) * 64 * 9:
        # 128-wide tiles would pad the columns by far more than 64-wide ones (144 channels:
        # 256 against 192); measured (probe_small_wave.py --odd, r2plus1d's 144-channel
        # (2+1)D layers at batch 8): 128x64x32 tiles 303 / 157 µs against 332 / 201 with
        # 256x128x64. 16-bit 64-channel steps since the loops of sessions 18-22: 3 stages,
        # as the 64-wide tiles above (session 23's probe_more_layers.py, H100, bf16: the
        # 144-channel layer at 16x56x56, 270.3 µs in 32-channel steps of 4 stages against
        # 244.7 in 64-channel steps of 3; cuDNN 186.9)
        if not fp32 and block_k == 64:
            return Config(128, 64, 64, 4, 3)
        return Config(128, 64, min(block_k, 32), 4, 4)
    if not fp32 and block_k == 64 and rows >= 16384:
        return Config(256, 128, 64, 8, 3)
    return Config(128, 128, block_k, 8, 3 if block_k * (2 if fp32 else 1) >= 64 else 4)


#: Whether fp32 with TF32 off takes :func:`_tf32x3_config`'s tiles where it has them
TF32X3_TILES = True
#: :func:`_tf32x3_config`: 64-column layers of at most this many source channels a group (the
#: folded stems) take 256-row tiles
TF32X3_TALL_MAX_CHANNELS = 32


def _tf32x3_config(tiles: int, src_per_group: int, block_n: int, taps: int, sms: int):
    """The forward/input-gradient tiles of fp32 with TF32 off (``tf32x3`` products, whose
    every step splits its operand tiles in registers: about three times a TF32 step's
    instructions) where they differ from the general rule's, else None. ``tiles``: the grid
    in 128-row tiles of ``block_n`` columns; ``sms``: the GPU's multiprocessors. Unpacked
    groups only. Measured (session 30, H100, benchmarks/probe_tf32_tiles.py --tf32-off and
    --grad-input, forward / input gradient µs, the general rule's -> these):

    - 64 columns, at most TF32X3_TALL_MAX_CHANNELS source channels (the folded stems):
      256 x 64 on 8 warps, each weight tile's split shared by twice the rows. ResNet-50's
      stem 470.7 -> 408.2, VGG's first layer 293.6 -> 263.3 (forward; cuDNN 379.3 / 242.4).
    - Under one wave of 128-row tiles of 128 columns, with a long reduction: 128 x 128 on
      8 warps, fewer programs than the SMs but far fewer instructions a product. ResNet-50's
      3x3 at 7² 219.4 -> 166.1 / 249.2 -> 193.2 (64 x 64 on 4 warps before; cuDNN 296.0 /
      297.9).
    - 1x1 layers of at least 64 columns under two waves: 64 x 64 on 4 warps. 40 -> 120 at
      28² 14.5 -> 12.4 / 17.0 -> 13.8.
    - Windows with 64 columns, or 128 columns under two waves (where 128 x 128 tiles leave
      the second wave half empty): 128 x 64 on 8 warps. ResNet-50's 3x3 at 56² 137.3 ->
      132.1 / 144.4 -> 135.9, at 28² 149.4 -> 132.3 / 165.7 -> 138.9 (128 x 128 before);
      UNet's 256² 679.3 -> 673.9 / 702.3 -> 676.3. On 1x1 layers these lost (ResNet-50's
      64 -> 256 at 56² 102.8 -> 120.9)."""
    if tiles < sms:
        if block_n == 128 and taps * src_per_group >= SMALL_WAVE_LONG_REDUCTION:
            return Config(128, 128, 16, 8, 3)
        return None
    if block_n == 64 and src_per_group <= TF32X3_TALL_MAX_CHANNELS:
        return Config(256, 64, 16, 8, 3)
    if taps == 1:
        return Config(64, 64, 16, 4, 3) if block_n >= 64 and tiles < 2 * sms else None
    if block_n == 64 or (block_n == 128 and tiles < 2 * sms):
        return Config(128, 64, 16, 8, 3)
    return None


#: Whether 16-bit forward/input-gradient tiles may take a second accumulator (:func:`tail_columns`).
TAIL_COLUMNS = True
# ... and where: reductions of at least TAIL_MIN_STEPS steps, grids of at least TAIL_MIN_WAVES
# programs per SM. Measured (session 25, H100, bf16; probe_more_layers.py forwards and
# probe_tail_columns.py input gradients, second accumulator against the tiles before it):
# 9-18 steps over 3-24 programs an SM gained 8-30 % (the (2+1)D 144-wide forward 250 -> 175
# µs, its 144-wide input gradient 262 -> 243); the temporal 3x1x1 input gradients lost: 3
# and 6 steps (144 and 288 wide) 6-7 %, 12 steps over 1.5 programs an SM (576 wide, 7x7
# frames) 17.1 -> 23.9 µs.
TAIL_MIN_STEPS = 8
TAIL_MIN_WAVES = 4


def tail_columns(dtype, dst_per_group: int) -> int:
    """The second accumulator's width (``Config.block_n2``) for ``dst_per_group`` destination
    channels, 0 for none: where 128-wide tiles would pad the columns (144, 160, 192, 288, 576
    channels), a column tile of 128 plus 16, 32 or 64 that divides them exactly. 16-bit only
    (fp32 tiles are narrower). The (2+1)D convolutions of video networks widen 64 -> 144,
    128 -> 288, 256 -> 576 channels: each a multiple of 144."""
    if not TAIL_COLUMNS or dtype not in (torch.float16, torch.bfloat16) or dst_per_group % 128 == 0:
        return 0
    return next((n2 for n2 in (16, 32, 64) if dst_per_group % (128 + n2) == 0), 0)


#: Channels a side from which ``bf16x6`` weight gradients take 128 x 128 tiles
WGRAD_BF16X6_WIDE = 96


def wgrad_config(dtype, out_per_group: int, in_per_group: int, rows: int, kw: int = 1) -> Config:
    """The heuristic tile configuration of ``conv_igemm_wgrad_kernel``: a ``[C_out, C_in]``
    tile per (group, tap), reducing over ``rows`` positions ``block_k`` at a time. When a
    program owns several width taps (:func:`wgrad_tap_group`) the reduction step is 64
    positions, so three pipeline stages of a ``dy`` tile and three ``x`` tiles fit two programs
    per SM. Measured (session 21, H100, bf16, benchmarks/probe_wgrad_tiles.py): three taps of
    64 x 64 tiles in three stages against the two taps of four stages before (whose second
    program of a 3-wide kernel computed a tap past its edge), ResNet-50's 3x3 layers at 56 / 28
    / 14 pixels 30.4 / 29.6 / 38.8 -> 27.8 / 23.2 / 29.7 µs, UNet's 67.6 / 128.2 -> 57.7 / 109.8;
    the 128 x 128 tiles the wide long layers had (dilation 2, ASPP) lost to them too."""
    if dtype not in DOT_DTYPES:  # [M, K, N] products summed over K, as the direct kernel's
        block_m = clamped_power_of_2(out_per_group, 1, 8)
        block_n = clamped_power_of_2(in_per_group, 1, 16)
        budget = 16384 if INTERPRETER else 2048
        return Config(block_m, block_n, max(16, budget // (block_m * block_n)), 4, 1)
    block_m = clamped_power_of_2(out_per_group, 16, 64)
    block_n = clamped_power_of_2(in_per_group, 16, 64)
    if INTERPRETER:
        return Config(block_m, block_n, 64, 4, 1)
    fp32 = dtype == torch.float32
    if kw > 1 and not fp32:  # 64-position steps, 3 stages: three width taps a program fit
        return Config(block_m, block_n, 64, 4, 3)
    precision = wgrad_precision(dtype, in_per_group, out_per_group)
    if precision == "bf16x6" and min(out_per_group, in_per_group) >= WGRAD_BF16X6_WIDE:
        # measured (session 29, H100, probe_wgrad_tiles.py --tf32-off): ResNet-50's 3x3
        # layers at 28 / 14 / 7 pixels 186 / 177 / 172 µs with 64 x 64 x 32 tiles, four
        # programs an SM, against 125 / 143 / 167 with these, two; the pointwise 96 -> 384 at
        # 56 pixels 240 against 155 (cuDNN's fp32: 169 / 108 / 113 / 354)
        return Config(128, 128, 64, 8, 3)
    if precision == "bf16x3" and min(out_per_group, in_per_group) >= 256:
        # bf16x3 products (WGRAD_TF32_PRECISION): measured (session 21, H100), 128 x 256 tiles
        # took ResNet-50's 3x3 layers at 14 / 7 pixels 128.2 / 109.7 -> 80.1 / 99.7 µs and
        # the dilation-2 one 828 -> 630 (with four programs an SM: wgrad_programs_per_sm)
        return Config(128, 256, 32, 8, 3)
    if precision == "bf16x3" and kw > 1 and min(out_per_group, in_per_group) >= 128:
        # measured (session 30, H100, probe_wgrad_tiles.py --dtype float32): ResNet-50's 3x3
        # 128 -> 128 at 28 pixels 107.0 µs with 64 x 64 x 32 tiles, 85.5 with these (cuDNN's
        # TF32 62.8); 128 x 128 x 64 95.4
        return Config(128, 64, 64, 4, 3)
    if min(out_per_group, in_per_group) >= 256 and rows >= 32768:
        return Config(128, 128, 32 if fp32 else 64, 8, 3)
    if kw > 1 and in_per_group < WGRAD_TAP_GROUP_BELOW:
        return Config(block_m, block_n, 32, 4, 3)
    return Config(block_m, block_n, 32 if fp32 else 128, 4, 4 if fp32 else 3)


def _spatial3(values, fill: int) -> tuple:
    """A per-axis tuple of a 1-3-D problem as three axes, the missing leading ones ``fill``."""
    values = tuple(values)
    return (fill,) * (3 - len(values)) + values


def _strides3(t: torch.Tensor) -> tuple:
    """(n, c, d, h, w) element strides of a 3-5-D tensor (missing spatial axes: stride 0)."""
    n, c, *spatial = t.stride()
    return (n, c, *_spatial3(spatial, 0))


def _window3(geometry: Geometry):
    """The geometry's kernel, stride, pad_before and dilation as 3-axis tuples."""
    return (
        _spatial3(geometry.kernel, 1),
        _spatial3(geometry.stride, 1),
        _spatial3(geometry.pad_before, 0),
        _spatial3(geometry.dilation, 1),
    )


def _three_d(src: torch.Tensor, other_depth: int, kernel_depth: int, pad_depth: int) -> bool:
    """Whether a kernel has a depth axis to walk: not when ``src``, the other side of the
    convolution and the kernel are one deep and the depth is unpadded (1-D and 2-D problems):
    the kernels then skip every depth coordinate and bound check."""
    depth = _spatial3(src.shape[2:], 1)[0]
    return (depth, other_depth, kernel_depth, pad_depth) != (1, 1, 1, 0)


def _innermost(t: torch.Tensor, dim: int) -> torch.Tensor:
    """``t`` itself when its dimension ``dim`` has stride 1 (or size 1), else a copy laid out
    with ``dim`` innermost (by the crop kernel, so launch plans replay it).

    The kernels read every tile along channels: the weight's reduction side, and the images'
    channels (for an image, ``dim=1``: channels-last). Only a stride-1 channel axis lets Triton
    vectorise those loads and pipeline them (cp.async, ``num_stages``); with NCHW images the
    compiled loop loads each element of the image tile on its own, synchronously (its TTGIR,
    benchmarks/NOTES.md). One relayout pass costs far less."""
    if t.stride(dim) == 1 or t.shape[dim] == 1:
        return t
    return _relaid(t, [d for d in range(t.dim()) if d != dim] + [dim])


def _relaid(t: torch.Tensor, order) -> torch.Tensor:
    """A dense copy of ``t`` whose dimensions, outermost first, are ``order`` (by the crop
    kernel, so launch plans replay it)."""
    copy = empty_in_order(t, t.shape, order)
    crop_into(t, copy, [0] * t.dim())
    return copy


def channels_innermost(t: torch.Tensor) -> torch.Tensor:
    """An image ``t`` (N, C, *spatial) as the kernels read it: itself when its channels are
    innermost, else a copy that has them so (one relayout, shared by an input gradient and
    a weight gradient that would each make their own)."""
    return _innermost(t, 1)


def _row_grid(dst_spatial, stride, transposed: bool) -> tuple:
    """Positions per sample the kernel's rows walk: the output (forward), or one stride phase
    of it (input gradient: ``ceil(size / stride)`` per axis)."""
    if not transposed:
        return tuple(dst_spatial)
    return tuple(cdiv(size, s) for size, s in zip(dst_spatial, stride, strict=True))


# Channels (the narrower side) a packed forward/input-gradient program reaches at least.
# Measured (H100, bf16 channels-last, benchmarks/probe_grouped.py, session 21) against 16, the
# tensor-core step that was the rule before: 32 took ResNeXt-50's grouped 3x3 layers (4, 8 and
# 16 channels a group at 56, 28 and 14 pixels) from 69.4 / 36.9 / 19.5 µs forward to 61.6 /
# 32.4 / 13.1 and RegNet-Y-800MF's 16-channel groups at 14 pixels from 13.8 to 9.3 (input
# gradients alike); 64 was slower on all of those (8x the tensor-core work for 8-channel
# groups: 57.7 µs) and faster only on RegNet's 56-pixel stage (4 groups into one: 26.9 against
# 32.5).
PACK_CHANNELS = 32
# fp32 packs to PACK_CHANNELS_FP32: a TF32 tensor-core step is 8 channels deep, not 16, so
# packing 8-channel groups to 32 made half of the tile's products zeros for no shorter loop.
# Measured (session 45, H200, fp32 channels-last with TF32, benchmarks/probe_passes.py
# --dense grp32_3x3_28, batch 32, µs): groups-32 of 8 channels at 28² packed to 32 -> 16
# forward 57.7 -> 46.0, input gradient 62.8 -> 48.6 (cuDNN 37.2 / 41.2). Only narrower groups:
# fp32 groups of 16 to 31 channels pack to PACK_CHANNELS as before (not measured at 16).
PACK_CHANNELS_FP32 = 16
# Groups of 16 to 31 channels a side pack to WIDE_PACK_CHANNELS instead where the packed
# grid still has WIDE_PACK_MIN_WAVES waves of 128-row programs: twice the tensor-core work
# (4x the useful products for 16-channel groups) in half the loop steps. Measured (session
# 33, H100, bf16 channels-last, benchmarks/probe_grouped_tiles.py, µs, forward / input
# gradient): RegNet-Y-800MF's 16 channels x 4 groups at 56² (784 programs at 64 channels)
# 32.4 / 32.5 -> 26.0 / 29.0 (cuDNN 23.0 / 25.4); session 21's probe had 64 channels slower
# on the same groups at 14² (392 and 245 programs: 13.1 -> 14.2 and 9.3 -> 10.4 forward).
WIDE_PACK_CHANNELS = 64
WIDE_PACK_MIN_WAVES = 4


def group_pack(
    dtype, src_per_group: int, dst_per_group: int, groups: int, rows: int = 0, device="cuda"
) -> int:
    """How many consecutive groups one program of the forward/input-gradient kernel runs as one
    (block-diagonal weight tile): enough that both sides reach ``PACK_CHANNELS`` (groups of 8 ->
    8 channels: 4; of 16 -> 16: 2; fp32 groups under ``PACK_CHANNELS_FP32`` channels: that
    many, groups of 8: 2), a power of two dividing ``groups``; 1 for groups that wide on both
    sides already and off tensor cores. 16-bit groups of 16 to 31 channels over ``rows``
    output rows (per phase) pack to ``WIDE_PACK_CHANNELS`` where that leaves enough programs
    for ``device`` (:data:`WIDE_PACK_MIN_WAVES`); groups of 32 stay unpacked
    (session 21: two a program lost at 7², and packing gives up the tap bits, the aligned
    loads and the second accumulator, each measured faster)."""
    if dtype not in DOT_DTYPES or groups == 1:
        return 1
    narrow = min(src_per_group, dst_per_group)
    fp32_narrow = dtype == torch.float32 and narrow < PACK_CHANNELS_FP32
    target = PACK_CHANNELS_FP32 if fp32_narrow else PACK_CHANNELS
    pack = 1
    while pack * narrow < target and groups % (2 * pack) == 0:
        pack *= 2
    wide = 2 * pack
    if (
        dtype in (torch.float16, torch.bfloat16) and 16 <= narrow < PACK_CHANNELS and rows
        and wide * max(src_per_group, dst_per_group) <= WIDE_PACK_CHANNELS
        and groups % wide == 0
    ):  # fmt: skip
        # (no GPU to ask under the interpreter: INTERPRETER_MULTIPROCESSORS, 0 packs no wider)
        sms = INTERPRETER_MULTIPROCESSORS if INTERPRETER else multiprocessor_count(device)
        if sms and cdiv(rows, 128) * (groups // wide) >= WIDE_PACK_MIN_WAVES * sms:
            pack = wide
    return pack


def launch_config(dtype, batch, src_per_group, dst_per_group, dst_spatial, stride, kernel,
                  groups, transposed, device) -> Config:  # fmt: skip
    """The tile configuration the forward/input-gradient launcher picks for these shapes (what
    ``tritonconv.explain`` reports): ``dst_spatial``, ``stride`` and ``kernel`` per spatial
    axis; small groups as the launcher packs them (:func:`group_pack`)."""
    grid_q = _row_grid(_spatial3(dst_spatial, 1), _spatial3(stride, 1), transposed)
    rows = batch * math.prod(grid_q)
    pack = group_pack(dtype, src_per_group, dst_per_group, groups, rows, device)
    # taps a row reduces over: an input gradient's stride phase takes about 1/stride of them
    taps = math.prod(cdiv(k, s) if transposed else k for k, s in zip(kernel, stride, strict=True))
    return forward_config(
        dtype, rows, pack * src_per_group, pack * dst_per_group, groups // pack, device, taps,
        packed=pack > 1,
    )  # fmt: skip


# Forward tiles benchmark mode tries besides the heuristic's (``tuning_configs``): each the
# fastest on some dense layer of the H100 sweep (benchmarks/sweep-h100-2026-11-23-igemm.json),
# where the best configuration beat the heuristic's by up to 1.5x (r50 3x3 at 7x7: 52.7 ->
# 35.0 µs; pointwise 40 -> 120 at 28x28: 29.0 -> 20.9 µs).
TUNING_CONFIGS = {
    "16-bit": (
        Config(128, 64, 64, 4, 4),
        Config(64, 64, 64, 4, 4),
        Config(128, 64, 32, 4, 5),
        Config(128, 128, 32, 8, 4),
        Config(128, 128, 64, 8, 3),
        Config(256, 128, 64, 8, 3),
        Config(64, 64, 128, 4, 3),
        Config(128, 64, 16, 4, 4),
        Config(128, 128, 64, 8, 2),  # (session 18: short reductions)
    ),
    "fp32": (
        Config(64, 64, 64, 4, 3),
        Config(64, 64, 32, 4, 4),
        Config(64, 128, 32, 4, 4),
        Config(128, 128, 32, 8, 3),
        Config(128, 64, 16, 4, 4),
    ),
    # Under the interpreter one alternative, so the tuning itself is exercised on CPU.
    "interpreter": (Config(32, 16, 16, 4, 1),),
}


def tuning_configs(dtype, *launch_args) -> list[tuple]:
    """The forward tile configurations benchmark mode times for a call (``launch_args`` as
    :func:`launch_config` takes them after the dtype): ``()`` first (the heuristic's, which
    also decides when the others fail), then every listed configuration that differs from
    it. Only tensor-core dtypes have tiles to tune."""
    if dtype not in DOT_DTYPES:
        return [()]
    heuristic = launch_config(dtype, *launch_args)
    family = "interpreter" if INTERPRETER else ("fp32" if dtype == torch.float32 else "16-bit")
    candidates = dict.fromkeys(tf32x3_step(c, dtype) for c in TUNING_CONFIGS[family])
    return [(), *(tuple(c) for c in candidates if c != heuristic)]


# ---------------------------------------------------------------------------------------------
# 1x1 layers as TMA GEMMs
# ---------------------------------------------------------------------------------------------

#: Multiprocessors the persistent TMA GEMM assumes under the interpreter: a few, so that its
#: programs walk several tiles there too.
INTERPRETER_TMA_PROGRAMS = 3
needs_aligned(pointwise_tma_kernel, "src", "w", "dst")


def _has_tma(device: torch.device) -> bool:
    """Whether ``device`` loads by TMA with the shared memory ``pointwise_tma_config``'s tiles
    take (Hopper and data-centre Blackwell, capability 9.x and 10.x: up to 208 KB a program;
    12.x has about 100 KB) and this Triton's host-side descriptors are the ones launch plans
    handle; under the interpreter, the latter alone (it runs the kernel's logic on the CPU).
    (``INTERPRETER`` read on each call: tests and the offline compile check set it aside.)"""
    if INTERPRETER:
        return takes_descriptors()
    return _gpu_has_tma(torch.device(device))


@functools.cache
def _gpu_has_tma(device: torch.device) -> bool:
    if device.type != "cuda" or not takes_descriptors():
        return False
    return torch.cuda.get_device_capability(device)[0] in (9, 10)


class TmaConfig(NamedTuple):
    """Tiles of ``pointwise_tma_kernel``, and whether its programs are persistent (``per_sm``
    a multiprocessor, each walking tiles) or one per tile."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    persistent: bool
    per_sm: int = 1

    def __str__(self) -> str:
        m, n, k, w, s, persistent, per_sm = self
        shared = f", {per_sm} a multiprocessor" if persistent and per_sm > 1 else ""
        return f"{m}x{n}x{k} w{w} s{s}{' persistent' if persistent else ''}{shared}"


def pointwise_tma_config(dtype, rows, src_channels, dst_channels, geometry: Geometry, groups,
                         device) -> TmaConfig | None:  # fmt: skip
    """The tiles of ``pointwise_tma_kernel`` for a convolution (or its input gradient: source
    and destination channels swapped) of these shapes, or None where the kernel does not take
    it: 16-bit (or fp32 with TF32 allowed, ``TMA_TF32``; its input gradient reads a
    transposed copy of the weight, :func:`_launch_pointwise_tma`), a 1x1 window at stride 1
    unpadded, one group, channel counts that are multiples of 8 (TMA's 16-byte row strides),
    at least 32 source and 64 destination channels (below that ``conv_igemm_kernel``'s
    narrower tiles were as fast or faster). fp32 tiles take half the channels a step (the
    same 128-byte rows) and at most 128 rows.

    Fitted to benchmarks/probe_tma_pointwise.py (H200, bf16, ResNet-50's and MobileNetV3's
    1x1 layers at batch 32, 12 tile configurations, forward and input gradient; session 20):
    64 destination channels take 128x64 tiles; 256x128, then 128x128, tiles where they make a
    wave; else one program per 64x128 tile for reductions of 8 or more steps, per 128x64
    tile below. Over the 23 layers this rule's tiles ran 1.16x (forward) and 1.08x (input
    gradient) the pointer-load kernel's speed by kernel time, where the best tile of each
    layer would give 1.20x and 1.10x; ResNet-50's 64 -> 256 at 56x56 20.2 µs against 32.6
    (cuDNN 23.3), 96 -> 384 at 56x56 32.2 against 50.6 (cuDNN 32.4)."""
    tf32 = TMA_TF32 and dtype == torch.float32 and dot_precision(dtype) == "tf32"
    if (
        (dtype not in (torch.float16, torch.bfloat16) and not tf32)
        or groups != 1
        or any(k != 1 for k in geometry.kernel)
        or any(s != 1 for s in geometry.stride)
        or any(geometry.pad_before)
        or any(geometry.pad_after)
        or src_channels < 32
        or dst_channels < 64
        or src_channels % 8
        or dst_channels % 8
        or rows >= 2**31
        or not _has_tma(device)
    ):
        return None
    if INTERPRETER:  # small tiles: several of them, and persistent programs, on small tests
        config = TmaConfig(32, 64, 32, 4, 1, True)
    elif not tf32 and _wide_pointwise(rows, src_channels, dst_channels, device):
        config = TmaConfig(128, 256, 64, 8, 3, True)
    else:
        config = _pointwise_tma_tiles(rows, src_channels, dst_channels, device)
    if tf32:  # 4-byte elements: the same rows of 128 bytes
        config = config._replace(block_k=config.block_k // 2)
        if config.block_m == 256:  # (an fp32 256x128 output tile alone takes 128 KB to store)
            config = config._replace(block_m=128)
    return config


#: Whether fp32 1x1 layers with TF32 allowed take ``pointwise_tma_kernel``, forward and input
#: gradient (session 22, H100: ResNet-50's 1x1 at 56x56 forward 60.3 -> 51.3 µs, cuDNN 51.5;
#: 96 -> 384 at 56x56 backward 205.2 -> 184.3).
TMA_TF32 = True


#: Least share of a wave of 128 x 256 tiles that :func:`_wide_pointwise` takes them at.
WIDE_POINTWISE_MIN_WAVE = 0.7


def _wide_pointwise(rows: int, src_channels: int, dst_channels: int, device) -> bool:
    """Whether a 16-bit 1x1 layer (or its input gradient) takes 128-row by 256-channel tiles,
    persistent: destination channels a multiple of 256, at least 128 source channels, and
    tiles filling at least ``WIDE_POINTWISE_MIN_WAVE`` of a wave.

    Measured (session 38, H200, benchmarks/probe_tma_pointwise.py --batch 128, ResNet-50's
    1x1 layers at 28², 14² and 7², kernel µs, forward / input gradient): 128 x 256 tiles the
    best or within 1 % of it on all of them (2048 -> 512 at 7² 23.6 / 22.9 against the
    previous rule's 34.2 / 29.6, cuDNN's forward 19.6; 512 -> 2048 at 7² 22.8 / 23.7 against
    29.4 / 33.8; 1024 -> 256 at 14² 30.7 / 30.7 against 31.8 / 30.9), the previous rule's
    128 x 128 and 256 x 128 tiles making 1.5 waves there; 64 source channels (one step) keep
    128 x 128 (ResNet-50's 64 -> 256 at 56²: 75.1 against 80.4)."""
    return (
        dst_channels % 256 == 0
        and src_channels >= 128
        and cdiv(rows, 128) * (dst_channels // 256)
        >= WIDE_POINTWISE_MIN_WAVE * multiprocessor_count(device)
    )


def _pointwise_tma_tiles(rows: int, src_channels: int, dst_channels: int, device) -> TmaConfig:
    """``pointwise_tma_config``'s tiles for 16-bit data (session 20's fit, its docstring)."""
    if dst_channels <= 64:
        return TmaConfig(128, 64, 64, 4, 4, True)
    sms = multiprocessor_count(device)
    if cdiv(rows, 256) * cdiv(dst_channels, 128) >= sms:
        return TmaConfig(256, 128, 64, 8, 3, True)
    if cdiv(rows, 128) * cdiv(dst_channels, 128) >= sms:
        return TmaConfig(128, 128, 64, 8, 3, True)
    if cdiv(src_channels, 64) >= 8:
        return TmaConfig(64, 128, 64, 4, 4, False)
    return TmaConfig(128, 64, 64, 4, 3, False)


def _tma_programs(config: TmaConfig, tiles: int, device) -> int:
    """Programs of a ``pointwise_tma_kernel`` launch: :func:`_persistent_programs` for
    persistent tiles (``config.per_sm`` a multiprocessor); else one per tile."""
    return _persistent_programs(tiles, device, config.per_sm) if config.persistent else tiles


def _persistent_programs(tiles: int, device, per_sm: int = 1) -> int:
    """Programs of a persistent TMA launch: ``per_sm`` per multiprocessor (at most), each
    walking tiles (under the interpreter, ``INTERPRETER_TMA_PROGRAMS``)."""
    sms = INTERPRETER_TMA_PROGRAMS if INTERPRETER else multiprocessor_count(device)
    return min(tiles, sms * per_sm)


def _tma_rows(t: torch.Tensor) -> bool:
    """Whether ``t`` is a dense channels-last tensor with a 16-byte aligned address: rows of
    channels a TMA descriptor reads as one ``[positions, channels]`` matrix."""
    return (
        t.stride(1) == 1
        and _positions_flat(t)
        and _strides3(t)[-1] == t.shape[1]
        and t.data_ptr() % 16 == 0
    )


def _launch_pointwise_tma(src, weight, bias, dst, transposed: bool, config: TmaConfig) -> bool:
    """``dst`` = the 1x1 convolution of ``src`` (``transposed``: its input gradient) by
    ``pointwise_tma_kernel``; False, launching nothing, where the tensors' layouts or
    addresses do not suit TMA. (Not for a tracer's tensors: :func:`_launch_conv` keeps those
    on ``conv_igemm_kernel``.)"""
    c_dst = dst.shape[1]
    if not (_tma_rows(src) and _tma_rows(dst)):
        return False
    if transposed and src.dtype == torch.float32:
        # TF32 products take K-major operands only, and the input gradient's weight tile runs
        # along its destination channels: it reads the weight with its output channels
        # innermost instead (a copy, as conv_igemm_kernel's TF32 input gradient does), as a
        # forward's (in, out) matrix
        weight = _innermost(weight, 0).flatten(1).t()
        transposed = False
    if weight.stride(1) != 1 or weight.stride(0) != weight.shape[1] or weight.data_ptr() % 16:
        return False
    rows = dst.numel() // c_dst
    w_box = [config.block_k, config.block_n] if transposed else [config.block_n, config.block_k]
    w = TensorDescriptor(weight, list(weight.shape[:2]), [weight.shape[1], 1], w_box)
    out = TensorDescriptor(dst, [rows, c_dst], [c_dst, 1], [config.block_m, config.block_n])
    _launch_tma_gemm(src, w, bias, out, rows, c_dst, config, transposed)
    return True


def _launch_tma_gemm(
    src, w, bias, dst, rows: int, c_dst: int, config: TmaConfig, transposed: bool,
    scatter: tuple = (), box_w: int = 0,
):  # fmt: skip
    """``pointwise_tma_kernel`` on ``src``'s ``[rows, channels]`` matrix (dense channels-last),
    the weight descriptor ``w`` and ``dst`` (a descriptor; with ``scatter``, the kernel's
    ``SCATTER`` sizes and strides, a pointer or, ``box_w`` set, a ``TAP_BOX`` descriptor)."""
    c_src = src.shape[1]
    tiles = cdiv(rows, config.block_m) * cdiv(c_dst, config.block_n)
    launch(
        pointwise_tma_kernel,
        (_tma_programs(config, tiles, src.device),),
        TensorDescriptor(src, [rows, c_src], [c_src, 1], [config.block_m, config.block_k]),
        w,
        bias if bias is not None else src,
        dst,
        rows,
        c_src,
        c_dst,
        *(scatter or (1,) * 11),
        TRANSPOSED=transposed,
        HAS_BIAS=bias is not None,
        DOT_DTYPE=dot_dtype(src.dtype),
        DOT_PRECISION=dot_precision(src.dtype),
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        GROUP_M=8,
        SCATTER=bool(scatter),
        TAP_BOX=bool(box_w),
        BOX_W=box_w,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )


#: Tiles ``_launch_tap_gemm`` takes instead of its rule's (a ``TmaConfig``; for probes, set
#: through ``bench.overridden``: launch plans do not key on it).
TAP_GEMM_TILES = None
#: Whether the tap GEMM stores by TMA where its row tiles are boxes (False: pointer stores;
#: set as ``TAP_GEMM_TILES`` is). Measured (session 24, H100, bf16, kernel µs, TMA against
#: pointer stores): conv_transpose3d 2x2x2 18.2 against 37.7, UNet's 2x2 up 9.5 against 19.3.
TAP_BOX = True


def tap_gemm_config(dtype, batch: int, src_channels: int, dst_channels: int,
                    geometry: Geometry, groups: int, device) -> TmaConfig | None:  # fmt: skip
    """The tiles of the tap GEMM (:func:`_launch_tap_gemm`) for the input gradient of a
    convolution of these shapes (a transposed convolution: ``geometry.output`` is its input,
    ``geometry.input`` its output), or None where the GEMM does not take it: the kernel must
    equal a stride above 1, unpadded and undilated, in one group, the output exactly
    ``stride`` times the input (no output padding), 16-bit, channel counts multiples of 8
    (16-byte rows), under 2**31 elements, on a GPU with TMA. (A stride of 1, a 1x1 kernel,
    is the plain GEMM of :func:`_launch_pointwise_tma`.) ``BLOCK_N`` divides a run of the
    width taps' columns."""
    kernel, stride, pad, dil = _window3(geometry)
    src_spatial = _spatial3(geometry.output, 1)
    out_spatial = _spatial3(geometry.input, 1)
    taps = math.prod(kernel)
    if (
        groups != 1
        or kernel != stride
        or taps == 1
        or any(pad)
        or any(d != 1 for d in dil)
        or out_spatial != tuple(n * s for n, s in zip(src_spatial, stride, strict=True))
        or dtype not in (torch.float16, torch.bfloat16)
        or src_channels % 8
        or dst_channels % 8
        or batch * math.prod(out_spatial) * dst_channels >= 2**31
        or not _has_tma(device)
    ):
        return None
    rows = batch * math.prod(src_spatial)
    if TAP_GEMM_TILES is not None:
        config = TAP_GEMM_TILES
    elif INTERPRETER:
        config = TmaConfig(32, 32, 32, 4, 1, True)
    else:
        config = _pointwise_tma_tiles(rows, src_channels, taps * dst_channels, device)
    run = stride[2] * dst_channels  # consecutive columns that are consecutive addresses
    block_n = next((n for n in (config.block_n, 64, 32, 16) if run % n == 0), None)
    return None if block_n is None else config._replace(block_n=block_n)


def _launch_tap_gemm(src, weight, bias, dst, geometry: Geometry, groups: int) -> bool:
    """``dst`` = the input gradient of a convolution of ``src`` (a transposed convolution) as
    one ``pointwise_tma_kernel`` GEMM whose epilogue scatters each tap's columns to its
    output positions (``SCATTER``): where the kernel equals the stride on every axis,
    unpadded and undilated, in one group, and ``dst`` is exactly ``stride`` times ``src`` (no
    output padding), each output position takes exactly one tap of one input position, so
    the whole convolution is ``src``'s rows times the ``[C_src, taps * C_dst]`` weight. False,
    launching nothing, where that does not hold (:func:`tap_gemm_config`) or the tensors do
    not suit TMA: dense channels-last ``src`` and ``dst``, 16-byte aligned.

    What it replaces: ``conv_igemm_kernel``'s stride phases, one program per phase and row
    tile, each loading the same input tile again for a reduction of a few steps
    (conv_transpose3d 2x2x2 at 0.64x cuDNN's forward, session 23)."""
    c_src, c_phase = src.shape[1], dst.shape[1]
    config = tap_gemm_config(
        src.dtype, src.shape[0], c_src, c_phase, geometry, groups, src.device
    )  # fmt: skip
    if config is None or not (_tma_rows(src) and _tma_rows(dst)):
        return False
    _, stride, _, _ = _window3(geometry)
    src_spatial = _spatial3(src.shape[2:], 1)
    out_spatial = _spatial3(dst.shape[2:], 1)
    taps = math.prod(stride)
    rows = src.numel() // c_src
    run = stride[2] * c_phase
    block_n = config.block_n
    # the weight as [C_src, taps * C_dst], the destination channels innermost (a view of a
    # weight laid out so, as a channels-last one is; else of a copy)
    order = (0, *range(2, weight.dim()), 1)
    if not weight.permute(order).is_contiguous():
        weight = _relaid(weight, order)
    matrix = weight.permute(order).view(c_src, -1)
    if matrix.data_ptr() % 16:
        return False
    block_m, block_k = config.block_m, config.block_k
    height, width = src_spatial[1:]
    # dst's strides (dense channels-last, as checked) from its sizes: those of its size-1
    # axes are arbitrary, and flattening (n, d) needs the batch stride to be depth's times D
    s_h = out_spatial[2] * c_phase
    s_d = out_spatial[1] * s_h
    row_sd, row_sh, row_sw = stride[0] * s_d, stride[1] * s_h, run
    # TMA stores where each row tile is a box of whole input rows: the output viewed as
    # [n*OD + od, h, height tap, w, run] (od = d*PD + depth tap)
    box_w = _tap_box_width(block_m, height, width) if TAP_BOX else 0
    out = dst
    if box_w:
        shape = [src.shape[0] * out_spatial[0], height, stride[1], width, run]
        box = [1, block_m // box_w, 1, box_w, block_n]
        out = TensorDescriptor(
            dst.movedim(1, -1).view(-1), shape, [s_d, row_sh, s_h, row_sw, 1], box
        )
    w = TensorDescriptor(matrix, [c_src, taps * c_phase], [taps * c_phase, 1], [block_k, block_n])
    scatter = (width, height, row_sd, row_sh, row_sw, c_phase, *stride[::-1], s_d, s_h)
    _launch_tma_gemm(src, w, bias, out, rows, taps * c_phase, config, True, scatter, box_w)
    return True


def _tap_box_width(block_m: int, height: int, width: int) -> int:
    """Input positions along the width of a ``block_m``-row tile of the tap GEMM stored as a
    TMA box (``pointwise_tma_kernel``'s ``TAP_BOX``): ``block_m`` where the width is a
    multiple of it (a tile within one row), the width where ``block_m`` is a multiple of it
    and the rows a tile covers divide the height (a tile within one image plane); else 0
    (pointer stores)."""
    if width % block_m == 0:
        return block_m
    if block_m % width == 0 and height % (block_m // width) == 0:
        return width
    return 0


# ---------------------------------------------------------------------------------------------
# Stride-1 windows as TMA GEMMs over 4-D boxes
# ---------------------------------------------------------------------------------------------

needs_aligned(window_tma_kernel, "src", "w", "dst")


class WindowTmaConfig(NamedTuple):
    """Tiles of ``window_tma_kernel``: a ``th x tw`` rectangle of destination positions by
    ``block_n`` channels, ``block_k`` source channels a step; its programs are persistent,
    ``per_sm`` of them a multiprocessor (two where a tile's warps and shared memory let two
    share one: each hides the other's pipeline bubbles)."""

    th: int
    tw: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    per_sm: int = 1

    def __str__(self) -> str:
        th, tw, n, k, w, s, per_sm = self
        shared = f", {per_sm} a multiprocessor" if per_sm > 1 else ""
        return f"{th}x{tw} positions x {n} channels x {k} w{w} s{s} persistent{shared}"


#: Most positions (as a multiple of the destination's) the rectangles of
#: ``window_tma_kernel`` may cover where they overhang the destination's edges: 1.31 for
#: 14 x 14 planes in 8 x 16 rectangles, measured faster than the pointer-load kernel there
#: (H200, session 36); 7 x 7 planes (2.6 in 128-position rectangles) lost to it.
WINDOW_TMA_MAX_WASTE = 1.35
#: Most taps a window of ``window_tma_kernel`` has: each tap's boxes are read again from L2,
#: where the pointer-load kernel's loop does better on long windows. Measured (session 40,
#: H200, bf16, ``probe_passes.py``): the 3x3x3 64 -> 64 layer at 16 x 56² (27 taps),
#: forward 245.4 µs against the pointer kernel's 215.4 and input gradient 244.4 against
#: 218.5 (cuDNN 215.9 / 203.4); the 9-tap 3x3 layers won by up to 1.7x (session 36).
WINDOW_TMA_MAX_TAPS = 9
#: Most taps of a window whose destination channels past 64 are not a multiple of 64 (144:
#: three 64-channel tiles, one a quarter full, each reading the window's boxes again) that
#: ``window_tma_kernel`` still takes, in a 16-bit input gradient (its forwards into such
#: widths and the TF32 path are not measured); wider windows keep the pointer kernel
#: (``conv_igemm_kernel``, 144 channels in its second accumulator, 128 + 16). Measured
#: (session 41, H200, bf16, ``probe_passes.py``, batch 8 at 16 x 56²): r2plus1d's 3x1x1
#: 144-channel input gradient (3 taps) 139.9 -> 110.1 µs on the window kernel (cuDNN 89.9);
#: its 1x3x3 64 -> 144 forward (9 taps) 178.3 -> 306.8 (cuDNN 172.5).
WINDOW_TMA_PADDED_TILE_MAX_TAPS = 3


def _rectangle(positions: int, height: int, width: int) -> tuple[int, int, float]:
    """``(th, tw, waste)``: the ``th x tw = positions`` rectangle (``tw`` a power of two from
    8) covering a ``height x width`` plane with the fewest positions, the wider on ties, and
    the positions it covers over the plane's."""
    best = None
    tw = 8
    while tw <= min(positions, 256):
        th = positions // tw
        if th <= 256:
            waste = cdiv(height, th) * th * cdiv(width, tw) * tw / (height * width)
            if best is None or waste <= best[2] + 1e-9:
                best = (th, tw, waste)
        tw *= 2
    return best


def window_tma_config(dtype, batch: int, src_channels: int, dst_channels: int,
                      geometry: Geometry, groups: int, transposed: bool,
                      device) -> WindowTmaConfig | None:  # fmt: skip
    """The tiles of ``window_tma_kernel`` for a convolution (``transposed``: its input
    gradient, source and destination channels swapped), or None where it does not take it:
    16-bit (or fp32 with TF32 allowed, ``WINDOW_TMA_TF32``: 32-channel steps, 128-position
    rectangles, 128-channel tiles under ``WINDOW_TMA_TF32_MAX_WAVES``), one group,
    (a forward's unpadded strided 1x1 layer too, ``strided_pointwise``: one tap over x's
    strided view) stride 1 on every axis, more than one tap (a 1x1 layer is
    ``pointwise_tma_kernel``'s) and at most ``WINDOW_TMA_MAX_TAPS``, source channels a
    multiple of 32 (a weight box never straddles two taps), destination channels a multiple
    of 8 (TMA's 16-byte strides), the batch times the destination plane times the wider
    channel count under 2**31 (TMA itself takes 64-bit strides; a margin for the kernel's
    int32 tile arithmetic), at most 64 destination channels or a multiple of 64 (widths such
    as 144 keep ``conv_igemm_kernel``'s second accumulator instead of a padded column tile),
    except the 16-bit input gradients of windows of 2 to ``WINDOW_TMA_PADDED_TILE_MAX_TAPS``
    taps (forwards into such widths: not measured), destination planes the rectangles cover
    with at most ``WINDOW_TMA_MAX_WASTE`` of overhang, on a GPU with TMA.

    Fitted to benchmarks/probe_tma_window.py (H200, bf16, batch 128 and 32 ResNet-50 3x3
    layers at 56/28/14/7, UNet, dilation 2 and 12; session 36): 64 destination channels (and
    any count that is not a multiple of 128) take 128-position rectangles by 64 channels on 4
    warps, 4 stages; multiples of 128 take 128 channels on 8
    warps, in 256-position rectangles (3 stages) where those number at least half a wave,
    else 128 (4 stages); persistent programs; the rectangle's width the power of two that
    wastes least. Forward and input gradient ran 0.98-1.73x cuDNN there, against 0.62-0.91x
    for the pointer-load kernel, except at 56 x 56 with 64 channels (a tie) and 7 x 7
    (excluded). The 4-warp 64-channel tiles run two programs a multiprocessor, which took
    ResNet-50's 64@56 (batch 128) from 87.9 / 86.9 to 82.7 / 79.8 µs and UNet's 64@256 from
    96.8 / 97.8 to 90.5 / 90.9 (forward / input gradient; session 39,
    ``probe_tma_window.py --per-sm``); two programs of 8-warp 128-channel tiles were 2-7 %
    slower. In fp32 the 64-channel tiles take 3 stages to fit two programs (3-4 % faster than
    one program of 4 stages) and the 128-channel tiles 4 stages (ResNet-50's 128@28 at
    batch 32: 33.0 / 36.0 -> 30.6 / 33.6 µs, cuDNN TF32 30.7 / 34.2)."""
    spatial = geometry.input if transposed else geometry.output
    depth, height, width = _spatial3(spatial, 1)
    tf32 = WINDOW_TMA_TF32 and dtype == torch.float32 and dot_precision(dtype) == "tf32"
    positions = batch * max(math.prod(geometry.input), math.prod(geometry.output))
    strided = strided_pointwise(geometry, transposed)
    if (
        (dtype not in (torch.float16, torch.bfloat16) and not tf32)
        or groups != 1
        or (any(s != 1 for s in geometry.stride) and not strided)
        or (geometry.kernel_numel == 1 and not strided)
        or geometry.kernel_numel > WINDOW_TMA_MAX_TAPS
        or src_channels < 32
        or src_channels % 32
        or dst_channels % 8
        or (
            dst_channels > 64
            and dst_channels % 64
            and (geometry.kernel_numel > WINDOW_TMA_PADDED_TILE_MAX_TAPS or tf32 or not transposed)
        )
        or positions * max(src_channels, dst_channels) >= 2**31
        or not _has_tma(device)
    ):
        return None
    if INTERPRETER:  # small tiles, several of them (the persistent loop walks a few), and no
        # waste limit: the tests' small odd planes cover the overhanging rectangles
        th, tw, _ = _rectangle(32, height, width)
        return WindowTmaConfig(th, tw, 32, 32, 4, 1)
    if tf32:  # 4-byte elements: 32-channel steps (128-byte rows), 128-position rectangles
        # (a 256 x 128 fp32 output tile alone would take 128 KB to store)
        th, tw, waste = _rectangle(128, height, width)
        if dst_channels % 128:  # (3 stages: two programs share a multiprocessor)
            config = WindowTmaConfig(th, tw, 64, 32, 4, 3, per_sm=2)
        else:
            config = WindowTmaConfig(th, tw, 128, 32, 8, 4)
            tiles = batch * depth * cdiv(height, th) * cdiv(width, tw) * cdiv(dst_channels, 128)
            if tiles >= WINDOW_TMA_TF32_MAX_WAVES * multiprocessor_count(device):
                return None
        return config if waste <= WINDOW_TMA_MAX_WASTE else None
    block_k = 64 if src_channels % 64 == 0 else 32
    if dst_channels % 128:  # (64 or fewer channels, or an odd number of 64s: 192, 320)
        th, tw, waste = _rectangle(128, height, width)
        config = WindowTmaConfig(th, tw, 64, block_k, 4, 4, per_sm=2)
    else:
        th, tw, waste = _rectangle(256, height, width)
        tiles = batch * depth * cdiv(height, th) * cdiv(width, tw) * cdiv(dst_channels, 128)
        config = WindowTmaConfig(th, tw, 128, block_k, 8, 3)
        if 2 * tiles < multiprocessor_count(device):
            th, tw, waste = _rectangle(128, height, width)
            config = WindowTmaConfig(th, tw, 128, block_k, 8, 4)
    return config if waste <= WINDOW_TMA_MAX_WASTE else None


#: Whether unpadded strided 1x1 layers take the TMA kernels (:func:`strided_pointwise`).
#: Measured on an H200 (benchmarks/probe_tma_window.py --strided, session 38, ResNet-50's
#: downsampling shortcuts at batch 128, kernel time against cuDNN): forward 0.57x -> 0.80x,
#: 0.71x -> 0.84x, 0.83x -> 0.83x; its GPU tests passed (session 38).
STRIDED_POINTWISE_TMA = True


def strided_pointwise(geometry: Geometry, transposed: bool = False) -> bool:
    """Whether a convolution is an unpadded 1x1 layer with a stride above 1 (ResNet's
    downsampling shortcuts), whose forward ``window_tma_kernel`` computes from a descriptor
    of the strided view ``x[..., ::s, ::s]`` (its strides times the stride: TMA takes any
    16-byte multiple), one tap; and ``wgrad_tma_kernel`` its weight gradient. Not its input
    gradient (a scatter). (Unless ``STRIDED_POINTWISE_TMA`` is off.)"""
    return (
        STRIDED_POINTWISE_TMA
        and not transposed
        and geometry.kernel_numel == 1
        and any(s != 1 for s in geometry.stride)
        and not any(geometry.pad_before)
        and not any(geometry.pad_after)
    )


#: Whether fp32 windows with TF32 allowed (PyTorch's default) take ``window_tma_kernel``,
#: forward and input gradient (the latter reading a ``[C_in, taps, C_out]`` weight copy).
WINDOW_TMA_TF32 = True
#: Most waves of 128-channel fp32 tiles it takes. Measured (session 37, H200,
#: benchmarks/probe_tma_window.py --library --dtype float32, 11 layers, forward and input
#: gradient against the pointer-load kernel): 64-channel tiles won everywhere (ResNet-50's
#: 64@56 at batch 128 forward 178.0 -> 165.2 µs), 128-channel tiles under two waves too
#: (UNet's 1024@16 forward 203.2 -> 143.2, ResNet-50's 256@14 at batch 32 39.0 -> 29.2), and
#: lost at 512 tiles and more (ResNet-50's 256@14 at batch 128 109.0 -> 127.4; cuDNN 76.6).
#: (Those 128-channel tiles ran 3 stages; session 39 gave them 4, 7 % faster under two
#: waves; the limit was not measured again at 4.)
WINDOW_TMA_TF32_MAX_WAVES = 2

#: Whether one-deep problems (1-D and 2-D) run ``window_tma_kernel`` on 4-D descriptors
#: (``FOUR_D``, the rank of session 36's probe kernel, whose 128-position tiles ran 20 %
#: faster than the library's 5-D ones: benchmarks/NOTES.md) rather than 5-D ones.
WINDOW_TMA_FOUR_D = True


def _five_d(t: torch.Tensor) -> tuple[list, list]:
    """``(shape, strides)`` of a dense channels-last ``t`` viewed as ``[N, D, H, W, C]``."""
    shape = [t.shape[0], *_spatial3(t.shape[2:], 1), t.shape[1]]
    return shape, list(dense_strides(shape, range(5)))


def _one_row(t: torch.Tensor) -> tuple[list, list]:
    """``(shape, strides)`` of a dense channels-last ``t`` viewed as one row of its positions,
    ``[1, 1, 1, positions, C]``."""
    shape = [1, 1, 1, t.numel() // t.shape[1], t.shape[1]]
    return shape, list(dense_strides(shape, range(5)))


def _strided_view(shape: list, strides: list, out_shape: list, geometry: Geometry):
    """``(shape, strides)`` of the ``[N, D, H, W, C]`` view of a dense channels-last tensor
    that an unpadded strided 1x1 layer reads: ``x[:, ::sd, ::sh, ::sw]``, as large as the
    output (``out_shape``)."""
    stride = _spatial3(geometry.stride, 1)
    view = [*shape[:1], *out_shape[1:4], shape[4]]
    return view, [strides[0], *(t * s for t, s in zip(strides[1:4], stride, strict=True)), 1]


def _launch_window_tma(src, weight, bias, dst, geometry: Geometry, transposed: bool,
                       config: WindowTmaConfig) -> bool:  # fmt: skip
    """``dst`` = the convolution of ``src`` (``transposed``: its input gradient) by
    ``window_tma_kernel``; False, launching nothing, where the tensors' layouts or addresses
    do not suit TMA (dense channels-last, 16-byte aligned). (Not for a tracer's tensors:
    :func:`_launch_conv` keeps those on ``conv_igemm_kernel``.)"""
    if not (_tma_rows(src) and _tma_rows(dst)):
        return False
    th, tw, block_n, block_k, num_warps, num_stages, per_sm = config
    c_src, c_dst = src.shape[1], dst.shape[1]
    kernel, _, pad, dil = _window3(geometry)
    taps = math.prod(kernel)
    # the weight with its input channels innermost, [C_out, taps, C_in] (a channels-last
    # weight as it is; else a copy); for fp32's input gradient with its output channels
    # innermost, [C_in, taps, C_out] rows read as a forward's (TF32 tiles must be K-major)
    w_rows = not transposed or src.dtype == torch.float32
    if transposed and w_rows:
        order = (1, *range(2, weight.dim()), 0)
    else:
        order = (0, *range(2, weight.dim()), 1)
    if not weight.permute(order).is_contiguous():
        weight = _relaid(weight, order)
    if weight.data_ptr() % 16:
        return False
    c_out, c_in = weight.shape[:2]
    if transposed and w_rows:
        w = TensorDescriptor(weight, [c_in, taps * c_out], [taps * c_out, 1], [block_n, block_k])
    elif transposed:
        w = TensorDescriptor(weight, [taps, c_out, c_in], [c_in, taps * c_in, 1],
                             [1, block_k, block_n])  # fmt: skip
    else:
        w = TensorDescriptor(weight, [c_out, taps * c_in], [taps * c_in, 1], [block_n, block_k])
    src_shape, src_strides = _five_d(src)
    dst_shape, dst_strides = _five_d(dst)
    n, depth, height, width = dst_shape[:4]
    if strided_pointwise(geometry, transposed):  # the view x[..., ::s, ::s]: dst's positions
        src_shape, src_strides = _strided_view(src_shape, src_strides, dst_shape, geometry)
    tiles = n * depth * cdiv(height, th) * cdiv(width, tw) * cdiv(c_dst, block_n)
    # a one-deep problem on 4-D descriptors (no depth axis: [N, H, W, C])
    # (only without depth taps or depth padding: with them a one-deep plane still reads
    # the padding, which a 4-D box has no axis for)
    four_d = WINDOW_TMA_FOUR_D and depth == src_shape[1] == 1 and kernel[0] == 1 and not pad[0]
    if four_d:
        src_shape, src_strides, dst_shape, dst_strides = (
            [v[0], *v[2:]] for v in (src_shape, src_strides, dst_shape, dst_strides)
        )
    lead = [1] if four_d else [1, 1]
    launch(
        window_tma_kernel,
        (_persistent_programs(tiles, src.device, per_sm),),
        TensorDescriptor(src, src_shape, src_strides, [*lead, th, tw, block_k]),
        w,
        bias if bias is not None else src,
        TensorDescriptor(dst, dst_shape, dst_strides, [*lead, th, tw, block_n]),
        n,
        depth,
        height,
        width,
        c_src,
        c_dst,
        *kernel[1:],
        taps,
        *pad,
        *dil,
        TRANSPOSED=transposed,
        HAS_BIAS=bias is not None,
        DOT_DTYPE=dot_dtype(src.dtype),
        TH=th,
        TW=tw,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        GROUP_M=8,
        FOUR_D=four_d,
        W_ROWS=w_rows,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return True


# ---------------------------------------------------------------------------------------------
# Weight gradients of stride-1 windows from TMA row boxes
# ---------------------------------------------------------------------------------------------

needs_aligned(wgrad_tma_kernel, "x", "dy", "out")


class WgradTmaConfig(NamedTuple):
    """Tiles of ``wgrad_tma_kernel``: ``block_m`` output by ``block_n`` input channels of one
    tap, reduced over steps of ``rows`` row boxes of ``tw`` positions."""

    tw: int
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    rows: int = 1
    flat_dy: bool = False  # dy's rows of a step as one flat box (rows exactly ``tw`` wide)

    def __str__(self) -> str:
        tw, m, n, w, s, rows, flat = self
        step = f"{rows} rows of {tw} positions" if rows > 1 else f"rows of {tw} positions"
        return f"{m}x{n} channels x {step}{' (flat dy)' if flat else ''} w{w} s{s}"


#: Output rows at least this wide take ``wgrad_tma_kernel`` (in boxes of 32 or 64 positions);
#: narrower ones only in strided 1x1 layers, and where their boxes (16 positions and up)
#: overhang them by at most ``WGRAD_TMA_MAX_OVERHANG``. Measured (session 38, H200, batch
#: 128, kernel µs): ResNet-50's 28 -> 14 shortcut 106.0 -> 70.6 (16-position boxes, two rows a
#: step), but its 3x3 256@14 77.2 against the pointer-load kernel's 66.6 (that kernel's loop
#: does well on those 9-tap layers, not on the strided 1x1 ones); 7-wide rows keep it too.
WGRAD_TMA_MIN_WIDTH = 28
WGRAD_TMA_MAX_OVERHANG = 1.15
#: Positions a step of ``wgrad_tma_kernel`` reduces over: narrow rows take several row boxes
#: a step (two of 32, four of 16), the rows' count halved while it overhangs the output's
#: height by more than ``WGRAD_TMA_MAX_ROW_OVERHANG``.
WGRAD_TMA_STEP_POSITIONS = 64
WGRAD_TMA_MAX_ROW_OVERHANG = 1.07
#: Whether a step of several rows exactly a box wide, with no row past the output's height,
#: reads dy as one flat box of the step's positions (consecutive in memory) and x as one box
#: of its rows (``FLAT_DY``): one load and one dot a step instead of one a row. Compiled for
#: sm_90 (probe_tma_wgrad.py --sass): 106 SASS for 4 HGMMA at 32 x 2, both operands from
#: shared memory (x's box reshaped as the B operand stays there), against 154 for two
#: one-row boxes; and it lets 16-wide windows (UNet's 1024@16) take the kernel, four rows a
#: step.
WGRAD_TMA_FLAT_DY = True
#: The split rule's model (:func:`wgrad_tma_splits`): most splits of the rows (unless one
#: round of programs takes more), programs an SM runs at once (two of every configuration fit
#: its shared memory and registers), the steps a split costs beyond its own row boxes (the
#: pipeline's fill and the tile's store), and the time of a 128 x 128 x 64 step.
WGRAD_TMA_MAX_SPLITS = 32
WGRAD_TMA_PROGRAMS_PER_SM = 2
#: Most taps times partial-tile waste that take ``wgrad_tma_kernel`` (the waste: a side's
#: tiled channels over its own where it takes more than one tile, the last partly empty,
#: whose programs read the other operand once more), except one-deep windows without such
#: tiles. Measured (session 40, H200, bf16, ``probe_passes.py``, kernel µs, TMA against the
#: pointer kernel): at batch 8 channels_last_3d over 16 x 56², 3x3x3 64 -> 64 (27 taps) 362.6
#: against 196.5, (2+1)D's 1x3x3 64 -> 144 (9 taps x 256 / 144 = 16) 431.3 against 194.3, its
#: 3x1x1 144 -> 64 (3 x 1.78) 154.6 against 212.3; at batch 32 over 56², 3x3 64 -> 96 (9 x
#: 1.33) 49.4 against 39.9, 5x5 64 -> 64 (25 taps, one deep, no waste) 57.5 against 61.5,
#: 3x3 64 -> 64 25.0 against 25.0; ResNet-50's and UNet's 3x3 layers won by up to 1.7x
#: (session 38).
WGRAD_TMA_MAX_TAP_WORK = 10
WGRAD_TMA_FILL_STEPS = 8
WGRAD_TMA_STEP_US = 0.7


def wgrad_tma_config(dtype, batch: int, in_channels: int, out_channels: int,
                     geometry: Geometry, groups: int, device) -> WgradTmaConfig | None:  # fmt: skip
    """The tiles of ``wgrad_tma_kernel`` for a convolution's weight gradient, or None where it
    does not take it: 16-bit, one group, stride 1 on every axis (but unpadded strided 1x1
    layers, ``strided_pointwise``: x's strided view), at least 32 channels a side,
    multiples of 8 (TMA's 16-byte strides), sizes within the kernel's int32 arithmetic, on a
    GPU with TMA; windows of more than one tap with output rows at least
    ``WGRAD_TMA_MIN_WIDTH`` wide, unpadded strided 1x1 layers with rows that wide or their
    boxes overhanging them little (14 wide in 16), and unpadded 1x1 layers
    (``wgrad_tma_pointwise``: the positions as one flat row); taps times the tiles' channel
    waste at most ``WGRAD_TMA_MAX_TAP_WORK`` (one-deep windows without partial tiles: any
    taps). Rows narrower than ``WGRAD_TMA_STEP_POSITIONS`` take several boxes a step.

    Fitted to benchmarks/probe_tma_wgrad.py (H200, bf16, ResNet-50's and UNet's 3x3 layers
    and a dilation-2 one; session 36): rows of 64 positions (32 where the output is at most
    32 wide), 128 channels a side where it has 128 (8 warps, 3 stages with 128 x 128 tiles),
    else 64 (4 warps, 4 stages); the probe's best tiles ran 1.0-1.42x cuDNN's weight gradient
    on seven of its ten layers, against 0.56-1.19x for the pointer-load kernel."""
    depth, height, width = _spatial3(geometry.output, 1)
    positions = batch * max(math.prod(geometry.input), depth * height * width)
    pointwise = wgrad_tma_pointwise(geometry)
    strided = strided_pointwise(geometry)  # (x's strided view: rows as wide as dy's)
    if (
        dtype not in (torch.float16, torch.bfloat16)
        or groups != 1
        or (any(s != 1 for s in geometry.stride) and not strided)
        or (geometry.kernel_numel == 1 and not (pointwise or strided))
        or min(in_channels, out_channels) < 32
        or in_channels % 8
        or out_channels % 8
        or positions * max(in_channels, out_channels) >= 2**31
        or not _has_tma(device)
    ):
        return None

    # the GPU's channel tiles, whose waste the tap limit weighs (under the interpreter too,
    # so that its tests and ``explain`` decline what a GPU declines)
    block_m = 128 if out_channels >= 128 else clamped_power_of_2(out_channels, 32, 64)
    block_n = 128 if in_channels >= 128 else clamped_power_of_2(in_channels, 32, 64)
    waste = _tile_waste(out_channels, block_m) * _tile_waste(in_channels, block_n)
    one_deep = len(geometry.kernel) < 3 or geometry.kernel[0] == 1
    if geometry.kernel_numel * waste > WGRAD_TMA_MAX_TAP_WORK and (waste > 1 or not one_deep):
        return None

    def rows_fit(tw: int, rows: int) -> bool:  # (FLAT_DY: rows a box wide, none past dy's)
        return WGRAD_TMA_FLAT_DY and width == tw and height % rows == 0

    if INTERPRETER:  # small tiles, several of them, two rows a step (the tests' planes)
        tw = clamped_power_of_2(width, 8, 16)
        rows = 1 if pointwise else 2
        return WgradTmaConfig(tw, 32, 32, 4, 1, rows, rows > 1 and rows_fit(tw, rows))
    tw = 64 if pointwise else clamped_power_of_2(width, 16, 64)
    rows = 1 if pointwise else max(1, WGRAD_TMA_STEP_POSITIONS // tw)
    narrow = not pointwise and width < WGRAD_TMA_MIN_WIDTH
    if (
        narrow
        and not rows_fit(tw, rows)
        and (tw > WGRAD_TMA_MAX_OVERHANG * width or geometry.kernel_numel > 1)
    ):
        return None
    while rows > 1 and cdiv(height, rows) * rows > WGRAD_TMA_MAX_ROW_OVERHANG * height:
        rows //= 2
    flat = rows > 1 and rows_fit(tw, rows)
    if block_m == block_n == 128:
        return WgradTmaConfig(tw, 128, 128, 8, 3, rows, flat)
    return WgradTmaConfig(tw, block_m, block_n, 4, 4, rows, flat)


def _tile_waste(channels: int, block: int) -> float:
    """The channels a side's tiles cover over its own where it takes more than one tile
    (1 for one tile: the box's zero fill past them reads nothing)."""
    return 1.0 if channels <= block else cdiv(channels, block) * block / channels


def wgrad_tma_pointwise(geometry: Geometry) -> bool:
    """Whether a convolution is a 1x1 layer at stride 1 unpadded: its weight gradient is one
    GEMM ``dy^T . x`` over the positions, which ``wgrad_tma_kernel`` reads as one flat row
    (a ``[1, 1, 1, positions, C]`` view of the dense channels-last tensors), not image rows."""
    return (
        geometry.kernel_numel == 1
        and not any(geometry.pad_before)
        and not any(geometry.pad_after)
        and all(s == 1 for s in geometry.stride)
    )


def wgrad_tma_splits(steps: int, tiles: int, weight_numel: int, config: WgradTmaConfig,
                     device) -> int:  # fmt: skip
    """How many fixed parts ``wgrad_tma_kernel`` splits its ``steps`` into for ``tiles``
    output tiles: the count that minimises the modelled time, rounds x (steps a split +
    ``WGRAD_TMA_FILL_STEPS``) x a step's time (``WGRAD_TMA_STEP_US`` for a 64-position
    128 x 128 step, in proportion for other tiles and steps), a round being
    ``WGRAD_TMA_PROGRAMS_PER_SM`` programs on every multiprocessor, plus reading the fp32 partials back
    (``WGRAD_PARTIAL_US`` an element); at most ``WGRAD_TMA_MAX_SPLITS`` or one round, the
    partials bounded by ``WGRAD_PARTIAL_LIMIT`` (two splits under the interpreter, so their
    sum is tested).

    Measured (session 36, benchmarks/probe_tma_wgrad.py, H200): the probe's best splits
    filled two programs an SM (ResNet-50's 64@56 at batch 128: 29 splits of 9 tiles 77.4 µs,
    14 splits 129.0; 128@28 67.1 against 111.1); session 37's first rule, one program an SM
    and at most 16 splits, ran the layers at 0.55-1.19x cuDNN against the probe's 1.0-1.42x.
    The step times are session 37's (0.7 µs for 128 x 128 x 64 steps two an SM)."""
    slots = WGRAD_TMA_PROGRAMS_PER_SM * (
        INTERPRETER_TMA_PROGRAMS if INTERPRETER else multiprocessor_count(device)
    )
    limit = max(WGRAD_TMA_MAX_SPLITS, slots // tiles)
    limit = max(1, min(steps, limit, WGRAD_PARTIAL_LIMIT // weight_numel))
    if INTERPRETER:
        return min(2, limit)
    step_positions = config.tw * config.rows
    step_us = WGRAD_TMA_STEP_US * step_positions * config.block_m * config.block_n / (64 * 128**2)

    def cost(splits: int) -> float:
        rounds = cdiv(tiles * splits, slots)
        partials = splits * weight_numel * WGRAD_PARTIAL_US if splits > 1 else 0.0
        return rounds * (cdiv(steps, splits) + WGRAD_TMA_FILL_STEPS) * step_us + partials

    return min(range(1, limit + 1), key=cost)


def _wgrad_tma_ready(t: torch.Tensor) -> bool:
    """Whether :func:`_innermost` gives TMA rows of ``t`` (:func:`_tma_rows`): it is copied
    channels-last, or is already dense channels-last and aligned."""
    return t.stride(1) != 1 or _tma_rows(t)


def _wgrad_tma_work(batch: int, in_channels: int, out_channels: int, geometry: Geometry,
                    config: WgradTmaConfig) -> tuple[int, int]:  # fmt: skip
    """``(steps, output tiles)`` of a ``wgrad_tma_kernel`` launch (a step: ``config.rows``
    row boxes): the split count and the launcher's grid both come from them."""
    if wgrad_tma_pointwise(geometry):  # the positions as one row
        steps = cdiv(batch * geometry.output_numel, config.tw)
    else:
        depth, height, width = _spatial3(geometry.output, 1)
        steps = batch * depth * cdiv(height, config.rows) * cdiv(width, config.tw)
    tiles = cdiv(out_channels, config.block_m) * cdiv(in_channels, config.block_n)
    return steps, tiles * geometry.kernel_numel


@launch_plan
def _launch_wgrad_tma(grad_out, x, parts, geometry: Geometry, config: WgradTmaConfig):
    """``parts`` = dW as ``[splits, C_out, C_in, *kernel]``, channels-last in each split (dW
    itself with one split, else the fp32 partials), by ``wgrad_tma_kernel``, dy and x read
    channels-last (copied so where they are not)."""
    grad_out, x = _innermost(grad_out, 1), _innermost(x, 1)
    tw, block_m, block_n, num_warps, num_stages, rows, flat_dy = config
    splits, c_out, c_in = parts.shape[:3]
    kernel, _, pad, dil = _window3(geometry)
    taps = math.prod(kernel)
    dy_shape, dy_strides = _five_d(grad_out)
    x_shape, x_strides = _five_d(x)
    if strided_pointwise(geometry):  # x's view x[..., ::s, ::s], as large as dy
        x_shape, x_strides = _strided_view(x_shape, x_strides, dy_shape, geometry)
    if wgrad_tma_pointwise(geometry):  # the positions as one row
        (dy_shape, dy_strides), (x_shape, x_strides) = _one_row(grad_out), _one_row(x)
    sizes = dy_shape[:4]  # (the kernel's N, D, H, W: dy's)
    dy_box, x_box = [1, 1, 1, tw, block_m], [1, 1, 1, tw, block_n]
    if flat_dy:  # a step's rows: one flat box of dy, one box of rows of x
        dy_box, x_box = [1, 1, 1, rows * tw, block_m], [1, 1, rows, tw, block_n]
        dy_shape, dy_strides = _one_row(grad_out)
    steps, tiles = _wgrad_tma_work(grad_out.shape[0], c_in, c_out, geometry, config)
    mask_x = WGRAD_TMA_MASK_X and _wgrad_tma_overhangs_x(sizes, x_shape, pad, config)
    # each split as [C_out, taps, C_in] (its channels-last layout)
    out_shape = [splits, c_out, taps, c_in]
    out = TensorDescriptor(parts, out_shape, [parts.stride(0), taps * c_in, c_in, 1],
                           [1, block_m, 1, block_n])  # fmt: skip
    launch(
        wgrad_tma_kernel,
        (tiles, splits),
        TensorDescriptor(x, x_shape, x_strides, x_box),
        TensorDescriptor(grad_out, dy_shape, dy_strides, dy_box),
        out,
        *sizes,
        c_in,
        c_out,
        *kernel[1:],
        *pad,
        *dil,
        cdiv(steps, splits),
        DOT_DTYPE=dot_dtype(x.dtype),
        TW=tw,
        ROWS=rows,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        FLAT_DY=flat_dy,
        MASK_X=mask_x,
        num_warps=num_warps,
        num_stages=num_stages,
    )


#: Whether ``wgrad_tma_kernel`` zeroes x's positions past dy's rows (``MASK_X``) where its
#: row boxes overhang dy onto x's real values (:func:`_wgrad_tma_overhangs_x`). Off: those
#: positions meet dy's zero fill, exact for finite x, but an Inf or NaN of x there turns dW
#: entries NaN that PyTorch gives finite (tests/test_wgrad_tma.py, the strict xfail). On:
#: exact for any x, x's boxes through registers. Off by default, for its cost: measured
#: (session 40, H200, bf16, ``probe_tma_wgrad.py --library``, kernel µs off -> on) ResNet-50's
#: 3x3 64@56 at batch 128 73.6 -> 142.3, 128@28 54.1 -> 87.5, 128@28 at batch 32 22.1 ->
#: 32.8 (the pointer-load kernel 79.2, 76.0, 21.8); UNet's 64@256, whose boxes never
#: overhang, 83.0 -> 83.5.
WGRAD_TMA_MASK_X = False


def _wgrad_tma_overhangs_x(dy_sizes, x_shape, pad, config: WgradTmaConfig) -> bool:
    """Whether a step's row boxes reach past dy's width (rows not a multiple of the box),
    or its rows past dy's height, onto positions where x holds values (not its own zero
    fill): some tap's shift ``k*dil - pad`` is at least ``-pad``, so x's box reaches real
    values there when ``dy's size - pad < x's size``. Flat dy boxes never overhang."""
    _, _, height, width = dy_sizes
    tw, rows, flat = config.tw, config.rows, config.flat_dy
    wide = cdiv(width, tw) * tw > width and width - pad[2] < x_shape[3]
    high = not flat and cdiv(height, rows) * rows > height and height - pad[1] < x_shape[2]
    return wide or high


@launch_plan
def _launch_conv(src, weight, bias, dst, geometry: Geometry, groups: int, transposed, config):
    """dst = implicit-GEMM conv of src (or, ``transposed``, its input gradient); see the kernel."""
    # The TMA paths step aside for a tracer (compiled graphs keep ``conv_igemm_kernel``, whose
    # launches Inductor analyses like any other), here for all three: their rules are not
    # even asked, whose size tests would add shape guards, and recompiles, to the graph.
    tma_paths = config is None and not tracing(src, weight, dst)
    if tma_paths and transposed and _launch_tap_gemm(src, weight, bias, dst, geometry, groups):
        return
    if tma_paths:
        tma = pointwise_tma_config(
            src.dtype, dst.numel() // max(dst.shape[1], 1), src.shape[1], dst.shape[1],
            geometry, groups, src.device,
        )  # fmt: skip
        if tma is not None and _launch_pointwise_tma(src, weight, bias, dst, transposed, tma):
            return
        window = window_tma_config(
            src.dtype, src.shape[0], src.shape[1], dst.shape[1], geometry, groups, transposed,
            src.device,
        )  # fmt: skip
        if window is not None and _launch_window_tma(
            src, weight, bias, dst, geometry, transposed, window
        ):
            return
    src = _innermost(src, 1)
    N, C_src = src.shape[:2]
    C_dst = dst.shape[1]
    src_per_group, dst_per_group = C_src // groups, C_dst // groups
    kernel, stride, pad, dil = _window3(geometry)
    dst_spatial = _spatial3(dst.shape[2:], 1)
    grid_q = _row_grid(dst_spatial, stride, transposed)
    if transposed:
        kstep = tuple(s // math.gcd(s, d) for s, d in zip(stride, dil, strict=True))
        phases = math.prod(stride)
    else:
        kstep, phases = (1, 1, 1), 1
    rows = N * math.prod(grid_q)
    if config is None:
        config = launch_config(
            src.dtype, N, src_per_group, dst_per_group, dst_spatial, stride, kernel, groups,
            transposed, src.device,
        )  # fmt: skip
    config = tf32x3_step(Config(*config), src.dtype)
    block_m, block_n, block_k, num_warps, num_stages, block_n2 = config
    # The weight tile is read along the source-side (reduction) channels or the destination
    # channels: one of them must be the weight's innermost axis (copied so if neither is).
    # TF32 tensor-core products take only K-major tiles (reduction axis innermost): an fp32
    # input gradient reading a channels-last weight along its destination channels ran at
    # ~1/3 of the forward's speed (session 12, benchmarks/probe_fp32_backward.py), so under
    # TF32 the weight is always read along the reduction side (a copy of the weight). The
    # three-TF32 products (TF32 off) too: they split the tile in registers, and its store
    # back to shared memory, transposed, left their input gradients 1.6x the forward's time
    # (session 29).
    src_dim = 0 if transposed else 1
    w = weight
    tf32 = src.dtype == torch.float32 and dot_precision(src.dtype) in TF32_PRODUCTS
    if weight.stride(src_dim) != 1 and (tf32 or weight.stride(1 - src_dim) != 1):
        w = _innermost(weight, src_dim)
    w_so, w_si, *w_taps = w.stride()
    out_per_group = weight.shape[0] // groups
    w_sd, w_ss = (w_si, w_so) if transposed else (w_so, w_si)
    # Small groups run ``pack`` at a time as one wider group (block-diagonal weight tile).
    pack = group_pack(src.dtype, src_per_group, dst_per_group, groups, rows, src.device)
    src_g, dst_g = src_per_group, dst_per_group
    src_per_group, dst_per_group, groups = pack * src_g, pack * dst_g, groups // pack
    if block_n2 and (pack > 1 or src.dtype not in DOT_DTYPES):
        # (the kernel's second accumulator is one tensor-core product, not block-diagonal)
        raise ValueError(
            f"tile configuration {config}: a second accumulator takes neither packed groups "
            f"nor {src.dtype} (it needs a tensor-core dtype, and one group or groups of at "
            f"least {PACK_CHANNELS} channels a side)"
        )
    grid = (cdiv(rows, block_m) * cdiv(dst_per_group, config.columns), groups, phases)
    splits = 1
    if phases == 1 and src.dtype in DOT_DTYPES and _is_dense(dst):
        steps = math.prod(kernel) * cdiv(src_per_group, block_k)
        splits = split_k(grid[0] * groups, steps, block_k, dst.numel(), src.device)
    out = written = dst
    if splits > 1:  # fp32 partials, each laid out as the output, summed below in split order
        partial = allocate(
            (splits, *dst.shape), partial_dtype(src.dtype), src.device, (dst.numel(), *dst.stride())
        )
        # The kernel is given all the partials, which it writes, and reads the layout of one
        # (split 0's, at the same address). Given ``partial[0]`` it wrote past that view,
        # which a traced launch cannot say: functionalisation then kept split 0 alone and
        # Inductor sized the kernel's buffer as one split (NaN and out-of-bounds writes in
        # compiled ResNet-50's late layers; session 16).
        dst, written, grid = partial.select(0, 0), partial, (grid[0], groups, splits)
    if pack > 1 or 1 not in (w_ss, w_sd) or src.stride(1) != 1 or dst.stride(1) != 1:
        align = 1  # (packed groups' and strided channels' tiles are not contiguous runs)
    else:  # every stride and offset the kernel's tile rows start at (taps of size-1 axes: none)
        taps = [s for s, k in zip(w_taps, weight.shape[2:], strict=True) if k > 1]
        align = _alignment(
            *_position_strides(src), *_position_strides(dst), src_per_group, dst_per_group,
            out_per_group * w_so, w_sd if w_ss == 1 else w_ss, *taps, dst.numel(),
        )  # fmt: skip
    launch(
        conv_igemm_kernel,
        grid,
        src,
        w,
        bias if bias is not None else w,
        written,
        rows,
        *grid_q,
        *_spatial3(src.shape[2:], 1),
        *dst_spatial,
        src_per_group,
        dst_per_group,
        *kernel,
        *stride,
        *pad,
        *dil,
        *kstep,
        *_strides3(src),
        *_strides3(dst),
        out_per_group * w_so,
        w_sd,
        w_ss,
        *_spatial3(w_taps, 0),
        src_g,
        dst_g,
        dst.numel(),
        TRANSPOSED=transposed,
        HAS_BIAS=bias is not None,
        EVEN_K=src_per_group % block_k == 0,
        THREE_D=_three_d(src, dst_spatial[0], kernel[0], pad[0]),
        WINDOW=math.prod(kernel) > 1,  # more than one tap: the loop walks taps too
        USE_DOT=src.dtype in DOT_DTYPES,
        DOT_PRECISION=dot_precision(src.dtype),
        DOT_DTYPE=dot_dtype(src.dtype),
        ACC_DTYPE=accumulator_dtype(src.dtype),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        BLOCK_N2=block_n2,
        GROUP_M=8,
        PACK=pack,
        INDEX_64=needs_int64(src, dst, w, None if splits == 1 else partial),
        ALIGN=align,
        ALIGN_W_SS=w_ss != 1,
        SPLIT_K=splits > 1,
        # launch folds more phases than CUDA's 65535 into axis 0 (a split count never is)
        FOLD_Z=None if splits > 1 else False,
        SWAP=swap_rule(src.dtype, config),
        TAP_BITS=tap_bits_rule(kernel, pack),
        num_warps=num_warps,
        num_stages=num_stages,
    )
    if splits > 1:
        sum_partials(partial, out)


#: Whether the forward/input-gradient kernel may test one precomputed bit per row and tap for
#: the zero padding (``TAP_BITS``; :func:`tap_bits_rule`) instead of comparing coordinates.
TAP_BITS = True


def tap_bits_rule(kernel, pack: int) -> bool:
    """Whether ``conv_igemm_kernel`` takes ``TAP_BITS``: a window of 2 to 32 taps (one bit
    each in an int32), groups not packed. Measured (session 22, H100, bf16 channels-last,
    benchmarks/probe_knob.py, kernel time): forward geomean over the dense suite 0.964 ->
    1.006x cuDNN, ResNet-50's 3x3 at 7x7 27.2 -> 25.3 µs, dilation 2 142.3 -> 127.7, VGG's
    first layer 114.1 -> 89.9; fp32 with TF32 0.758 -> 0.822. Packed groups lost (groups-32
    at 28x28 32.7 -> 35.0 µs over three rounds), so they keep the compares."""
    return TAP_BITS and pack == 1 and 1 < math.prod(kernel) <= 32


def swap_rule(dtype, config) -> bool:
    """Whether the forward/input-gradient kernel computes the transposed product
    ``acc^T = W^T X^T`` (``SWAP``: destination channels as the tensor-core instruction's 64
    rows). With 256-row tiles on two warpgroups each then runs ``m64n256k16`` over 128
    channels, instead of two ``m64n128k16`` that each read their 128 channels' weight tile
    again: 20 instead of 24 KB of shared memory per 16-deep step. Session 18
    (probe_swap_tiles.py, H100, bf16): dilated 3x3 256 at 64x64 152.1 -> 141.8 µs, ResNet-50's
    3x3 128 at 28x28 22.6 -> 21.3; on 128-row tiles it moved nothing beyond noise (±3 %)."""
    config = Config(*config)
    half = dtype in (torch.float16, torch.bfloat16)
    return half and config.block_m == 256 and not config.block_n2  # (no transposed second tile)


def describe(dtype, config) -> str:
    """A tile configuration as ``tritonconv.explain`` reports it (as the launcher will run it:
    :func:`tf32x3_step`), with the transposed product named where :func:`swap_rule` takes it."""
    config = tf32x3_step(Config(*config), dtype)
    return f"{config}{' transposed product' if swap_rule(dtype, config) else ''}"


def split_k(programs: int, steps: int, block_k: int, numel: int, device) -> int:
    """Into how many parts the forward/input-gradient kernel splits its ``steps`` reduction
    steps of ``block_k`` (``programs``: its tiles; ``numel``: the output's size): 1 unless the
    tiles fill less than a wave and the reduction is long (``SPLIT_K_MIN_REDUCTION``); then
    enough for about ``WGRAD_PROGRAMS_PER_SM`` programs per multiprocessor, each split at
    least ``SPLIT_K_MIN_STEPS`` steps, as many as the launcher's even cut gives."""
    sms = INTERPRETER_MULTIPROCESSORS if INTERPRETER else multiprocessor_count(device)
    if programs >= sms or steps * block_k < SPLIT_K_MIN_REDUCTION:
        return 1
    wanted = cdiv(WGRAD_PROGRAMS_PER_SM * sms, programs)
    splits = max(1, min(wanted, steps // SPLIT_K_MIN_STEPS, WGRAD_PARTIAL_LIMIT // max(numel, 1)))
    return cdiv(steps, cdiv(steps, splits))  # the kernel's cut: cdiv(steps, splits) each


def _is_dense(t: torch.Tensor) -> bool:
    """Whether ``t`` is a dense layout of its shape (any order of dimensions)."""
    order = sorted(range(t.dim()), key=lambda d: -t.stride(d))
    return dense_strides(t.shape, order) == tuple(t.stride())


def _position_strides(t: torch.Tensor) -> tuple:
    """(n, d, h, w) element strides of a 3-5-D tensor (missing spatial axes: 0)."""
    n, _, *spatial = _strides3(t)
    return (n, *spatial)


def _alignment(*values: int) -> int:
    """The largest of 8, 4, 2 dividing every value (element strides and offsets), else 1: the
    kernels' ``ALIGN`` (Triton itself proves alignment only from multiples of 16)."""
    return next((a for a in (8, 4, 2) if all(v % a == 0 for v in values)), 1)


# Convolutions with few input channels (image stems: 3) fold their width taps into the
# channels: in a channels-last image the ``KW x C`` values a window row reads are one
# contiguous run, so a view of the image (windows overlapping) with ``KW*C`` channels and a
# one-tap width convolves as the original does, with KW times fewer reduction steps and one
# ``KW*C``-wide tile where there were KW tiles of C channels padded to 16 (ResNet-50's stem:
# 49 steps of 3 useful channels in 16 become 7 of 21 in 32). The weight is read through the same
# view of its channels-last layout; the weight gradient is written through it.
FOLD_MAX_CHANNELS = 8
FOLD_MAX_WIDTH = 64  # KW * C


def foldable(dtype: torch.dtype, channels: int, geometry: Geometry, groups: int) -> bool:
    """Whether a convolution of ``channels`` input channels folds its width taps into them
    (its forward and weight gradient; see FOLD_MAX_CHANNELS)."""
    kw = geometry.kernel[-1]
    return (
        dtype in DOT_DTYPES
        and groups == 1
        and kw > 1
        and geometry.dilation[-1] == 1
        and 0 < channels <= FOLD_MAX_CHANNELS
        and channels * kw <= FOLD_MAX_WIDTH
    )


def _channels_last(t: torch.Tensor) -> torch.Tensor:
    """``t`` if it is dense channels-last (channels innermost, then the spatial axes in order;
    :func:`same_layout`: a one-channel ``t`` in either format), else such a copy (by the crop
    kernel: launch plans replay it)."""
    order = (0, *range(2, t.dim()), 1)
    if laid_out(t, order):
        return t
    copy = empty_in_order(t, t.shape, order)
    crop_into(t, copy, [0] * t.dim())
    return copy


def _folded(t: torch.Tensor, width: int, step: int) -> torch.Tensor:
    """The view of a dense channels-last ``t`` (N, C, ..., W) whose channel ``j`` at width
    position ``q`` is ``t[..., q*step + j // C, j % C]``: (N, width*C, ..., positions)."""
    C = t.shape[1]
    positions = (t.shape[-1] - width) // step + 1
    return t.as_strided(
        (t.shape[0], width * C, *t.shape[2:-1], positions),
        (t.stride(0), 1, *t.stride()[2:-1], step * C),
        t.storage_offset(),
    )


def _fold_input(x: torch.Tensor, geometry: Geometry) -> tuple[torch.Tensor, Geometry]:
    """(x folded, the convolution's geometry over it): x padded along its width first (one
    channels-last copy) unless it is dense channels-last (:func:`same_layout`) and its windows
    stay inside it."""
    kw, sw = geometry.kernel[-1], geometry.stride[-1]
    before = geometry.pad_before[-1]
    width = (geometry.output[-1] - 1) * sw + kw  # the padded width the windows cover
    order = (0, *range(2, x.dim()), 1)
    if before or width > x.shape[-1] or not laid_out(x, order):
        padded = empty_in_order(x, (*x.shape[:-1], width), order)
        crop_into(x, padded, [0] * (x.dim() - 1) + [-before])
        x = padded
    return _folded(x, kw, sw), folded_geometry(geometry)


def folded_geometry(geometry: Geometry) -> Geometry:
    """The geometry of a foldable convolution over its folded input: one position per output
    column, a one-tap width without padding; the other axes unchanged."""
    return make_geometry(
        (*geometry.input[:-1], geometry.output[-1]), (*geometry.kernel[:-1], 1),
        (*geometry.stride[:-1], 1), (*geometry.pad_before[:-1], 0),
        (*geometry.pad_after[:-1], 0), (*geometry.dilation[:-1], 1),
    )  # fmt: skip


def conv_forward(
    x, weight, bias, geometry: Geometry, groups: int, config=None, like=None
) -> torch.Tensor:
    """y = conv(x, weight, bias) for a batched (N, C, *spatial) input, in x's memory format
    (``like``'s where given: a transposed convolution's input gradient, computed from a
    channels-last copy of its output gradient, in its input's)."""
    check_kernel_device(x, "input")
    out = empty_like_format(
        (x.shape[0], weight.shape[0], *geometry.output), x if like is None else like
    )
    if out.numel() == 0:
        return out
    if config is None and foldable(x.dtype, x.shape[1], geometry, groups):
        x, geometry = _fold_input(x, geometry)
        weight = _folded(_channels_last(weight), weight.shape[-1], 1)
    _launch_conv(x, weight, bias, out, geometry, groups, False, config)
    return out


def conv_grad_input(
    grad_out, weight, like, geometry: Geometry, groups: int, shape=None, bias=None, config=None
) -> torch.Tensor:
    """dx of the convolution (``like`` gives dtype and memory format, and the shape unless
    ``shape`` does: a transposed convolution's output, whose ``bias`` is then added in the
    same pass). Phases without taps are written too (zeros, or the bias)."""
    check_kernel_device(grad_out, "grad_output")
    shape = tuple(like.shape) if shape is None else tuple(shape)
    grad_in = empty_like_format(shape, like)
    if grad_in.numel() == 0:
        return grad_in
    if config is None and phases_foldable(grad_out.dtype, shape[1], geometry, groups):
        _launch_grad_input_phases_folded(grad_out, weight, bias, grad_in, geometry)
    else:
        _launch_conv(grad_out, weight, bias, grad_in, geometry, groups, True, config)
    return grad_in


# An input gradient into few channels with a stride (the forward of the last transposed
# convolution of a GAN generator or a decoder, into 3 channels; an image stem's) runs one
# convolution over ``grad_out`` whose destination channels are every stride phase of every
# input channel, then moves each phase's values to its positions (two crop copies). The stride
# phases otherwise run as convolutions of their own, each into as few channels as the input
# has, in 16-column tiles: 3 of 16 columns useful for 3 channels. Folded, 4 phases fill 12 of
# 16. Taken where that at least doubles the share of useful products (PHASE_FOLD_MIN_GAIN),
# and only for kernels a whole number of strides long: every phase then has every tap. A
# shorter phase would run its missing taps as zero weights, and an infinite ``grad_out``
# value times such a zero is NaN where PyTorch's sum has no such term (ResNet-50's 7x7
# stride-2 stem, 4 taps a phase where some have 3: measured 2.4-2.7x faster folded, H100,
# session 30, but not taken for that reason).
PHASE_FOLD_MIN_GAIN = 2
PHASE_FOLD_MAX_COLUMNS = 64


def phases_foldable(dtype, channels: int, geometry: Geometry, groups: int) -> bool:
    """Whether the input gradient into ``channels`` input channels folds its stride phases into
    its destination channels (see PHASE_FOLD_MIN_GAIN): tensor-core dtypes, one group, 1-D or
    2-D, undilated, strided, each kernel axis a whole number of strides long, not every one
    equal to its stride (the tap GEMM's case)."""
    kernel, stride = geometry.kernel, geometry.stride
    if (
        dtype not in DOT_DTYPES
        or groups != 1
        or len(kernel) > 2
        or any(d != 1 for d in geometry.dilation)
        or all(s == 1 for s in stride)
        or any(k % s for k, s in zip(kernel, stride, strict=True))
        or tuple(kernel) == tuple(stride)
    ):
        return False
    columns = channels * math.prod(stride)
    if columns > PHASE_FOLD_MAX_COLUMNS:
        return False
    before = channels / clamped_power_of_2(channels, 16, 128)
    after = columns / clamped_power_of_2(columns, 16, 128)
    return after >= PHASE_FOLD_MIN_GAIN * before


def phase_folded_geometry(geometry: Geometry, sizes) -> Geometry:
    """The folded convolution over ``grad_out`` of a ``phases_foldable`` input gradient of
    spatial ``sizes``: ``kernel / s`` taps an axis, stride 1, padded by ``taps - 1`` before;
    its output positions ``q`` cover the ``sizes`` after the padding in phases of ``s``, and
    at least ``grad_out``'s (so the padding after is not negative)."""
    out, stride = geometry.output, geometry.stride
    taps = tuple(k // s for k, s in zip(geometry.kernel, stride, strict=True))
    positions = tuple(
        max(cdiv(size + p, s), o)
        for size, p, s, o in zip(sizes, geometry.pad_before, stride, out, strict=True)
    )
    rank = len(taps)
    return make_geometry(
        out, taps, (1,) * rank, tuple(t - 1 for t in taps),
        tuple(q - o for q, o in zip(positions, out, strict=True)), (1,) * rank,
    )  # fmt: skip


def phase_weight(weight: torch.Tensor, stride, taps) -> torch.Tensor:
    """The folded convolution's weight ``[C_in * phases, C_out, *taps]`` from a convolution's
    ``[C_out, C_in, *kernel]`` whose kernel is ``taps * stride`` long: destination channel
    ``(c, r_1, ...)`` (phase ``r`` of input channel ``c``, phases innermost) at tap ``t`` of
    an axis of stride ``s`` takes the kernel's tap ``r + s * (taps - 1 - t)``. Laid out with
    ``C_out`` innermost, as the kernel reads it: one gather (where a flip, a permuting copy
    and a relayout were three kernels)."""
    c_out, c_in = weight.shape[:2]
    index = _phase_index(c_in, tuple(stride), tuple(taps), weight)
    rows = weight.reshape(c_out, -1).t().index_select(0, index)  # [(c, r, t), C_out]
    return rows.view(c_in * math.prod(stride), *taps, c_out).movedim(-1, 1)


# Phase weights' gather indices by (C_in, stride, taps, device): constants, a few a process,
# kept for the process's life. Not a BoundedCache, which drops entries (by size or
# ``clear_caches``): a CUDA graph captured after an index was cached reads it by address,
# and would gather through freed memory once the cache let go of it.
_phase_indices: dict = {}


def _phase_index(c_in: int, stride: tuple, taps: tuple, weight: torch.Tensor) -> torch.Tensor:
    """For each row ``(c, r_1, ..., t_1, ...)`` of :func:`phase_weight`, the column of the
    weight's ``[C_out, C_in * kernel]`` it takes, built on ``weight``'s device by PyTorch ops
    (no host copy) once per shape and device. Built afresh, not kept, for a tracer (fake
    tensors must not meet real ones, either way) and inside CUDA-graph capture (where its
    kernels are recorded, not run: the graph's replays build it)."""
    if tracing(weight):
        return _build_phase_index(c_in, stride, taps, weight.device)
    key = (c_in, stride, taps, weight.device)
    index = _phase_indices.get(key)
    if index is None:
        index = _build_phase_index(c_in, stride, taps, weight.device)
        if weight.device.type != "cuda" or not torch.cuda.is_current_stream_capturing():
            _phase_indices.setdefault(key, index)
    return index


def _build_phase_index(c_in: int, stride: tuple, taps: tuple, device) -> torch.Tensor:
    split = [size for t, s in zip(taps, stride, strict=True) for size in (t, s)]
    kernel = math.prod(split)
    columns = torch.arange(c_in * kernel, device=device).view(c_in, *split)
    rank = len(taps)
    tap_axes = [1 + 2 * a for a in range(rank)]  # (tap j, phase r) pairs: kernel tap r + s * j
    columns = columns.flip(tap_axes).permute(0, *(a + 1 for a in tap_axes), *tap_axes)
    return columns.reshape(-1)


@launch_plan
def _launch_grad_input_phases_folded(grad_out, weight, bias, grad_in, geometry: Geometry):
    """``grad_in`` = the input gradient of a convolution (``phases_foldable``): phase ``r`` of
    input position ``i = s * q + r - pad`` is ``sum_j grad_out[q - j] * w[r + s * j]``, a
    convolution over ``grad_out`` (:func:`phase_folded_geometry`) whose destination channels
    are the phases (:func:`phase_weight`); its output ``z``,
    ``[N, C_in * phases, *q]``, is moved to the phases' positions (``zpad``, ``q * s`` long)
    and cropped by the padding into ``grad_in``."""
    stride, pad = geometry.stride, geometry.pad_before
    folded = phase_folded_geometry(geometry, grad_in.shape[2:])
    taps, positions, rank = folded.kernel, folded.output, folded.ndim
    N, C = grad_in.shape[:2]
    phases = math.prod(stride)
    w = call(phase_weight, weight, stride, taps)
    b = None if bias is None else call(torch.repeat_interleave, bias, phases)
    # z and zpad channel-major, whatever grad_in's layout: the moves then copy runs along the
    # positions (tiles of ``q`` rows by ``s`` phases); channels-last, their innermost axis
    # would be the few channels (tiles of 6 elements: ResNet-50's stem's input gradient took
    # 642 µs in bf16, against 364 for the phases one by one, H100, session 30)
    z = empty_in_order(grad_in, (N, C * phases, *positions), range(rank + 2))
    _launch_conv(grad_out, w, b, z, folded, 1, False, None)
    padded = tuple(q * s for q, s in zip(positions, stride, strict=True))
    # grad_in is zpad itself where nothing is cropped and it is channel-major (one channel in
    # either format: wav2vec's first conv1d): one move and one buffer fewer
    direct = not any(pad) and padded == tuple(grad_in.shape[2:])
    direct = direct and laid_out(grad_in, range(rank + 2))
    zpad = grad_in if direct else empty_in_order(grad_in, (N, C, *padded), range(rank + 2))
    # z as [N, C, q_1, r_1, ...] (phases beside their axes), zpad as the same
    interleaved = [size for q, s in zip(positions, stride, strict=True) for size in (q, s)]
    z_phases = z.view(N, C, *stride, *positions)
    z_phases = z_phases.permute(0, 1, *(a for d in range(rank) for a in (2 + rank + d, 2 + d)))
    crop_into(z_phases, zpad.view(N, C, *interleaved), [0] * (2 + 2 * rank))
    if not direct:
        crop_into(zpad, grad_in, [0, 0, *pad])


@launch_plan
def _launch_grad_weight(
    grad_out, x, partial, geometry: Geometry, groups: int, config, tap_group: int, pack: int = 1
):
    grad_out, x = _innermost(grad_out, 1), _innermost(x, 1)
    N, C = x.shape[:2]
    C_out = grad_out.shape[1]
    in_g, out_g = C // groups, C_out // groups
    groups //= pack  # the kernel's groups: packs of consecutive groups
    in_per_group, out_per_group = C // groups, C_out // groups
    kernel, stride, pad, dil = _window3(geometry)
    rows = N * geometry.output_numel
    splits = partial.shape[0]
    block_m, block_n, block_k, num_warps, num_stages = config[:5]  # (no second accumulator)
    per_split = cdiv(cdiv(rows, block_k), splits) * block_k
    tiles = cdiv(out_per_group, block_m) * cdiv(in_per_group, block_n)
    out_sizes = _spatial3(grad_out.shape[2:], 1)
    positions = (*_position_strides(grad_out), *_position_strides(x))
    align = _alignment(*positions, in_g, out_g)
    precision = wgrad_precision(x.dtype, in_per_group, out_per_group)
    signed_bounds = wgrad_signed_bounds(dil)
    launch(
        conv_igemm_wgrad_kernel,
        (tiles, groups * kernel[0] * kernel[1] * cdiv(kernel[2], tap_group), splits),
        grad_out,
        x,
        partial,
        rows,
        per_split,
        *_spatial3(x.shape[2:], 1),
        *out_sizes,
        in_per_group,
        out_per_group,
        *kernel,
        *stride,
        *pad,
        *dil,
        *_strides3(grad_out),
        *_strides3(x),
        partial.stride(0),
        *_strides3(partial.select(0, 0)),
        *(1.0 / size for size in reversed(out_sizes)),
        in_g,
        out_g,
        SMALL_DIVIDE=max(out_sizes) + block_k + 1 < SMALL_QUOTIENT_LIMIT,
        FLAT_DY=_positions_flat(grad_out),
        EVEN_C=out_per_group % block_m == 0 and in_per_group % block_n == 0,
        THREE_D=_three_d(x, out_sizes[0], kernel[0], pad[0]),
        # a 1x1(x1) window at stride 1 without padding over flat dy and x of the same sizes:
        # x's positions are dy's (not where x is larger: a transposed convolution's
        # output_padding, a negative padding after, whose extra positions no tap reads)
        POINTWISE=(*kernel, *stride, *pad) == (1,) * 6 + (0,) * 3
        and grad_out.shape[2:] == x.shape[2:]
        and _positions_flat(grad_out)
        and _positions_flat(x),
        TAP_GROUP=tap_group,
        TAP_TAIL=signed_bounds or kernel[2] % tap_group != 0,
        UNSIGNED_BOUNDS=not signed_bounds,
        USE_DOT=x.dtype in DOT_DTYPES,
        DOT_PRECISION=precision,
        DOT_DTYPE=dot_dtype(torch.bfloat16 if precision in BF16_SPLITS else x.dtype),
        ACC_DTYPE=accumulator_dtype(x.dtype),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        INDEX_64=needs_int64(grad_out, x, partial),
        ALIGN=align,
        PACK=pack,
        num_warps=num_warps,
        num_stages=num_stages,
    )


def wgrad_signed_bounds(dilation) -> bool:
    """Whether the weight-gradient kernel keeps two signed compares per bounds check and the
    width-tap groups' tail check where the groups divide the width (the loop before session
    22) instead of one unsigned compare and no tail check (``_within``, ``TAP_TAIL``): for
    dilated layers. Measured (H100, bf16, kernel alone, two rounds): the undilated layers
    gained with fewer instructions (ResNet-50's 3x3 at 7x7 24.3 -> 21.5 µs, at 14x14 29.0 ->
    28.1), the dilated ones lost with them (dilation 2 202.5 -> 229.2, ASPP's dilation 12
    186.7 -> 197.9), and only both changes undone restored dilation 2: the compiler's
    schedule of the loop, not its instruction count, decides there."""
    return max(dilation) > 1


# The weight gradient of 16-bit grouped convolutions packs consecutive groups into one program
# (``wgrad_pack``) until each side is WGRAD_PACK_CHANNELS wide: its loads are then whole
# 64-channel (128-byte) rows and its tiles the dense kernel's, at the price of computing the
# off-diagonal blocks too (tensor-core work, which a layer this narrow has to spare). Before
# session 21 a program of ResNeXt's 8-channel groups ran 16 x 16 tiles over 16-byte loads: the
# dense suite's groups-32 layer took 0.45x cuDNN's backward.
WGRAD_PACK_CHANNELS = 64
# The same for fp32 with TF32 allowed, whose products are three bfloat16 ones (``bf16x3``).
# Measured (session 21, H100, probe_grouped.py --dtype float32; cuDNN with TF32): 64 channels
# against none, groups-32 at 28 pixels 313.6 -> 115.9 µs (cuDNN 125.6), ResNeXt's 4-channel
# groups 1230.8 -> 227.3 (268.3), RegNet's 16-channel groups at 56 / 14 pixels 257.1 / 86.7 ->
# 95.4 / 38.6 (159.2 / 71.1); 32 and 128 channels were slower than 64 on all five layers.
WGRAD_PACK_CHANNELS_TF32 = 64


def wgrad_pack(dtype, in_per_group: int, out_per_group: int, groups: int) -> int:
    """How many consecutive groups one weight-gradient program runs as one (block-diagonal
    tile): a power of two dividing ``groups``, doubled while both sides stay within
    ``WGRAD_PACK_CHANNELS`` (fp32 with bfloat16-piece products, :data:`BF16_SPLITS`:
    ``WGRAD_PACK_CHANNELS_TF32``, measured with TF32 allowed); 1 for one group, for groups
    that wide already, for fp32 ``ieee`` products (on the FMA units, which the off-diagonal
    blocks would cost in full) and the exact dtypes."""
    if dtype in (torch.float16, torch.bfloat16):
        width = WGRAD_PACK_CHANNELS
    elif wgrad_precision(dtype) in BF16_SPLITS:
        width = WGRAD_PACK_CHANNELS_TF32
    else:
        return 1
    pack = 1
    while groups % (2 * pack) == 0 and 2 * pack * max(in_per_group, out_per_group) <= width:
        pack *= 2
    if (
        dtype == torch.float32
        and wgrad_precision(dtype, pack * in_per_group, pack * out_per_group) == "ieee"
    ):
        return 1  # (fp32 programs too narrow for bfloat16 pieces even packed: FMA products)
    return pack


# The fp32 weight gradient's products. Its tiles run along the channels (channels-last dy and
# x: the reduction axis, positions, is the outer one), and TF32 tensor-core products take only
# tiles whose reduction axis is innermost: measured (H100, session 12,
# benchmarks/probe_fp32_backward.py), the TF32 weight gradient took 0.467 / 0.433 / 2.018 ms on
# ResNet-50 56x56 / 14x14 and UNet 256x256 3x3 layers against 0.362 / 0.346 / 1.537 ms with
# fp32 FMA products (``ieee``, exact to fp32, what TF32 off computed until session 29).
# 16-bit tensor-core products take those tiles as they are, so with TF32 allowed each fp32
# operand is split into two bfloat16 halves and three products (``hi*hi + hi*lo + lo*hi``,
# fp32 sums) stand for one (``bf16x3``): about 2^-16 of each operand is kept, more than
# TF32's 2^-11.
WGRAD_TF32_PRECISION = "bf16x3"
# With TF32 off, the same tiles at fp32 accuracy: each operand split into three bfloat16
# pieces and six products summed on the tensor cores (``bf16x6``, kernels/mma.py), the tensor
# cores' truncation lifted as ``tf32x3_rn``'s is. ``ieee`` (fp32 FMA products) where the
# TF32-off precision is ``ieee`` (precision.TF32_OFF_PRECISION).
WGRAD_TF32_OFF_PRECISION = "bf16x6"
#: Weight-gradient precisions whose fp32 operands are split into bfloat16 pieces
BF16_SPLITS = ("bf16x3", "bf16x6")
# Programs narrower than this many channels a side (after packing groups) keep fp32 FMA
# products (``ieee``), TF32 allowed or not: their tiles are mostly padding, and splitting
# each operand into bfloat16 pieces costs more than the products it saves. It holds for every
# narrow program (MobileNet's and EfficientNet's narrow 1x1 layers too), measured on the
# folded stems only (benchmarks/probe_wgrad_tiles.py --tf32-off and probe_passes.py, weight
# gradient alone), 21 and 9 channels (ResNet-50's, VGG's first layer): with TF32 off (session
# 29, H100) 1234 / 406 µs with ``bf16x6`` against 572 / 282 with ``ieee``; with TF32 allowed
# (session 41, H200) 1254.2 / 361.7 with ``bf16x3`` against 571.4 / 283.4 (plain ``tf32``
# 722.0 / 390.8; cuDNN TF32 232.9 / 212.4).
WGRAD_SPLIT_MIN_CHANNELS = 32


def wgrad_precision(dtype: torch.dtype, in_per_group: int = 0, out_per_group: int = 0) -> str:
    """The weight gradient's ``DOT_PRECISION``: for fp32 ``ieee`` where a program's channels
    (``in_per_group``, ``out_per_group``: packed groups as one; 0: not known, any width) are
    fewer than :data:`WGRAD_SPLIT_MIN_CHANNELS` a side, else :data:`WGRAD_TF32_PRECISION`
    with TF32 allowed, ``ieee`` with TF32 off where ``precision.TF32_OFF_PRECISION`` is
    ``ieee``, else :data:`WGRAD_TF32_OFF_PRECISION`; for other dtypes
    :func:`dot_precision`'s."""
    precision = dot_precision(dtype)
    if dtype == torch.float32:
        if 0 < min(in_per_group, out_per_group) < WGRAD_SPLIT_MIN_CHANNELS:
            return "ieee"
        if precision == "tf32":
            return WGRAD_TF32_PRECISION
        return "ieee" if precision == "ieee" else WGRAD_TF32_OFF_PRECISION
    return precision


# Most width taps a weight-gradient program owns (its accumulators: one tile per tap), and the
# input channels per group below which inputs other than 16-bit floats own several. Measured
# (H100, bf16, session 7, benchmarks/probe_wgrad.py): three taps a program took the weight gradient of the 3-channel
# and 8-channels-per-group layers from 0.11-0.26x to 0.13-0.54x cuDNN, and made the dense
# 64-256-channel 3x3 layers about twice as slow with 64x64x128 tiles (more splits, hence
# partial sums, and shorter loops). Session 9's sweep (benchmarks/sweep_backward.py): with
# 64x64x64 tiles of 4 stages (two taps fit the shared memory) and two programs per SM the
# dense 16-bit 3x3 layers gain 5-15 % (ResNet-50 56x56 0.43 -> 0.50x cuDNN, UNet 0.39/0.48
# -> 0.43/0.52x), so 16-bit dense layers own taps too; other dtypes' dense layers were not
# measured and keep one tap a program.
WGRAD_TAP_GROUP_MAX = 3
WGRAD_TAP_GROUP_BELOW = 16
# Shared memory a weight-gradient program may take (its pipeline stages: one dy tile and one x
# tile per tap each), so that two programs fit on an H100 SM (228 KB).
WGRAD_SHARED_BUDGET = 112 * 1024


def wgrad_tap_group(kw: int, in_per_group: int, config: Config, dtype: torch.dtype) -> int:
    """How many neighbouring width taps a weight-gradient program owns: one for inputs of
    ``WGRAD_TAP_GROUP_BELOW`` channels per group or more other than float16/bfloat16 (the only
    dense ones measured to gain); else as many as the kernel has up to
    ``WGRAD_TAP_GROUP_MAX``, in groups of equal size (5 -> 3 + 2, 7 -> 3 + 3 + 1), fewer when
    the accumulators (one ``[block_m, block_n]`` fp32 tile per tap: at most three 64 x 64
    tiles per four warps) or the pipeline's shared memory would not fit."""
    if in_per_group >= WGRAD_TAP_GROUP_BELOW and dtype not in (torch.float16, torch.bfloat16):
        return 1
    group = cdiv(kw, cdiv(kw, WGRAD_TAP_GROUP_MAX))
    per_warp = config.block_m * config.block_n / config.num_warps
    while group > 1 and (
        group * per_warp > 3 * 64 * 64 / 4
        or _wgrad_shared(config, group, dtype.itemsize) > WGRAD_SHARED_BUDGET
    ):
        group -= 1
    return group


def _wgrad_shared(config: Config, group: int, element_size: int) -> int:
    """Bytes of shared memory the weight-gradient kernel's pipeline holds."""
    tile = config.block_k * (config.block_m + group * config.block_n)
    return max(1, config.num_stages) * tile * element_size


# The weight-gradient kernel's fp32 quotients (``_small_quotient``) are exact below this.
SMALL_QUOTIENT_LIMIT = 1 << 21


def _positions_flat(t: torch.Tensor) -> bool:
    """Whether ``t``'s (n, d, h, w) strides are a dense channels-last tensor's, so position
    ``p`` (flattened ``n, d, h, w``) lies at ``p * (width stride)`` (axes of size 1 have no
    stride to match)."""
    sizes = (t.shape[0], *_spatial3(t.shape[2:], 1))
    n_stride, _, *strides = _strides3(t)
    strides = (n_stride, *strides)
    expected = strides[-1]
    for size, stride, inner in zip(sizes[::-1][1:], strides[::-1][1:], sizes[::-1]):
        expected *= inner
        if size != 1 and stride != expected:
            return False
    return True


# The split count of 16-bit weight gradients comes from a cost model fitted to
# benchmarks/probe_wgrad_tiles.py (session 21, H100, nine dense layers x three split counts):
# an SM runs its programs' steps one after another (a program alone on an SM steps about twice
# as fast as two sharing it), so a split count costs ``ceil(programs * splits / SMs)`` times the
# steps of one split, at WGRAD_STEP_US a 64 x 64 x 64 three-tap step, plus each split's fp32
# partial written and read back (WGRAD_PARTIAL_US per element). The rule before it asked for
# two programs an SM, rounded up: DeepLab's dilation-2 layer got 288 programs for 264 places,
# a second wave of 24 doubling its time (244 µs; 194 with four programs an SM's 11 splits).
# Fitted to windows whose programs own several width taps; 1x1 layers and folded stems (one
# tap a program, 128-position steps) keep the rule before it: the model's one program an SM
# took ResNet-50's 1x1 64 -> 256 at 56 pixels and VGG's folded first layer from 1.22 / 1.04x
# cuDNN's backward to 1.04 / 0.84x.
WGRAD_STEP_US = 0.5
WGRAD_PARTIAL_US = 8 / 2.5e6


def _split_count(rows: int, block_k: int, wanted: int) -> int:
    """The split count the kernel's launcher derives from ``wanted`` (positions per split are
    whole ``block_k`` steps, the same for every split)."""
    return cdiv(rows, cdiv(cdiv(rows, block_k), wanted) * block_k)


def wgrad_programs_per_sm(
    dtype, config: Config, rows: int, in_per_group: int = 0, out_per_group: int = 0
) -> int:
    """Programs a multiprocessor the split count of a weight gradient outside the cost model
    aims for: WGRAD_PROGRAMS_PER_SM, and for fp32 with bfloat16-piece products
    (:data:`BF16_SPLITS`; measured with TF32 allowed, ``bf16x3``) 4, or 2 with 128 x 256 tiles
    under 32768 positions. Measured (session 21, H100,
    benchmarks/probe_wgrad_tiles.py --dtype float32): 64 x 64 tiles at 2 -> 4 programs an SM,
    ResNet-50's 3x3 layers at 56 / 14 pixels 128.7 / 128.2 -> 92.7 / 109.7 µs, UNet's at 256
    pixels 670 -> 560; 128 x 256 tiles at 14 / 7 pixels 80.1 / 99.7 µs with 2 against 117.2 /
    111.3 with 4, on the dilation-2 layer (65536 positions) 835 against 630."""
    precision = wgrad_precision(dtype, in_per_group, out_per_group)
    if precision not in BF16_SPLITS:
        return WGRAD_PROGRAMS_PER_SM
    if precision == "bf16x6" and config.block_m * config.block_n >= 128 * 128:
        return 2  # (session 29: ResNet-50's 3x3 at 28 pixels 125 µs, 149 with four)
    return 2 if config.block_n >= 256 and rows < 32768 else 4


def _splits(
    rows: int, programs: int, weight_numel: int, block_k: int, device, step_work=None,
    per_sm: int = WGRAD_PROGRAMS_PER_SM,
) -> int:  # fmt: skip
    """Split count of the weight gradient: each split at least one ``block_k`` of positions,
    partials bounded. ``step_work``: a step's tensor-core work relative to a 64 x 64 x 64
    three-tap tile's, for the cost model above (16-bit, several taps a program); without it,
    enough programs for about ``per_sm`` a multiprocessor. Depends on shapes only."""
    steps = cdiv(rows, block_k)
    limit = max(1, min(steps, WGRAD_PARTIAL_LIMIT // weight_numel))
    if INTERPRETER:  # two splits, so the split reduction is tested on CPU too
        return _split_count(rows, block_k, min(2, limit))
    sms = multiprocessor_count(device)
    if step_work is None:
        wanted = cdiv(per_sm * sms, programs)
        return _split_count(rows, block_k, max(1, min(wanted, limit)))

    def cost(splits: int) -> float:
        per_split = cdiv(steps, splits)
        splits = cdiv(steps, per_split)
        partials = splits * weight_numel * WGRAD_PARTIAL_US if splits > 1 else 0.0
        return cdiv(programs * splits, sms) * per_split * WGRAD_STEP_US * step_work + partials

    # (more than eight programs an SM never pays: the partials grow, the waves do not shrink)
    candidates = range(1, max(1, min(limit, 8 * sms // programs)) + 1)
    return _split_count(rows, block_k, min(candidates, key=cost))


def _weight_layout(shape, strides) -> tuple:
    """``strides`` when they are a dense layout of ``shape`` (contiguous, channels-last, any
    permutation), else the contiguous strides."""
    if strides is not None:
        order = sorted(range(len(shape)), key=lambda d: -strides[d])
        if dense_strides(shape, order) == tuple(strides):
            return tuple(strides)
    return dense_strides(shape, range(len(shape)))


class WgradPlan(NamedTuple):
    """What the weight gradient's launcher picks for a convolution (:func:`wgrad_plan`)."""

    config: Config
    pack: int  # groups a program computes together (block-diagonal tiles)
    precision: str  # the kernel's DOT_PRECISION
    fold_width: int  # width taps folded into the channels (:func:`foldable`), 0: none


def wgrad_plan(dtype, rows, channels, out_channels, geometry: Geometry, groups, config=None):
    """The weight gradient's tiles, packing, products and folding for a convolution of
    ``channels`` -> ``out_channels`` over ``rows`` output positions (``config``: tiles given,
    then nothing folds): what :func:`conv_grad_weight` runs and ``tritonconv.explain``
    reports."""
    fold_width = 0
    if config is None and foldable(dtype, channels, geometry, groups):
        fold_width = geometry.kernel[-1]
        channels, geometry = channels * fold_width, folded_geometry(geometry)
    pack = wgrad_pack(dtype, channels // groups, out_channels // groups, groups)
    in_per_group, out_per_group = pack * channels // groups, pack * out_channels // groups
    if config is None:
        config = wgrad_config(dtype, out_per_group, in_per_group, rows, geometry.kernel[-1])
    precision = wgrad_precision(dtype, in_per_group, out_per_group)
    return WgradPlan(Config(*config), pack, precision, fold_width)


def conv_grad_weight(
    grad_out, x, weight_shape, geometry: Geometry, groups: int, config=None, weight_strides=None
) -> torch.Tensor:
    """dW of the convolution: a GEMM per (group, tap) over all positions, split into fixed
    parts whose partials (fp32; int64 or float64 for those dtypes) are summed in a fixed
    order (deterministic). ``weight_strides``: the weight's, which dW takes when they are a
    dense layout (so autograd need not copy the gradient into the weight's layout); the kernel
    writes a channels-last one (a channels-last weight's: one kernel and one allocation per
    training step), copied into any other."""
    check_kernel_device(x, "input")
    N, C = x.shape[:2]
    C_out = weight_shape[0]
    rows = N * geometry.output_numel
    layout = _weight_layout(weight_shape, weight_strides)  # the layout dW is returned in
    if rows == 0:
        return allocate(weight_shape, x.dtype, x.device, layout, zero=True)
    # The kernel stores each program's [C_out, C_in] tile per tap once. Laid out as a contiguous
    # weight (nn.Conv2d's default), (C_out, C_in, taps), those stores are one element per
    # 32-byte sector; measured (session 21, H100, bf16, the same tiles), ResNet-50's 3x3
    # layers' weight gradients took 52.8 / 63.5 / 64.9 µs at 56 / 14 / 7 pixels that way
    # against 30.4 / 38.8 / 28.3 into a channels-last dW. So the kernel writes input channels
    # innermost, and one copy of the weight's size gives another layout.
    channels_last = dense_strides(weight_shape, (0, *range(2, len(weight_shape)), 1))
    weight_numel = math.prod(weight_shape)
    tma = None
    if config is None and not tracing(grad_out, x):  # (see _launch_conv: not for a tracer)
        tma = wgrad_tma_config(x.dtype, N, C, C_out, geometry, groups, x.device)
    if tma is not None and _wgrad_tma_ready(grad_out) and _wgrad_tma_ready(x):
        steps, tiles = _wgrad_tma_work(N, C, C_out, geometry, tma)
        splits = wgrad_tma_splits(steps, tiles, weight_numel, tma, x.device)
        return _into_weight_layout(
            weight_shape, x, layout, channels_last, splits,
            lambda parts: _launch_wgrad_tma(grad_out, x, parts, geometry, tma),
        )  # fmt: skip
    kernel_layout = channels_last if layout[1] != 1 and weight_shape[1] > 1 else layout
    plan = wgrad_plan(x.dtype, rows, C, C_out, geometry, groups, config)
    fold_width, pack, config = plan.fold_width, plan.pack, plan.config
    if fold_width:
        # (see FOLD_MAX_CHANNELS) the folded convolution's dW, written through the folded
        # view of a channels-last dW (and of each split's partial)
        x, geometry = _fold_input(x, geometry)
        C = x.shape[1]
        if not same_layout(weight_shape, layout, channels_last):  # (one channel: no copy)
            kernel_layout = channels_last
    in_per_group, out_per_group = pack * C // groups, pack * C_out // groups  # a program's
    kw = geometry.kernel[-1]
    tiles = cdiv(out_per_group, config.block_m) * cdiv(in_per_group, config.block_n)
    # worked out once: the split count and the launcher's grid both depend on it
    tap_group = wgrad_tap_group(kw, in_per_group, config, x.dtype)
    tap_programs = geometry.kernel_numel // kw * cdiv(kw, tap_group)
    programs = tiles * groups // pack * tap_programs
    step_work = None
    if x.dtype in (torch.float16, torch.bfloat16) and tap_group > 1:  # (the model's family)
        # (tiles smaller than that step as long: their loops are latency-bound, not MMA-bound)
        work = config.block_m * config.block_n * config.block_k * tap_group / (64**3 * 3)
        step_work = max(1.0, work)
    per_sm = wgrad_programs_per_sm(x.dtype, config, rows, in_per_group, out_per_group)
    splits = _splits(rows, programs, weight_numel, config.block_k, x.device, step_work, per_sm)
    return _into_weight_layout(
        weight_shape, x, layout, kernel_layout, splits,
        lambda parts: _launch_grad_weight(
            grad_out, x, parts, geometry, groups, config, tap_group, pack
        ),
        fold_width,
    )  # fmt: skip


def _channels_last_into_contiguous(weight_shape, kernel_layout: tuple, layout: tuple) -> bool:
    """Whether ``kernel_layout`` is the weight's channels-last layout and ``layout`` its
    contiguous one (what ``sum_partials``' ``channels_to_taps`` moves between)."""
    order = (0, *range(2, len(weight_shape)), 1)
    return kernel_layout == dense_strides(weight_shape, order) and layout == dense_strides(
        weight_shape, tuple(range(len(weight_shape)))
    )


def _into_weight_layout(weight_shape, x, layout: tuple, kernel_layout: tuple, splits: int,
                        launch_into, fold_width: int = 0) -> torch.Tensor:  # fmt: skip
    """dW (x's dtype and device) in the dense ``layout``: ``launch_into(parts)`` writes it as
    ``[splits, *weight_shape]`` in ``kernel_layout`` (with ``fold_width``, through the folded
    view of each), straight into dW with one split (cast on store), else into partials
    (:func:`partial_dtype`) summed in split order; copied into ``layout`` where the two
    differ, except a channels-last ``kernel_layout``'s partials for a contiguous ``layout``,
    which the sum itself writes in it (no fold)."""
    weight_numel = math.prod(weight_shape)
    result = allocate(weight_shape, x.dtype, x.device, layout)
    # split partials written channels-last, summed straight into a contiguous weight's layout
    # (1-D weights, NCHW models' weights): the copy's launch and dW-sized buffer saved
    moved = (
        splits > 1
        and not fold_width
        and kernel_layout != layout
        and _channels_last_into_contiguous(weight_shape, kernel_layout, layout)
    )
    grad_weight = result
    if kernel_layout != layout and not moved:
        grad_weight = allocate(weight_shape, x.dtype, x.device, kernel_layout)
    target = _folded(grad_weight, fold_width, 1) if fold_width else grad_weight  # the kernel's dW
    if splits == 1:  # the one split is the sum: written straight into dW, cast on store
        launch_into(target.unsqueeze(0))
    else:
        partial = allocate(
            (splits, *weight_shape),
            partial_dtype(x.dtype),
            x.device,
            (weight_numel, *kernel_layout),
        )
        parts = partial
        if fold_width:  # each split's partial laid out as dW: the same view of each
            parts = partial.as_strided((splits, *target.shape), (weight_numel, *target.stride()))
        launch_into(parts)
        if moved:
            taps = weight_numel // (weight_shape[0] * weight_shape[1])
            sum_partials(partial, result, channels_to_taps=(taps, weight_shape[1]))
        else:
            sum_partials(partial, grad_weight)
    if result is not grad_weight:
        call(torch.Tensor.copy_, result, grad_weight)
    return result
