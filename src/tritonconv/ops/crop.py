"""Launchers for the crop layer: forward, backward, and the shifted-window copy under both.

Arguments arrive validated (``geometry.check_crop``): ``offsets`` and ``sizes`` have one entry
per input dimension (0 and the input's size on the dimensions that are kept).

Memory layout: the output and the input gradient are dense, with their dimensions in memory in
the order of the input's strides (:func:`dim_order`): a contiguous input gives a contiguous
output, a channels-last input a channels-last one. Reading and writing then both run along the
innermost dimension.

:func:`crop_into` reduces any problem to the kernel's 6 axes (see ``kernels/crop.py``). Tiles
cover the two innermost axes, the innermost first: up to 4096 elements on the GPU
(memory-bound; 8 warps hold 16 elements per thread, smaller tiles get fewer warps), up to
16384 under the interpreter, where every program is a Python-level step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .._runtime import INTERPRETER, check_kernel_device
from ..kernels.crop import RANK, crop_kernel
from ..launch import allocate, launch, launch_plan
from .common import cdiv, dense_strides, needs_int64, next_power_of_2

#: Elements per program: memory-bound tiles on the GPU, large ones under the interpreter.
TILE = 16384 if INTERPRETER else 4096


def dim_order(t: torch.Tensor) -> list[int]:
    """The dimensions of ``t`` from the largest stride to the smallest (ties keep their order).
    An insertion sort by comparisons: Dynamo traces those on symbolic strides (dynamic shapes)
    where it refuses ``sorted`` with a key."""
    order: list[int] = []
    for d in range(t.dim()):
        i = len(order)
        while i > 0 and t.stride(order[i - 1]) < t.stride(d):
            i -= 1
        order.insert(i, d)
    return order


def empty_in_order(like: torch.Tensor, shape: Sequence[int], order: Sequence[int], zero=False):
    """A dense tensor of ``shape`` (``like``'s dtype and device), laid out in ``order``."""
    return allocate(shape, like.dtype, like.device, dense_strides(shape, order), zero=zero)


def _axes(src: torch.Tensor, dst: torch.Tensor, shift: Sequence[int]):
    """The copy ``dst[i] = src[i + shift]`` as ``(dst_size, src_size, shift, src_stride)`` per
    axis, outermost first: in ``dst``'s memory order, size-1 axes dropped, an axis merged into
    its outer neighbour when it is whole (same size in both tensors, no shift) and the source's
    strides chain, and padded on the left to the kernel's ``RANK`` axes."""
    axes: list[tuple[int, int, int, int]] = []
    for d in dim_order(dst):
        axis = (dst.shape[d], src.shape[d], shift[d], src.stride(d))
        if axis[0] == 1 and axis[1] == 1:
            continue
        if axes:
            inner_dst, inner_src, inner_shift, inner_stride = axis
            outer = axes[-1]
            if inner_dst == inner_src and inner_shift == 0 and outer[3] == inner_src * inner_stride:
                axes[-1] = (
                    outer[0] * inner_dst,
                    outer[1] * inner_src,
                    outer[2] * inner_src,
                    inner_stride,
                )
                continue
        axes.append(axis)
    assert len(axes) <= RANK, f"crop of {src.dim()} dimensions exceeds the kernel's {RANK} axes"
    return [(1, 1, 0, 0)] * (RANK - len(axes)) + axes


@launch_plan
def crop_into(src: torch.Tensor, dst: torch.Tensor, shift: Sequence[int]) -> None:
    """``dst[i] = src[i + shift]`` where that index lies inside ``src``, 0 elsewhere.

    ``dst`` must be dense (any dimension order) with as many dimensions as ``src``; every
    element of ``dst`` is written.
    """
    check_kernel_device(src, "input")
    check_kernel_device(dst, "output")
    if dst.numel() == 0:
        return
    axes = _axes(src, dst, shift)
    dst_sizes, src_sizes, shifts, src_strides = zip(*axes)
    rows, cols = dst_sizes[4:]
    block_c = min(TILE, next_power_of_2(cols))
    block_r = min(TILE // block_c, next_power_of_2(rows))
    outer = dst.numel() // (rows * cols)
    grid = (outer * cdiv(rows, block_r) * cdiv(cols, block_c),)
    launch(
        crop_kernel,
        grid,
        src,
        dst,
        *dst_sizes[1:],
        *shifts,
        *src_sizes,
        *src_strides,
        BLOCK_R=block_r,
        BLOCK_C=block_c,
        INDEX_64=needs_int64(src, dst),
        num_warps=max(1, min(8, block_r * block_c // 512)),
    )


def crop(input: torch.Tensor, offsets: Sequence[int], sizes: Sequence[int]) -> torch.Tensor:
    """``input[offsets[d] : offsets[d] + sizes[d]]`` on every dimension, as a new tensor."""
    out = empty_in_order(input, sizes, dim_order(input))
    crop_into(input, out, tuple(offsets))
    return out


def crop_backward(
    grad_output: torch.Tensor,
    input_size: Sequence[int],
    offsets: Sequence[int],
    order: Sequence[int],
) -> torch.Tensor:
    """The input gradient: ``grad_output`` inside the window, 0 outside, laid out in ``order``
    (the input's :func:`dim_order`)."""
    empty_window = grad_output.numel() == 0  # nothing to read: all zeros
    grad_input = empty_in_order(grad_output, input_size, order, zero=empty_window)
    if empty_window:
        return grad_input
    crop_into(grad_output, grad_input, tuple(-o for o in offsets))
    return grad_input
