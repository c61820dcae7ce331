"""Launchers for im2col, col2im and relayout, and the F.unfold / F.fold ops built on them.

A column matrix is described by :class:`ColumnLayout` (the affine address of
``kernels/im2col.py``); two layouts are used:

* :func:`unfold_layout`: F.unfold's ``(N, C*KH*KW, OH*OW)`` (``(N, C*KD*KH*KW, OD*OH*OW)`` in
  3-D, ``(N, C*K, L_out)`` in 1-D);
* :func:`gemm_layout`: ``(groups, rows_per_group, positions)`` for one chunk of output
  positions, which is what a batched GEMM over groups consumes.

Arguments arrive validated (``geometry.py``); launchers only check the device, allocate and
launch. im2col and col2im take images with 1, 2 or 3 spatial axes (``(N, C, *spatial)`` and a
geometry of the same rank): the kernels are written over ``(D, H, W)`` and a lower rank is
passed with leading size-1 axes (:func:`_axes3`). Block sizes are chosen here: memory-bound
tiles on the GPU, larger tiles under the interpreter, where every program is a Python-level step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._runtime import INTERPRETER, check_kernel_device
from ..geometry import Geometry
from ..kernels.im2col import col2im_kernel, im2col_kernel, relayout_kernel
from ..launch import allocate, launch, launch_plan
from .common import INDEX32_LIMIT, accumulator_dtype, cdiv, needs_int64, next_power_of_2


@dataclass(frozen=True)
class ColumnLayout:
    """Address of column entry (n, q, g, kg): ``base + n*sn + q*sq + g*sg + kg*sk``."""

    base: int
    sn: int
    sq: int
    sg: int
    sk: int

    def args(self) -> tuple[int, int, int, int, int]:
        return (self.base, self.sn, self.sq, self.sg, self.sk)


def unfold_layout(rows: int, positions_per_sample: int) -> ColumnLayout:
    return ColumnLayout(0, rows * positions_per_sample, 1, 0, positions_per_sample)


def gemm_layout(
    rows_per_group: int, position_start: int, num_positions: int, positions_per_sample: int
) -> ColumnLayout:
    """``(groups, rows_per_group, num_positions)`` contiguous, holding positions from
    ``position_start`` on."""
    return ColumnLayout(
        -position_start,
        positions_per_sample,
        1,
        rows_per_group * num_positions,
        num_positions,
    )


def _image_strides(x: torch.Tensor) -> tuple[int, int, int, int]:
    sn, sc, sh, sw = x.stride()
    return sn, sc, sh, sw


def _axes3(values, fill: int) -> tuple[int, int, int]:
    """A per-axis tuple of a 1-3-D geometry as ``(D, H, W)``, the missing leading axes ``fill``."""
    values = tuple(values)
    return (fill,) * (3 - len(values)) + values


def _image_strides3(x: torch.Tensor) -> tuple[int, int, int, int, int]:
    """``(sn, sc, sd, sh, sw)`` of an ``(N, C, *spatial)`` image (a missing axis: stride 0)."""
    sn, sc, *spatial = x.stride()
    return (sn, sc, *_axes3(spatial, 0))


def _has_depth(geometry: Geometry) -> bool:
    """Whether the depth axis is real (the kernels' ``DEPTH``): a 3-D geometry whose input,
    kernel or output depth is not 1, or whose one depth tap lands in the padding (depth 1
    padded by ``p`` with stride > 2p: every column entry is a zero). Without it the kernels
    compile their depth math out and read depth index 0."""
    if geometry.ndim < 3:
        return False
    sizes = (geometry.input[0], geometry.kernel[0], geometry.output[0])
    return any(size != 1 for size in sizes) or geometry.pad_before[0] != 0


def _depth_leaves_image(geometry: Geometry) -> bool:
    """Whether some depth tap of some output position falls outside the image: only through
    depth padding (before, or after as ``padding='same'`` puts it), so never below 3-D."""
    if geometry.ndim < 3:
        return False
    D, KD, OD = geometry.input[0], geometry.kernel[0], geometry.output[0]
    stride, pad, dil = geometry.stride[0], geometry.pad_before[0], geometry.dilation[0]
    return pad > 0 or (OD - 1) * stride + (KD - 1) * dil > D - 1


def _window3(geometry: Geometry):
    """(stride, pad_before, dilation) of ``geometry``, each a ``(D, H, W)`` triple."""
    return (
        _axes3(geometry.stride, 1),
        _axes3(geometry.pad_before, 0),
        _axes3(geometry.dilation, 1),
    )


# GPU launch configuration of im2col (tile = block_p positions x tile_elements/block_p rows),
# chosen by the output plane's size, and of col2im (block elements). H100 sweeps
# (benchmarks/sweep_im2col.py, sweep_unfold_layout.py; NOTES.md): large planes want narrow
# tiles (r50_3x3_56: 32x64, 2 warps 139 µs vs 128x16, 4 warps 163 µs), small planes wide ones
# (r50_3x3_14: 128x8, 2 warps 41 µs vs 32x32 238 µs; r50_3x3_7: 26 µs vs 128 µs).
IM2COL_CONFIG = {"block_p": 32, "tile_elements": 2048, "num_warps": 2}
IM2COL_SMALL_PLANE_CONFIG = {"block_p": 128, "tile_elements": 1024, "num_warps": 2}
SMALL_PLANE = 512  # output positions per sample below which the wide tile is used
COL2IM_CONFIG = {"block": 512, "num_warps": 4}
RELAYOUT_CONFIG = {"block_p": 128, "tile_elements": 2048, "num_warps": 4}


def _tiles(rows: int, positions: int, config) -> tuple[int, int]:
    """(BLOCK_R, BLOCK_P) for a rows x positions tile of a memory-bound 2-D kernel."""
    if INTERPRETER:
        return min(32, next_power_of_2(rows)), min(256, next_power_of_2(positions))
    block_p = min(config["block_p"], max(16, next_power_of_2(positions)))
    block_r = min(next_power_of_2(rows), max(1, config["tile_elements"] // block_p))
    return block_r, block_p


@launch_plan
def im2col(
    x: torch.Tensor,
    col: torch.Tensor,
    layout: ColumnLayout,
    geometry: Geometry,
    rows_per_group: int,
    position_start: int,
    num_positions: int,
) -> None:
    """Write the columns of positions ``[position_start, +num_positions)`` of ``x``
    (N, C, *spatial) into ``col`` at ``layout``."""
    check_kernel_device(x, "input")
    rows = x.shape[1] * geometry.kernel_numel
    if rows == 0 or num_positions == 0:
        return
    (D, H, W), (KD, KH, KW) = _axes3(geometry.input, 1), _axes3(geometry.kernel, 1)
    OH, OW = _axes3(geometry.output, 1)[1:]
    (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = _window3(geometry)
    x_sn, x_sc, x_sd, x_sh, x_sw = _image_strides3(x)
    L = geometry.output_numel
    config = IM2COL_SMALL_PLANE_CONFIG if L < SMALL_PLANE else IM2COL_CONFIG
    block_r, block_p = _tiles(rows, num_positions, config)
    grid = (cdiv(rows, block_r) * cdiv(num_positions, block_p),)
    # Positions stored contiguously: samples abut (sn == L) or the chunk is inside one sample.
    n0 = position_start // L
    flat = layout.sq == 1 and (layout.sn == L or position_start - n0 * L + num_positions <= L)
    col_base = layout.base + n0 * layout.sn + (position_start - n0 * L) if flat else layout.base
    launch(
        im2col_kernel,
        grid,
        x,
        col,
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
        sh,
        sw,
        ph,
        pw,
        dh,
        dw,
        x_sn,
        x_sc,
        x_sh,
        x_sw,
        col_base,
        layout.sn,
        layout.sq,
        layout.sg,
        layout.sk,
        D,
        OH,
        KD,
        sd,
        pd,
        dd,
        x_sd,
        DEPTH=_has_depth(geometry),
        CHECK_D=_depth_leaves_image(geometry),
        FLAT_POSITIONS=flat,
        BLOCK_R=block_r,
        BLOCK_P=block_p,
        # the positions themselves count up to position_start + num_positions (+ a block's
        # masked lanes), which passes 2**31 before x or col need to when N * L is that large
        INDEX_64=needs_int64(x, col) or position_start + num_positions + block_p > INDEX32_LIMIT,
        num_warps=config["num_warps"],
    )


@launch_plan
def col2im(
    col: torch.Tensor,
    layout: ColumnLayout,
    out: torch.Tensor,
    geometry: Geometry,
    rows_per_group: int,
    position_start: int,
    num_positions: int,
    accumulate: bool,
) -> None:
    """Sum the columns of positions ``[position_start, +num_positions)`` into the samples of
    ``out`` (N, C, *spatial) that those positions belong to (write, or add when
    ``accumulate``)."""
    check_kernel_device(out, "output")
    L = geometry.output_numel
    if num_positions == 0 or out.numel() == 0:
        return
    n_start = position_start // L
    n_end = (position_start + num_positions - 1) // L + 1
    C = out.shape[1]
    D, H, W = _axes3(geometry.input, 1)
    KD, KH, KW = _axes3(geometry.kernel, 1)
    OD, OH, OW = _axes3(geometry.output, 1)
    (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = _window3(geometry)
    x_sn, x_sc, x_sd, x_sh, x_sw = _image_strides3(out)
    # One program: a block of the (n, c, h, w) elements of one depth plane.
    plane_numel = (n_end - n_start) * C * H * W
    block = 4096 if INTERPRETER else COL2IM_CONFIG["block"]
    plane_blocks = cdiv(plane_numel, block)
    launch(
        col2im_kernel,
        (D * plane_blocks,),
        col,
        out,
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
        position_start + num_positions,
        sh,
        sw,
        ph,
        pw,
        dh,
        dw,
        x_sn,
        x_sc,
        x_sh,
        x_sw,
        *layout.args(),
        plane_blocks,
        D,
        OD,
        KD,
        sd,
        pd,
        dd,
        x_sd,
        DEPTH=_has_depth(geometry),
        ACC_DTYPE=accumulator_dtype(out.dtype),
        ACCUMULATE=accumulate,
        BLOCK=block,
        INDEX_64=needs_int64(col, out) or n_end * L > INDEX32_LIMIT,  # (positions n*L + q)
        num_warps=COL2IM_CONFIG["num_warps"],
    )


def matrix_address(num_positions: int, position_start: int, geometry: Geometry):
    """(base, sn, sc, sh, sw) of a ``(channels, num_positions)`` matrix holding one chunk."""
    OH, OW = geometry.output
    return (-position_start, OH * OW, num_positions, OW, 1)


def tensor_address(t: torch.Tensor):
    """(base, sn, sc, sh, sw) of an (N, C, OH, OW) tensor."""
    return (0, *_image_strides(t))


@launch_plan
def relayout(
    src: torch.Tensor,
    src_address,
    dst: torch.Tensor,
    dst_address,
    channels: int,
    geometry: Geometry,
    position_start: int,
    num_positions: int,
    bias: torch.Tensor | None = None,
) -> None:
    """``dst[n, c, oh, ow] = src[n, c, oh, ow] (+ bias[c])`` over one chunk of positions."""
    check_kernel_device(dst, "output")
    if channels == 0 or num_positions == 0:
        return
    block_c, block_p = _tiles(channels, num_positions, RELAYOUT_CONFIG)
    grid = (cdiv(channels, block_c) * cdiv(num_positions, block_p),)
    launch(
        relayout_kernel,
        grid,
        src,
        dst,
        bias if bias is not None else src,
        position_start,
        num_positions,
        channels,
        geometry.output[1],
        geometry.output_numel,
        *src_address,
        *dst_address,
        HAS_BIAS=bias is not None,
        ACC_DTYPE=accumulator_dtype(dst.dtype),
        BLOCK_C=block_c,
        BLOCK_P=block_p,
        INDEX_64=needs_int64(src, dst),
        num_warps=RELAYOUT_CONFIG["num_warps"],
    )


# --------------------------------------------------------------------------------------------
# F.unfold / F.fold on a batched input
# --------------------------------------------------------------------------------------------


def unfold(x: torch.Tensor, geometry: Geometry) -> torch.Tensor:
    """F.unfold of a batched ``(N, C, *spatial)`` tensor (1 to 3 spatial axes):
    ``(N, C*prod(kernel), prod(output))``, e.g. ``(N, C*KD*KH*KW, OD*OH*OW)`` in 3-D."""
    N, C = x.shape[:2]
    rows, L = C * geometry.kernel_numel, geometry.output_numel
    cols = allocate((N, rows, L), x.dtype, x.device)
    im2col(x, cols, unfold_layout(rows, L), geometry, rows, 0, N * L)
    return cols


def fold(cols: torch.Tensor, geometry: Geometry) -> torch.Tensor:
    """F.fold of a batched ``(N, C*prod(kernel), L)`` tensor: ``(N, C, *geometry.input)``."""
    N, rows, L = cols.shape
    C = rows // geometry.kernel_numel
    out = allocate((N, C, *geometry.input), cols.dtype, cols.device)
    sn, sk, sq = cols.stride()
    layout = ColumnLayout(0, sn, sq, 0, sk)
    col2im(cols, layout, out, geometry, rows, 0, N * L, False)
    return out
