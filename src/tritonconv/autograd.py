"""Thin ``torch.autograd.Function`` classes over the custom ops of ``library.py``.

Forward saves what backward needs; backward calls other custom ops. Nothing here launches a
kernel directly, so ``torch.compile`` sees only custom ops.
"""

from __future__ import annotations

import torch

from . import library
from .ops import crop as crop_ops

ops = library  # the ops: custom ops under torch.compile, direct calls in eager mode


class _NoGraph:
    """Stands in for ``ctx`` when autograd has nothing to record: what forward saves is dropped."""

    def save_for_backward(self, *tensors):
        pass


def run(function: type[torch.autograd.Function], *args):
    """``function.apply(*args)``, or just its forward when no input needs a gradient: no graph
    node is made (about 14 µs less per call on the H100, benchmarks/NOTES.md)."""
    if torch.is_grad_enabled() and any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args
    ):
        return function.apply(*args)
    return function.forward(_NoGraph(), *args)


class Unfold(torch.autograd.Function):
    """im2col; its adjoint (the gradient) is col2im."""

    @staticmethod
    def forward(ctx, input, kernel_size, dilation, padding, stride):
        ctx.window = (kernel_size, dilation, padding, stride)
        ctx.output_size = list(input.shape[2:])
        return ops.unfold(input, kernel_size, dilation, padding, stride)

    @staticmethod
    def backward(ctx, grad_cols):
        grad = ops.fold(grad_cols, ctx.output_size, *ctx.window)
        return grad, None, None, None, None


class Fold(torch.autograd.Function):
    """col2im; its adjoint (the gradient) is im2col."""

    @staticmethod
    def forward(ctx, input, output_size, kernel_size, dilation, padding, stride):
        ctx.window = (kernel_size, dilation, padding, stride)
        return ops.fold(input, output_size, kernel_size, dilation, padding, stride)

    @staticmethod
    def backward(ctx, grad_image):
        return ops.unfold(grad_image, *ctx.window), None, None, None, None, None


def _conv_function(name: str, doc: str, forward_op, backward_op, option=None):
    """An autograd Function over a convolution family's two ops.

    ``apply(input, weight, bias, stride, pad_before, pad_after, dilation, groups,
    workspace_limit)`` is common to every algorithm; the ops' last parameter is the family's
    option: the workspace limit (im2col+GEMM), or whether to use the depthwise kernels.
    """

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(
            ctx, input, weight, bias, stride, pad_before, pad_after, dilation, groups, limit
        ):
            family_option = limit if option is None else option
            ctx.params = (stride, pad_before, pad_after, dilation, groups, family_option)
            ctx.has_bias = bias is not None
            ctx.save_for_backward(input, weight)
            return forward_op(input, weight, bias, *ctx.params)

        @staticmethod
        def backward(ctx, grad_output):
            input, weight = ctx.saved_tensors
            grad_input = grad_weight = grad_bias = None
            mask = list(ctx.needs_input_grad[:2])
            if any(mask):
                grad_input, grad_weight = backward_op(grad_output, input, weight, *ctx.params, mask)
                grad_input = grad_input if mask[0] else None
                grad_weight = grad_weight if mask[1] else None
            if ctx.has_bias and ctx.needs_input_grad[2]:
                grad_bias = grad_output.sum(dim=(0, 2, 3))
            return grad_input, grad_weight, grad_bias, None, None, None, None, None, None

    Function.__name__ = Function.__qualname__ = name
    Function.__doc__ = doc
    return Function


Conv2dGemm = _conv_function(
    "Conv2dGemm",
    "Convolution by im2col + GEMM; gradients for input, weight and bias.",
    ops.conv2d_gemm,
    ops.conv2d_gemm_backward,
)
Conv2dDirect = _conv_function(
    "Conv2dDirect",
    "Direct convolution (any groups; integer dtypes exact).",
    ops.conv2d_direct,
    ops.conv2d_direct_backward,
    option=False,
)
Conv2dDepthwise = _conv_function(
    "Conv2dDepthwise",
    "Depthwise convolution (groups == in_channels), specialised kernels.",
    ops.conv2d_direct,
    ops.conv2d_direct_backward,
    option=True,
)


class Crop(torch.autograd.Function):
    """Crop ``input[offsets[d] : offsets[d] + sizes[d]]``; the gradient writes the output
    gradient into the window and zeros around it, in the input's layout."""

    @staticmethod
    def forward(ctx, input, offsets, sizes):
        ctx.input_size = list(input.shape)
        ctx.offsets = offsets
        ctx.dim_order = crop_ops.dim_order(input)
        return ops.crop(input, offsets, sizes)

    @staticmethod
    def backward(ctx, grad_output):
        grad_input = ops.crop_backward(grad_output, ctx.input_size, ctx.offsets, ctx.dim_order)
        return grad_input, None, None
