"""torch.library custom ops: the boundary torch.compile sees.

Each op takes validated, normalised arguments (int lists, batched tensors) and calls one
launcher in ``ops/``. A fake implementation gives output shapes, dtypes and memory formats
without running anything, so ``torch.compile(fullgraph=True)`` traces models that use them.
Autograd lives in ``autograd.py`` (an ``autograd.Function`` per op calls these ops).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .geometry import make_geometry, window_geometry
from .ops import conv_gemm, depthwise, direct
from .ops import crop as crop_ops
from .ops import im2col as im2col_ops
from .ops.common import empty_like_format


class Op:
    """One tritonconv op: registered as ``torch.ops.tritonconv.<name>`` (with a fake), called
    through that registration while torch.compile traces, and directly in eager mode, which
    skips the custom-op dispatch (about 35 µs per call on the H100, benchmarks/NOTES.md)."""

    def __init__(self, name: str, fn):
        self.name = f"tritonconv::{name}"
        torch.library.custom_op(self.name, fn, mutates_args=())
        self.traced = getattr(torch.ops.tritonconv, name)
        self.impl = fn
        self.__doc__ = fn.__doc__

    def register_fake(self, fake):
        torch.library.register_fake(self.name)(fake)
        return fake

    def __call__(self, *args):
        if torch.compiler.is_compiling():
            return self.traced(*args)
        return self.impl(*args)


def custom_op(name: str):
    """Decorator: ``fn`` (type-annotated, no mutation) becomes the op ``tritonconv::<name>``."""
    return lambda fn: Op(name, fn)


# --------------------------------------------------------------------------------------------
# unfold / fold
# --------------------------------------------------------------------------------------------


@custom_op("unfold")
def unfold(
    input: Tensor,
    kernel_size: list[int],
    dilation: list[int],
    padding: list[int],
    stride: list[int],
) -> Tensor:
    geometry = window_geometry(input.shape[2:], kernel_size, dilation, padding, stride)
    return im2col_ops.unfold(input, geometry)


@unfold.register_fake
def _(input, kernel_size, dilation, padding, stride):
    geometry = window_geometry(input.shape[2:], kernel_size, dilation, padding, stride)
    rows = input.shape[1] * geometry.kernel_numel
    return input.new_empty((input.shape[0], rows, geometry.output_numel))


@custom_op("fold")
def fold(
    input: Tensor,
    output_size: list[int],
    kernel_size: list[int],
    dilation: list[int],
    padding: list[int],
    stride: list[int],
) -> Tensor:
    geometry = window_geometry(output_size, kernel_size, dilation, padding, stride)
    return im2col_ops.fold(input, geometry)


@fold.register_fake
def _(input, output_size, kernel_size, dilation, padding, stride):
    channels = input.shape[1] // (kernel_size[0] * kernel_size[1])
    return input.new_empty((input.shape[0], channels, *output_size))


# --------------------------------------------------------------------------------------------
# convolution by im2col + GEMM
# --------------------------------------------------------------------------------------------


def _conv_geometry(input_size, weight_size, stride, pad_before, pad_after, dilation):
    return make_geometry(input_size[2:], weight_size[2:], stride, pad_before, pad_after, dilation)


def _empty_conv_output(input: Tensor, shape) -> Tensor:
    return empty_like_format(shape, input)


@custom_op("conv2d_gemm")
def conv2d_gemm(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    workspace_limit: int,
) -> Tensor:
    geometry = _conv_geometry(input.shape, weight.shape, stride, pad_before, pad_after, dilation)
    return conv_gemm.conv2d_forward(input, weight, bias, geometry, groups, workspace_limit)


def _conv_forward_fake(
    input, weight, bias, stride, pad_before, pad_after, dilation, groups, option
):
    """Output of any convolution family's forward op (``option``: the family's last argument)."""
    geometry = _conv_geometry(input.shape, weight.shape, stride, pad_before, pad_after, dilation)
    return _empty_conv_output(input, (input.shape[0], weight.shape[0], *geometry.output))


conv2d_gemm.register_fake(_conv_forward_fake)


@custom_op("conv2d_gemm_backward")
def conv2d_gemm_backward(
    grad_output: Tensor,
    input: Tensor,
    weight: Tensor,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    workspace_limit: int,
    output_mask: list[bool],
) -> tuple[Tensor, Tensor]:
    """(grad_input, grad_weight); an output left out by ``output_mask`` is an empty tensor."""
    geometry = _conv_geometry(input.shape, weight.shape, stride, pad_before, pad_after, dilation)
    grad_input, grad_weight = conv_gemm.conv2d_backward(
        grad_output, input, weight, geometry, groups, workspace_limit, *output_mask
    )
    empty = input.new_empty(0)
    return (
        empty if grad_input is None else grad_input,
        empty if grad_weight is None else grad_weight,
    )


def _conv_backward_fake(
    grad_output, input, weight, stride, pad_before, pad_after, dilation, groups, option, mask
):
    grad_input = _empty_conv_output(input, input.shape) if mask[0] else input.new_empty(0)
    return grad_input, input.new_empty(weight.shape if mask[1] else 0)


conv2d_gemm_backward.register_fake(_conv_backward_fake)


# --------------------------------------------------------------------------------------------
# direct convolution (``depthwise=True``: the depthwise kernels, groups == in_channels)
# --------------------------------------------------------------------------------------------


@custom_op("conv2d_direct")
def conv2d_direct(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    depthwise_kernels: bool,
) -> Tensor:
    geometry = _conv_geometry(input.shape, weight.shape, stride, pad_before, pad_after, dilation)
    if depthwise_kernels:
        return depthwise.depthwise_forward(input, weight, bias, geometry)
    return direct.conv2d_forward(input, weight, bias, geometry, groups)


conv2d_direct.register_fake(_conv_forward_fake)


@custom_op("conv2d_direct_backward")
def conv2d_direct_backward(
    grad_output: Tensor,
    input: Tensor,
    weight: Tensor,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    depthwise_kernels: bool,
    output_mask: list[bool],
) -> tuple[Tensor, Tensor]:
    """(grad_input, grad_weight); an output left out by ``output_mask`` is an empty tensor."""
    geometry = _conv_geometry(input.shape, weight.shape, stride, pad_before, pad_after, dilation)
    empty = input.new_empty(0)
    grad_input = grad_weight = empty
    if output_mask[0]:
        if depthwise_kernels:
            grad_input = depthwise.depthwise_grad_input(grad_output, weight, input, geometry)
        else:
            grad_input = direct.conv2d_grad_input(grad_output, weight, input, geometry, groups)
    if output_mask[1]:
        weight_size = list(weight.shape)
        if depthwise_kernels:
            grad_weight = depthwise.depthwise_grad_weight(grad_output, input, weight_size, geometry)
        else:
            grad_weight = direct.conv2d_grad_weight(
                grad_output, input, weight_size, geometry, groups
            )
    return grad_input, grad_weight


conv2d_direct_backward.register_fake(_conv_backward_fake)


# --------------------------------------------------------------------------------------------
# crop
# --------------------------------------------------------------------------------------------


@custom_op("crop")
def crop(input: Tensor, offsets: list[int], sizes: list[int]) -> Tensor:
    return crop_ops.crop(input, offsets, sizes)


@crop.register_fake
def _(input, offsets, sizes):
    return crop_ops.empty_in_order(input, sizes, crop_ops.dim_order(input))


@custom_op("crop_backward")
def crop_backward(
    grad_output: Tensor, input_size: list[int], offsets: list[int], dim_order: list[int]
) -> Tensor:
    """``dim_order``: the input's dimensions from the largest stride to the smallest."""
    return crop_ops.crop_backward(grad_output, input_size, offsets, dim_order)


@crop_backward.register_fake
def _(grad_output, input_size, offsets, dim_order):
    return crop_ops.empty_in_order(grad_output, input_size, dim_order)
