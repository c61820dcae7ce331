"""torch.library custom ops: the boundary torch.compile sees.

Each op takes validated, normalised arguments (int lists, batched tensors) and calls one
launcher in ``ops/``. A fake implementation gives output shapes, dtypes and memory formats
without running anything, so ``torch.compile(fullgraph=True)`` traces models that use them.
Autograd lives in ``autograd.py`` (an ``autograd.Function`` per op calls these ops).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .geometry import make_geometry
from .ops import conv_gemm, depthwise, direct
from .ops import crop as crop_ops
from .ops import im2col as im2col_ops

# --------------------------------------------------------------------------------------------
# unfold / fold
# --------------------------------------------------------------------------------------------


def _window(input_size, kernel_size, dilation, padding, stride):
    return make_geometry(input_size, kernel_size, stride, padding, padding, dilation)


@torch.library.custom_op("tritonconv::unfold", mutates_args=())
def unfold(
    input: Tensor,
    kernel_size: list[int],
    dilation: list[int],
    padding: list[int],
    stride: list[int],
) -> Tensor:
    geometry = _window(input.shape[2:], kernel_size, dilation, padding, stride)
    return im2col_ops.unfold(input, geometry)


@unfold.register_fake
def _(input, kernel_size, dilation, padding, stride):
    geometry = _window(input.shape[2:], kernel_size, dilation, padding, stride)
    rows = input.shape[1] * geometry.kernel_numel
    return input.new_empty((input.shape[0], rows, geometry.output_numel))


@torch.library.custom_op("tritonconv::fold", mutates_args=())
def fold(
    input: Tensor,
    output_size: list[int],
    kernel_size: list[int],
    dilation: list[int],
    padding: list[int],
    stride: list[int],
) -> Tensor:
    geometry = _window(output_size, kernel_size, dilation, padding, stride)
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
    return conv_gemm._empty_like_memory_format(shape, input)


@torch.library.custom_op("tritonconv::conv2d_gemm", mutates_args=())
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


@conv2d_gemm.register_fake
def _(input, weight, bias, stride, pad_before, pad_after, dilation, groups, workspace_limit):
    geometry = _conv_geometry(input.shape, weight.shape, stride, pad_before, pad_after, dilation)
    return _empty_conv_output(input, (input.shape[0], weight.shape[0], *geometry.output))


@torch.library.custom_op("tritonconv::conv2d_gemm_grad_input", mutates_args=())
def conv2d_gemm_grad_input(
    grad_output: Tensor,
    weight: Tensor,
    input_like: Tensor,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    workspace_limit: int,
) -> Tensor:
    """``input_like`` supplies the input's shape, dtype and memory format (not its values)."""
    geometry = _conv_geometry(
        input_like.shape, weight.shape, stride, pad_before, pad_after, dilation
    )
    return conv_gemm.conv2d_grad_input(
        grad_output, weight, input_like.shape, input_like, geometry, groups, workspace_limit
    )


@conv2d_gemm_grad_input.register_fake
def _(grad_output, weight, input_like, stride, pad_before, pad_after, dilation, groups, limit):
    return _empty_conv_output(input_like, input_like.shape)


@torch.library.custom_op("tritonconv::conv2d_gemm_grad_weight", mutates_args=())
def conv2d_gemm_grad_weight(
    grad_output: Tensor,
    input: Tensor,
    weight_size: list[int],
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    workspace_limit: int,
) -> Tensor:
    geometry = _conv_geometry(input.shape, weight_size, stride, pad_before, pad_after, dilation)
    return conv_gemm.conv2d_grad_weight(
        grad_output, input, weight_size, geometry, groups, workspace_limit
    )


@conv2d_gemm_grad_weight.register_fake
def _(grad_output, input, weight_size, stride, pad_before, pad_after, dilation, groups, limit):
    return input.new_empty(weight_size)


# --------------------------------------------------------------------------------------------
# direct convolution (``depthwise=True``: the depthwise kernels, groups == in_channels)
# --------------------------------------------------------------------------------------------


@torch.library.custom_op("tritonconv::conv2d_direct", mutates_args=())
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


@conv2d_direct.register_fake
def _(input, weight, bias, stride, pad_before, pad_after, dilation, groups, depthwise_kernels):
    geometry = _conv_geometry(input.shape, weight.shape, stride, pad_before, pad_after, dilation)
    return _empty_conv_output(input, (input.shape[0], weight.shape[0], *geometry.output))


@torch.library.custom_op("tritonconv::conv2d_direct_grad_input", mutates_args=())
def conv2d_direct_grad_input(
    grad_output: Tensor,
    weight: Tensor,
    input_like: Tensor,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    depthwise_kernels: bool,
) -> Tensor:
    """``input_like`` supplies the input's shape, dtype and memory format (not its values)."""
    geometry = _conv_geometry(
        input_like.shape, weight.shape, stride, pad_before, pad_after, dilation
    )
    if depthwise_kernels:
        return depthwise.depthwise_grad_input(grad_output, weight, input_like, geometry)
    return direct.conv2d_grad_input(grad_output, weight, input_like, geometry, groups)


@conv2d_direct_grad_input.register_fake
def _(grad_output, weight, input_like, stride, pad_before, pad_after, dilation, groups, dw):
    return _empty_conv_output(input_like, input_like.shape)


@torch.library.custom_op("tritonconv::conv2d_direct_grad_weight", mutates_args=())
def conv2d_direct_grad_weight(
    grad_output: Tensor,
    input: Tensor,
    weight_size: list[int],
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    depthwise_kernels: bool,
) -> Tensor:
    geometry = _conv_geometry(input.shape, weight_size, stride, pad_before, pad_after, dilation)
    if depthwise_kernels:
        return depthwise.depthwise_grad_weight(grad_output, input, weight_size, geometry)
    return direct.conv2d_grad_weight(grad_output, input, weight_size, geometry, groups)


@conv2d_direct_grad_weight.register_fake
def _(grad_output, input, weight_size, stride, pad_before, pad_after, dilation, groups, dw):
    return input.new_empty(weight_size)


# --------------------------------------------------------------------------------------------
# crop
# --------------------------------------------------------------------------------------------


@torch.library.custom_op("tritonconv::crop", mutates_args=())
def crop(input: Tensor, offsets: list[int], sizes: list[int]) -> Tensor:
    return crop_ops.crop(input, offsets, sizes)


@crop.register_fake
def _(input, offsets, sizes):
    return crop_ops.empty_in_order(input, sizes, crop_ops.dim_order(input))


@torch.library.custom_op("tritonconv::crop_backward", mutates_args=())
def crop_backward(
    grad_output: Tensor, input_size: list[int], offsets: list[int], dim_order: list[int]
) -> Tensor:
    """``dim_order``: the input's dimensions from the largest stride to the smallest."""
    return crop_ops.crop_backward(grad_output, input_size, offsets, dim_order)


@crop_backward.register_fake
def _(grad_output, input_size, offsets, dim_order):
    return crop_ops.empty_in_order(grad_output, input_size, dim_order)
